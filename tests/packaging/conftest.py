"""Packaging tests: the wheel installed into a fresh venv outside the clone, and the bundled
demo served from package data. ``no_leaked_children`` (autouse, tests/conftest.py) asserts that no child process
of the test process outlives a test (I14)."""
