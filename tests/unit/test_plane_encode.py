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
    assert len(own) > 20, "the ticker never ran while the result was encoded"
    assert max(own) < max(spent / 4, 0.05), (max(own), spent)
