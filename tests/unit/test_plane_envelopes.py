"""The 2026 era's envelope memo (``api/plane/era2026.Envelopes``) and its answered-requests
tally: a repeated envelope makes the same connection as ``Connection.from_envelope`` without
validating again, a mis-shaped one degrades the same way, and the memo is bounded (at N and
N+1: the oldest is evicted, so it is validated again)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.connection import Connection
from opentelemetry.metrics import CallbackOptions

from mcp_reconciler.api.plane import era2026
from mcp_reconciler.api.plane.era2026 import Envelopes

VERSION = "2026-07-28"
INFO = {"name": "client", "version": "1.0"}
CAPS = {"sampling": {}, "roots": {"listChanged": True}}


def same(a: Connection, b: Connection) -> None:
    assert a.protocol_version == b.protocol_version
    assert a.client_params == b.client_params
    assert a.client_capabilities == b.client_capabilities
    assert a.initialized.is_set() and b.initialized.is_set()
    assert a.outbound is b.outbound


@pytest.mark.parametrize(
    ("info", "caps"),
    [(INFO, CAPS), (None, CAPS), (INFO, {"sampling": "not an object"}), ({"name": 3}, None), (None, None)],
)
def test_a_repeated_envelope_makes_the_connection_from_envelope_makes(info: Any, caps: Any) -> None:
    envelopes = Envelopes()
    first, second = envelopes.connection(VERSION, info, caps), envelopes.connection(VERSION, info, caps)
    same(first, Connection.from_envelope(VERSION, info, caps))
    same(second, Connection.from_envelope(VERSION, info, caps))
    assert second is not first and second.exit_stack is not first.exit_stack  # per-request state
    assert second.client_capabilities is first.client_capabilities  # validated once


@pytest.fixture
def validated(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The client infos ``Connection.from_envelope`` validates, in order, while the test runs."""
    seen: list[Any] = []
    real = Connection.from_envelope

    def counting(version: str, info: Any, caps: Any) -> Connection:
        seen.append(info)
        return real(version, info, caps)

    monkeypatch.setattr(era2026.Connection, "from_envelope", staticmethod(counting))
    return seen


def test_envelopes_are_bounded_at_n_and_n_plus_1(validated: list[Any]) -> None:
    envelopes = Envelopes(kept=2)
    a, b, c = ({"name": n, "version": "1"} for n in "abc")
    for info in (a, b, a, b):  # N = 2 kept: each validated once
        envelopes.connection(VERSION, info, CAPS)
    assert validated == [a, b]
    envelopes.connection(VERSION, c, CAPS)  # N + 1: the oldest (a) goes
    envelopes.connection(VERSION, b, CAPS)
    envelopes.connection(VERSION, a, CAPS)
    assert validated == [a, b, c, a]


def test_an_envelope_key_is_kept_up_to_its_bound_and_not_over(validated: list[Any]) -> None:
    fits = {"name": "n", "version": "1"}
    bound = len(repr((VERSION, fits, CAPS)))
    envelopes = Envelopes(key_max=bound)
    over = {"name": "nn", "version": "1"}  # one character longer: N + 1
    for info in (fits, fits, over, over):
        envelopes.connection(VERSION, info, CAPS)
    assert validated == [fits, over, over]  # N kept; N + 1 validated every time


def test_answered_requests_are_observed_by_outcome() -> None:
    def observed() -> dict[Any, Any]:
        readings = era2026._answered._observe(CallbackOptions())
        return {(o.attributes or {}).get("outcome"): o.value for o in readings}

    before = observed()
    era2026._answered.add(era2026._OUTCOMES["json"])
    era2026._answered.add(era2026._OUTCOMES["json"])
    era2026._answered.add(era2026._OUTCOMES["rejected"])
    after = observed()
    assert after["json"] - before.get("json", 0) == 2
    assert after["rejected"] - before.get("rejected", 0) == 1
    assert {o.attributes["era"] for o in era2026._answered._observe(CallbackOptions()) if o.attributes} == {"2026"}
