"""The answers a client owes the gateway (``api/plane/channel.Replies``): each reaches the
request waiting for it, a late or unknown one is dropped, and the number of requests awaiting
one client is bounded (I18: N wait, N+1 is refused)."""

from __future__ import annotations

import anyio
import pytest
from mcp import MCPError

from mcp_reconciler.api.plane.channel import Replies
from mcp_reconciler.api.plane.jsonrpc import Reply, decode

pytestmark = pytest.mark.anyio


async def test_a_reply_reaches_the_request_waiting_for_it() -> None:
    replies = Replies()
    with replies.expect("gw-1") as answer:
        assert replies.deliver(Reply("gw-1", {"ok": True}, None))
        with anyio.fail_after(1):
            assert (await answer.receive()).result == {"ok": True}
    assert not replies.deliver(Reply("gw-1", {}, None))  # late: no one waits any more
    assert not replies.deliver(Reply("nope", {}, None))


def test_I18_requests_awaiting_one_client_are_bounded() -> None:
    replies = Replies(limit=2)
    with replies.expect("a"), replies.expect("b"):
        with pytest.raises(MCPError), replies.expect("c"):
            pass
    with replies.expect("c"):  # freed once the others ended
        pass


def test_a_response_body_decodes_as_a_reply_and_nothing_else_does() -> None:
    assert decode(b'{"jsonrpc":"2.0","id":"gw-1","result":{}}') == Reply("gw-1", {}, None)
    assert isinstance(decode(b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}'), type(decode(b"[]")))
    assert not isinstance(decode(b'{"jsonrpc":"2.0","id":1,"method":"ping"}'), Reply)
