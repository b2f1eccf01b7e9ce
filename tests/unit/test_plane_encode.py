"""``api/plane/jsonrpc.encode_sliced`` (ADR 0040): a result encoded in pieces is byte for byte
``encode``'s JSON, whatever its shape, and a 30 MB result leaves the loop turns meanwhile."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_reconciler.api.plane import jsonrpc, sse
from tests.support.loop_probe import own_cpu_between_turns

pytestmark = pytest.mark.anyio

texts = st.text(alphabet=st.sampled_from(["a", '"', "\\", "\n", "é", "€", "😀", "\x01", "\ud800"]))
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts
any_json = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner) | st.dictionaries(texts, inner, max_size=5),
    max_leaves=30,
)


@pytest.fixture
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonrpc, "PIECE_CHARS", 12)  # every rule (member, batch, string piece) on small values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(any_json)  # the fixture only sets a constant: nothing to reset between inputs
def test_any_result_encodes_to_the_same_bytes_in_pieces(tiny_pieces: None, value: object) -> None:
    message = jsonrpc.result_message(7, {"content": [value], "structuredContent": {"v": value}})
    pieces = anyio.run(jsonrpc.encode_sliced, message)
    assert b"".join(pieces) == jsonrpc.encode(message)


async def test_an_sse_frame_in_pieces_is_the_frame() -> None:
    message = jsonrpc.result_message("a", {"content": [{"type": "text", "text": "x" * 600_000}]})
    assert b"".join(await sse.frame_sliced(message, "s/3")) == sse.frame(message, "s/3")


async def test_a_30_MB_result_is_encoded_with_the_loop_getting_turns() -> None:
    """One ``json.dumps`` of it held the loop 190-300 ms; in pieces, the loop thread's own CPU
    between two turns stays far below the whole encode's (loose: a shared machine)."""
    text = ('plain text, "quoted", \\ and é€😀 ' * 1_000_000)[:30_000_000]
    message = jsonrpc.result_message(1, {"content": [{"type": "text", "text": text}], "isError": False})
    pieces, own, spent = await own_cpu_between_turns(lambda: jsonrpc.encode_sliced(message))
    assert b"".join(pieces) == jsonrpc.encode(message)
    # 5 ms slices: a faster machine encodes it in 17 of them (seen in CI), a slower one in 60.
    assert len(own) > 8, "the ticker never ran while the result was encoded"
    assert max(own) < max(spent / 4, 0.05), (max(own), spent)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(result=st.dictionaries(texts, any_json, max_size=5), id_=st.integers() | texts)
def test_an_encoded_result_is_spliced_to_the_bytes_of_encoding_it(tiny_pieces: None, result: dict, id_: object) -> None:
    """A kept list page (``EncodedResult``) goes out as its own bytes inside the response frame,
    byte for byte what encoding the whole response writes, by either encoder."""
    kept = anyio.run(jsonrpc.EncodedResult.of, result)
    assert kept == result and kept.wire == jsonrpc.encode(result)
    plain, spliced = jsonrpc.result_message(id_, result), jsonrpc.result_message(id_, kept)  # type: ignore[arg-type]
    assert jsonrpc.encode(spliced) == jsonrpc.encode(plain)
    pieces = anyio.run(jsonrpc.encode_sliced, spliced)
    assert b"".join(pieces) == jsonrpc.encode(plain)
    assert any(piece is kept.wire for piece in pieces)  # spliced, not encoded again


async def test_an_encoded_result_in_another_envelope_is_encoded_whole() -> None:
    """Only a plain response envelope is spliced: anything else around it is encoded as a dict."""
    kept = jsonrpc.EncodedResult({"a": 1}, b'{"a":2}')  # bytes that differ, to see which is used
    assert jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "result": kept}) == b'{"jsonrpc":"2.0","id":1,"result":{"a":2}}'
    odd = {"jsonrpc": "2.0", "id": 1, "result": kept, "extra": 0}
    assert jsonrpc.encode(odd) == b'{"jsonrpc":"2.0","id":1,"result":{"a":1},"extra":0}'
