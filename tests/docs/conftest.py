"""README tests run the gateway and its upstreams as processes; ``no_leaked_children``
(autouse, tests/conftest.py) asserts that none of the test's child processes outlives a test (I14)."""
