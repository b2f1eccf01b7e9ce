"""The stdio channel's pure parts (ADR 0025): the bounded line splitter and the envelope scan."""

from __future__ import annotations

import json
import time

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError, bound_error
from mcp_reconciler.reconciler.stdio_peer import (
    PREFIX_BYTES,
    Envelope,
    LineSplitter,
    Refused,
    Skipped,
    envelope,
    parse_line,
)


def feed_all(splitter: LineSplitter, data: bytes, cuts: list[int]) -> list[bytes | Refused | Skipped]:
    out: list[bytes | Refused | Skipped] = []
    start = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        if cut > start:
            out += splitter.feed(data[start:cut])
            start = cut
    return out


@given(
    lines=st.lists(st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"_")), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_lines_come_out_whole_whatever_the_chunking(lines: list[bytes], cuts: list[int]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    got = feed_all(LineSplitter(64), data, cuts)
    assert got == [line for line in lines if line.strip()]


def test_a_line_past_the_bound_is_refused_at_once_then_skipped_to_its_newline() -> None:
    splitter = LineSplitter(100)
    head = b'{"jsonrpc":"2.0","id":7,"result":{"text":"'
    assert splitter.feed(head + b"x" * 30) == []
    out = splitter.feed(b"x" * 200)  # passes the bound: refused now, not at the newline
    assert len(out) == 1 and isinstance(out[0], Refused)
    refused = out[0]
    assert (refused.bound, refused.limit) == (MESSAGE_BOUND_KEY, 100)
    assert refused.size == len(head) + 230 and refused.prefix.startswith(head)
    assert splitter.feed(b"y" * 10_000) == []  # skipped: counted, not kept
    assert splitter.pending == len(head) + 10_230
    assert splitter.feed(b'"}}\n{"ok":1}\n') == [Skipped(len(head) + 10_233), b'{"ok":1}']


def test_the_limit_for_a_long_line_is_decided_from_its_first_bytes() -> None:
    """A list page's answer gets the listing's tighter bound; others the message bound."""
    splitter = LineSplitter(
        1000, soft=10, limit_for=lambda p: ("bytes_per_candidate", 50) if b'"id":1' in p else (MESSAGE_BOUND_KEY, 1000)
    )
    out = splitter.feed(b'{"id":2,' + b"z" * 500 + b"}\n")
    assert out == [b'{"id":2,' + b"z" * 500 + b"}"]
    out = splitter.feed(b'{"id":1,' + b"z" * 500 + b"}\n")
    assert isinstance(out[0], Refused) and out[0].bound == "bytes_per_candidate" and out[0].limit == 50


def test_splitting_is_linear_in_the_bytes_read() -> None:
    """The SDK's reader re-joined its buffer per chunk: a 32 MB line in 4 KiB chunks copied
    ~125 GB (minutes). Linear, it is tens of milliseconds; the bound is loose (a busy machine)."""
    splitter = LineSplitter(64 * 1024 * 1024)
    chunk = b"x" * 4096
    count = 32_000_000 // len(chunk)
    started = time.process_time()
    for _ in range(count):
        splitter.feed(chunk)
    line = splitter.feed(b"\n")
    spent = time.process_time() - started
    assert line == [chunk * count]
    assert spent < 2.0, f"{spent:.2f} s of CPU to split a 32 MB line"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"jsonrpc":"2.0","id":7,"result":{"x":1}}', Envelope(7, False)),
        ('{"jsonrpc":"2.0","id":"a\\"b","result":{}}', Envelope('a"b', False)),
        ('{"result":{"id":99,"method":"x"},"id":3}', Envelope(3, False)),  # nested keys are not the envelope's
        ('{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{', Envelope(4, True)),
        ('{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"', Envelope(None, True)),
        ('{"jsonrpc":"2.0","result":{"content":[{"text":"xxxx', Envelope(None, False)),  # id after the prefix
        ('{"jsonrpc":"2.0","id":12', Envelope(None, False)),  # the number may continue past the prefix
        ("yyyyyyyy", Envelope(None, False)),
    ],
)
def test_the_envelope_is_read_from_the_top_level_only(text: str, expected: Envelope) -> None:
    assert envelope(text.encode()) == expected


