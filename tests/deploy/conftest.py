"""Deploy tests (deploy/, README "Deploy"). ``no_leaked_children`` (autouse) asserts that no child
process of the test process outlives a test (I14)."""

from tests.integration.conftest import no_leaked_children  # noqa: F401 - the autouse fixture must be visible here
