"""README "Observe it": the config blocks validate as written, the scrape and collector configs
point where the gateway serves and exports, the audit record uses only documented fields, and
the ``audit tail`` line parses with the CLI."""

from __future__ import annotations

import json
import re
import shlex

import yaml

from mcp_reconciler.api.cli import build_parser
from mcp_reconciler.reconciler.audit import FIELDS
from mcp_reconciler.reconciler.config import TelemetryConfig
from tests.support.readme import block


def test_observe_it_blocks() -> None:
    listen = TelemetryConfig.model_validate(yaml.safe_load(block("telemetry-listen-config").text)["telemetry"])
    assert listen.metrics_listen == "127.0.0.1:9464"
    trail = TelemetryConfig.model_validate(yaml.safe_load(block("audit-config").text)["telemetry"]).audit
    assert trail is not None and not trail.argument_digest

    scrape = yaml.safe_load(block("prometheus-scrape").text)["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics" and scrape["authorization"]["type"] == "Bearer"

    collector_text = block("otel-collector").text
    collector = yaml.safe_load(collector_text)
    endpoint = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    exported = re.search(r"OTEL_EXPORTER_OTLP_ENDPOINT=http://(\S+)", collector_text)
    assert exported is not None and exported.group(1) == endpoint
    assert set(collector["service"]["pipelines"]) == {"traces", "metrics"}

    record = json.loads(block("audit-record").text)
    assert set(record) <= FIELDS | {"ts", "kind", "replica"}

    argv = shlex.split(block("audit-tail").text.strip())
    assert argv[0] == "mcp-reconciler"
    args = build_parser().parse_args(argv[1:])
    assert args.follow and args.tool == "github__create_issue"
