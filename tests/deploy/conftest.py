"""Deploy tests (deploy/, README "Deploy"). ``no_leaked_children`` (autouse, tests/conftest.py)
asserts that no child process of the test process outlives a test (I14)."""
