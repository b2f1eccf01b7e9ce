"""``api/plane/era2025._coalesced``: how a 2025-era stream's event is cut into ``send`` calls —
the same bytes in order, one send for a small event, and a big piece never copied (ADR 0040)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcp_reconciler.api.plane.era2025 import _SMALL, JOIN_MAX, _coalesced

_piece = st.one_of(st.binary(max_size=64), st.integers(_SMALL, JOIN_MAX).map(lambda n: b"x" * n))


@given(st.lists(_piece, min_size=1, max_size=8))
def test_coalesced_pieces_are_the_same_bytes_and_big_ones_are_not_copied(pieces: list[bytes]) -> None:
    out = _coalesced(tuple(pieces))
    assert b"".join(out) == b"".join(pieces)
    if sum(map(len, pieces)) <= JOIN_MAX:
        assert len(out) == 1
    else:
        big = [p for p in pieces if len(p) >= _SMALL]
        assert [p for p in out if any(p is b for b in big)] == big  # the very objects, uncopied
        assert len(out) <= 2 * len(big) + 1  # small neighbours joined: at most one run between big ones


def test_a_list_response_is_three_sends_not_six() -> None:
    page = b"p" * (JOIN_MAX + 1)
    pieces = (
        b"id: s.1:2\r\n",
        b"event: message\r\ndata: ",
        b'{"jsonrpc":"2.0","id":2,"result":',
        page,
        b"}",
        b"\r\n\r\n",
    )
    out = _coalesced(pieces)
    assert len(out) == 3 and out[1] is page
