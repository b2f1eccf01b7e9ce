"""README tests run the gateway and its upstreams as processes; ``no_leaked_children``
(autouse) asserts that none of the test's child processes outlives a test (I14)."""

from tests.integration.conftest import no_leaked_children  # noqa: F401 - the autouse fixture must be visible here
