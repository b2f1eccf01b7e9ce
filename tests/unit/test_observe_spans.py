"""The ``frontdoor.operation`` span without a tracer provider (``api/frontdoor/observe.py``, ADR
0038 "Call CPU"): no no-op span is made when there is nothing to carry, and the client's trace
context still reaches the upstream request when there is."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from starlette.requests import Request

from mcp_reconciler.api.frontdoor import observe
from mcp_reconciler.api.frontdoor.observe import OperationObserver, inject
from mcp_reconciler.reconciler import telemetry

pytestmark = pytest.mark.anyio

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT = {"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"}


class _Ctx:
    request = None


@pytest.fixture
def no_provider(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """No tracer provider installed; records every span the tracer is asked for."""
    monkeypatch.setattr(telemetry, "tracing", lambda: False)
    asked: list[Any] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        return trace.NoOpTracer().start_as_current_span(*args, **kwargs)

    monkeypatch.setattr(observe.telemetry.tracer, "start_as_current_span", counting)
    return asked


async def test_without_a_provider_or_client_context_no_span_is_made(no_provider: list[Any]) -> None:
    with OperationObserver().operation(_Ctx(), "tool", "up__a", {"k": "v"}) as facts:
        assert inject({"k": "v"}) == {"k": "v"}  # the upstream gets the request's _meta as it was
    assert facts.entry is None
    assert no_provider == []


async def test_without_a_provider_the_clients_trace_context_reaches_the_upstream(no_provider: list[Any]) -> None:
    with OperationObserver().operation(_Ctx(), "tool", "up__a", CLIENT):
        sent = inject({})
    assert len(no_provider) == 1  # the (no-op) span carries the client's context
    assert sent is not None and sent["traceparent"].split("-")[1] == TRACE_ID


def test_the_traceparent_header_is_the_parent_without_one_in_meta() -> None:
    class HttpCtx:
        request = Request(
            {"type": "http", "headers": [(b"x-a", b"1"), (b"traceparent", CLIENT["traceparent"].encode())]}
        )

    parent = observe.client_context(HttpCtx(), {"k": "v"})
    assert parent is not None
    assert f"{trace.get_current_span(parent).get_span_context().trace_id:032x}" == TRACE_ID
    assert observe.client_context(_Ctx(), {"k": "v"}) is None  # stdio: no request, no header