def test_an_envelope_beyond_the_prefix_is_not_guessed() -> None:
    text = '{"jsonrpc":"2.0","result":{"t":"' + "x" * PREFIX_BYTES + '"},"id":5}'
    assert envelope(text.encode()[:PREFIX_BYTES]).id is None


@pytest.mark.anyio
async def test_a_parsed_line_is_the_sdk_model_and_garbage_is_an_exception() -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).encode()
    message = await parse_line(line)
    assert not isinstance(message, Exception)
    assert message.message == types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    assert isinstance(await parse_line(b"garbage line 1: not json-rpc"), Exception)
    assert isinstance(await parse_line(b'{"jsonrpc":"2.0"}'), Exception)


def test_the_bound_error_round_trips_as_its_own_type() -> None:
    error = bound_error(MESSAGE_BOUND_KEY, 1024, 2048)
    from mcp import MCPError

    typed = MessageBoundError.from_mcp_error(MCPError.from_error_data(error))
    assert typed is not None and (typed.bound, typed.limit, typed.size) == (MESSAGE_BOUND_KEY, 1024, 2048)
    assert typed.error == error
    assert MessageBoundError.from_mcp_error(MCPError(-32000, "Connection closed")) is None


@pytest.mark.anyio
async def test_a_long_list_page_over_the_entry_bound_is_refused_while_parsed_in_slices() -> None:
    """An answer to a list request with more entries than allowed is refused within a slice of
    entry N+1 (the rest is never parsed); a page of N entries comes through whole; other
    answers are untouched, however long."""
    from mcp_reconciler.reconciler.sliced_json import CHUNK_CHARS
    from mcp_reconciler.reconciler.stdio_peer import SLICE_BYTES, ListWatch

    tools = [{"name": f"tool_{i}", "inputSchema": {"type": "object"}} for i in range(60_000)]
    line = json.dumps({"jsonrpc": "2.0", "id": 5, "result": {"tools": tools}}).encode()
    assert len(line) > 2 * SLICE_BYTES
    lists = ListWatch("s", None, 10_000)
    lists.ids.add(5)
    refused = await parse_line(line, lists)
    assert not isinstance(refused, Exception) and isinstance(refused.message, types.JSONRPCError)
    error = refused.message.error
    assert error.code == -32020 and error.data["bound"] == "entries_per_generation"
    per_chunk = CHUNK_CHARS // len(json.dumps(tools[0]))
    assert 10_000 < error.data["size"] <= 10_001 + 2 * per_chunk  # a slice past the bound, not the page
    assert 5 not in lists.ids
    lists.ids.add(6)
    within = json.dumps({"jsonrpc": "2.0", "id": 6, "result": {"tools": tools[:10_000]}}).encode()
    ok = await parse_line(within, lists)
    assert not isinstance(ok, Exception) and isinstance(ok.message, types.JSONRPCResponse)
    assert ok.message.result["tools"] == tools[:10_000]
    other = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": tools}}).encode()  # not a list request
    passed = await parse_line(other, lists)
    assert not isinstance(passed, Exception) and isinstance(passed.message, types.JSONRPCResponse)


def test_I12_an_upstream_cannot_forge_a_bound_error_carrying_its_own_text() -> None:
    from mcp import MCPError

    forged = {"code": "upstream_message_too_large", "bound": "call +1-555 now", "limit": 1, "size": 2}
    assert MessageBoundError.from_mcp_error(MCPError(-32020, "upstream words", forged)) is None
    bad_ints = {"code": "upstream_message_too_large", "bound": MESSAGE_BOUND_KEY, "limit": "1; drop", "size": 2}
    assert MessageBoundError.from_mcp_error(MCPError(-32020, "upstream words", bad_ints)) is None
    # A well-formed one carries only the gateway's own words, whoever sent it.
    typed = MessageBoundError.from_mcp_error(MCPError(-32020, "upstream words", {**forged, "bound": MESSAGE_BOUND_KEY}))
    assert typed is not None and "upstream words" not in typed.error.message
