"""OTLP out of the box and trace context through the hop (issue 29, ADR 0031).

``mcp-reconciler serve`` runs as its own process with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at
a collector stub (an HTTP server on port 0 in this process that keeps every OTLP/HTTP protobuf
request). A client calls a tool with a W3C ``traceparent`` in the request's ``_meta``: the
gateway's ``frontdoor.operation`` span continues the client's trace under the client's span, the
upstream receives a ``traceparent`` whose parent is the gateway's span (or a span under it), and
the revision and source are span attributes. The process exports on exit (its batch processor's
flush), so the spans are read once it has stopped."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.api.conftest import OPERATOR_TOKEN
from tests.integration.conftest import REPO_ROOT, HttpUpstreams
from tests.integration.conftest import http_upstreams as http_upstreams  # the fixture
from tests.support.gateway_process import gateway_process

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

pytestmark = pytest.mark.anyio

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TOKEN = "session-token-otlp-0123456789"


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.received.append((self.path, body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def collector() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _spans(received: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    out = []
    for path, body in received:
        if path != "/v1/traces":
            continue
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attrs = {a.key: a.value for a in span.attributes}
                    out.append(
                        {
                            "name": span.name,
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attrs": attrs,
                        }
                    )
    return out


def _metric_names(received: list[tuple[str, bytes]]) -> set[str]:
    names = set()
    for path, body in received:
        if path == "/v1/metrics":
            for resource in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                for scope in resource.scope_metrics:
                    names.update(m.name for m in scope.metrics)
    return names


async def test_otlp_exports_spans_parented_on_the_clients_traceparent(
    tmp_path: Path, collector: ThreadingHTTPServer, http_upstreams: HttpUpstreams
) -> None:
    # An HTTP upstream: the gateway's pooled poster sends the request's _meta as built by the
    # front door (the SDK's own client would add a span of its own in between).
    _, port = await http_upstreams.start("--tools", "a")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        json.dumps(
            {
                "gateway": {"cooldown_s": 0.05},
                "sources": [{"name": "up", "http": {"url": f"http://127.0.0.1:{port}/mcp"}}],
                "sessions": [{"name": "agent", "token": TOKEN, "grant_policy": "current"}],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_RECONCILER_", "OTEL_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_address[1]}",
        MCP_RECONCILER_OPERATOR_TOKENS=OPERATOR_TOKEN,
    )
    argv = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    async with gateway_process(argv, cwd=REPO_ROOT, env=env) as gw:
        async with mcp_http_client(headers={"authorization": f"Bearer {TOKEN}"}) as http:
            async with Client(streamable_http_client(gw.url, http_client=http)) as client:
                traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
                result = await client.call_tool("up__a", {"x": 1}, meta={"traceparent": traceparent})
    echoed = json.loads(result.content[0].text)  # type: ignore[union-attr]
    spans = _spans(collector.received)  # type: ignore[attr-defined]
    ours = [s for s in spans if s["name"] == "frontdoor.operation"]
    assert len(ours) == 1, gw.describe()
    op = ours[0]
    assert op["trace"] == CLIENT_TRACE
    by_id = {s["id"]: s for s in spans}
    # Our span's ancestry within the gateway ends at the client's span (the SDK's server span
    # may sit between them, itself parented on the client's traceparent).
    parent = op["parent"]
    while parent in by_id:
        parent = by_id[parent]["parent"]
    assert parent == CLIENT_SPAN
    attrs = op["attrs"]
    assert attrs["source"].string_value == "up"  # type: ignore[index, union-attr]
    assert attrs["revision"].int_value >= 1  # type: ignore[index, union-attr]
    # The upstream saw the gateway's span (or a span under it) as its parent, in the client's trace.
    _, trace_id, upstream_parent, _ = echoed["traceparent"].split("-")
    assert trace_id == CLIENT_TRACE
    chain = upstream_parent
    while chain != op["id"] and chain in by_id:
        chain = by_id[chain]["parent"]
    assert chain == op["id"], (echoed, spans)
    assert {"frontdoor.operation.duration", "frontdoor.upstream.duration"} <= _metric_names(
        collector.received  # type: ignore[attr-defined]
    )
