from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.support.children import child_pids, leaked_children


def pytest_collection_finish(session: pytest.Session) -> None:
    """What is alive once the tests are collected (every import, every test item) lives for the
    whole run: frozen out of the collector's passes, as ``serve`` freezes its imports' heap
    (api/cli.py). Unfrozen, every gen-2 pass walked all of it inside whatever test was running
    (tests/unit + tests/property: 76 passes of ~150 ms, 12-14 s of collector CPU; 300 ms in one
    CI failure, where a CPU-between-turns test measured it as the code's); frozen, ~55 ms a pass
    and 7.6 s in all. ``own_cpu_between_turns`` keeps this freeze (tests/support/loop_probe.py)."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_leaked_children() -> Iterator[None]:
    """I14, for every test: no child process started during the test survives it (after a
    bounded wait for its owner to reap it). A leaked child is killed, then the test fails."""
    before = child_pids()
    yield
    if leaked := leaked_children(before):
        pytest.fail(f"child processes outlived the test: {leaked}")
