"""The session's table of requests asked on a request stream directly
(``api/request_stream.py::PendingAnswers``): only ids asked there are taken, an answer settles
its asker once, an error answer is the client's own error, progress reaches the asker, and an id
is forgotten when its asker gives up."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp_types import ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCResponse

from mcp_reconciler.api.request_stream import PendingAnswers

pytestmark = pytest.mark.anyio


def progress(token: Any, value: Any = 1) -> JSONRPCNotification:
    return JSONRPCNotification(
        jsonrpc="2.0", method="notifications/progress", params={"progressToken": token, "progress": value, "total": 2}
    )


async def test_an_answer_settles_its_asker_and_only_ids_asked_are_taken() -> None:
    answers = PendingAnswers()
    with answers.expect("gw-relay-1", None) as waiting:
        assert not answers.takes(JSONRPCResponse(jsonrpc="2.0", id="gw-relay-2", result={}))
        assert not answers.takes(JSONRPCResponse(jsonrpc="2.0", id=1, result={}))
        answer = JSONRPCResponse(jsonrpc="2.0", id="gw-relay-1", result={"model": "m"})
        assert answers.takes(answer)
        await answers.take(answer)
        with anyio.fail_after(5):
            assert await waiting.result() == {"model": "m"}
        assert not answers.takes(answer), "settled once: a second answer is not ours"
    assert len(answers) == 0


async def test_an_error_answer_is_the_clients_own_error() -> None:
    answers = PendingAnswers()
    with answers.expect("gw-relay-1", None) as waiting:
        await answers.take(JSONRPCError(jsonrpc="2.0", id="gw-relay-1", error=ErrorData(code=-1, message="no")))
        with anyio.fail_after(5), pytest.raises(MCPError) as raised:
            await waiting.result()
    assert raised.value.error.code == -1 and raised.value.error.message == "no"


async def test_progress_reaches_the_asker_and_malformed_progress_is_not_taken() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    answers = PendingAnswers()
    with answers.expect("gw-relay-1", on_progress):
        assert answers.takes(progress("gw-relay-1"))
        await answers.take(progress("gw-relay-1"))
        for bad in (progress("gw-relay-9"), progress(True), progress("gw-relay-1", value=True), progress(1)):
            assert not answers.takes(bad)
    assert seen == [(1.0, 2.0, None)]
    with answers.expect("gw-relay-2", None):
        assert not answers.takes(progress("gw-relay-2")), "no progress callback: not ours"


async def test_an_asker_that_gives_up_is_forgotten() -> None:
    answers = PendingAnswers()
    with anyio.CancelScope() as scope:
        with answers.expect("gw-relay-1", None) as waiting:
            scope.cancel()
            await waiting.result()
    assert len(answers) == 0
    assert not answers.takes(JSONRPCResponse(jsonrpc="2.0", id="gw-relay-1", result={}))
