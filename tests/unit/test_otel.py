"""``--otel-console``: the OpenTelemetry SDK's console exporters, wired through the CLI.

The engine depends on the OpenTelemetry API only (ADR 0008); ``api/otel.py`` installs an SDK
``TracerProvider`` (console spans) and ``MeterProvider`` (console metrics) on stderr. Each test
that installs a global provider runs in a subprocess: the API allows one global provider per
process, and a console exporter installed here would print every later test's spans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_reconciler.api.logs import redact

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "otel-test-s3cr3t-Zq9xW2"  # planted in the environment; must never be exported
TIMEOUT_S = 60


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MCP_RECONCILER_OPERATOR_TOKENS"] = SECRET
    env["MCP_RECONCILER_OWNER_TOKENS"] = f"owner-{SECRET}"
    env["UPSTREAM_API_KEY"] = SECRET
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]  # the host's OpenTelemetry settings must not change what the test sees
    return env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _documents(text: str) -> Iterator[dict[str, Any]]:
    """The JSON documents the console exporters wrote (indented, one after another), skipping
    anything else on the stream (log lines)."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return
        try:
            doc, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(doc, dict):
            yield doc
        i = end


def _spans(stderr: str) -> list[dict[str, Any]]:
    return [d for d in _documents(stderr) if "span_id" in (d.get("context") or {})]


def _metric_names(stderr: str) -> set[str]:
    names: set[str] = set()
    for doc in _documents(stderr):
        for rm in doc.get("resource_metrics", []):
            for sm in rm.get("scope_metrics", []):
                names.update(m["name"] for m in sm.get("metrics", []))
    return names


def _assert_no_secrets(stderr: str) -> None:
    assert SECRET not in stderr
    assert "Bearer " not in stderr and "authorization" not in stderr.lower()
    # Nothing a log redactor would have to hide: no token=/password=/api_key= style pairs.
    assert redact(stderr) == stderr


@pytest.fixture(scope="module")
def demo_runs() -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    plain = _run("-m", "mcp_reconciler.api.cli", "demo")
    traced = _run("-m", "mcp_reconciler.api.cli", "--otel-console", "demo")
    return plain, traced


def test_demo_exports_engine_spans_and_metrics_to_stderr(
    demo_runs: tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]],
) -> None:
    _, traced = demo_runs
    assert traced.returncode == 0, traced.stderr[-2000:]
    spans = _spans(traced.stderr)
    names = {s["name"] for s in spans}
    assert {"reconciler.cycle", "reconciler.publish", "reconciler.build", "upstream.list"} <= names, names
    # The demo publishes revisions 1, 2 and 3 and has one unchanged cycle (I3).
    cycles = [s for s in spans if s["name"] == "reconciler.cycle"]
    assert sorted(s["attributes"].get("cycle.revision") for s in cycles if "cycle.revision" in s["attributes"]) == [
        1,
        2,
        2,
        3,
    ]
    assert {s["attributes"]["cycle.status"] for s in cycles} == {"published", "unchanged"}
    # reconciler.publish is a child of its cycle's span (same trace).
    by_id = {s["context"]["span_id"]: s for s in spans}
    for pub in (s for s in spans if s["name"] == "reconciler.publish"):
        assert by_id[pub["parent_id"]]["name"] == "reconciler.cycle"
    assert all(s["resource"]["attributes"]["service.name"] == "mcp-reconciler" for s in spans)
    # Metrics get a last export at exit (the periodic interval is 10 s; the demo is shorter).
    metric_names = _metric_names(traced.stderr)
    assert {"reconciler.cycles", "reconciler.publishes", "reconciler.cycle.duration", "reconciler.triggers"} <= (
        metric_names
    ), metric_names
    _assert_no_secrets(traced.stderr)


def test_demo_stdout_is_unchanged_by_console_export(
    demo_runs: tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]],
) -> None:
    plain, traced = demo_runs
    assert plain.returncode == 0 and traced.returncode == 0
    assert "published revision 1" in plain.stdout
    assert traced.stdout == plain.stdout
    assert '"span_id"' not in traced.stdout and '"span_id"' not in plain.stderr


def test_spans_from_tracers_created_before_the_provider_are_exported() -> None:
    """reconciler/telemetry.py creates its tracer and meter at import time through the API's
    global proxies; spans and measurements made after ``configure_console`` still reach the SDK."""
    script = textwrap.dedent(
        """
        import sys
        from mcp_reconciler.reconciler import telemetry          # tracer + meter created now (API proxies)
        from opentelemetry import trace
        assert type(telemetry.tracer).__name__ == "ProxyTracer", type(telemetry.tracer)
        from mcp_reconciler.api.otel import configure_console
        shutdown = configure_console(out=sys.stderr)
        with telemetry.tracer.start_as_current_span("reconciler.cycle", attributes={"cycle.seq": 7}):
            pass
        telemetry.publishes.add(1)
        shutdown()
        shutdown()  # idempotent
        print("ok")
        """
    )
    proc = _run("-c", script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
    spans = _spans(proc.stderr)
    assert [s["name"] for s in spans] == ["reconciler.cycle"]
    assert spans[0]["attributes"]["cycle.seq"] == 7
    assert "reconciler.publishes" in _metric_names(proc.stderr)


def test_front_door_operations_are_traced_over_stdio_without_touching_the_protocol(tmp_path: Path) -> None:
    """``--otel-console stdio``: stdout carries MCP (the session works), stderr gets the
    ``frontdoor.operation`` spans, and neither tool arguments nor environment secrets appear."""
    from mcp import Client, MCPError, StdioServerParameters, stdio_client

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        json.dumps(
            {
                "sources": [
                    {
                        "name": "up",
                        "stdio": {
                            "command": sys.executable,
                            "args": ["-m", "tests.support.upstream_server", "--tools", "echo"],
                            "cwd": str(REPO_ROOT),
                            "env": {"API_KEY": "${UPSTREAM_API_KEY}"},
                        },
                    }
                ]
            }
        )
    )
    argument = f"arg-{SECRET}"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_reconciler.api.cli", "--otel-console", "stdio", "--config", str(cfg)],
        cwd=str(REPO_ROOT),
        env=_env(),
    )
    errlog_path = tmp_path / "gateway.stderr"
    codes: list[str] = []

    async def session() -> None:
        with errlog_path.open("w", encoding="utf-8") as errlog, anyio.fail_after(TIMEOUT_S):
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                result = await client.call_tool("up__echo", {"x": argument})
                assert not result.is_error
                with pytest.raises(MCPError) as info:
                    await client.call_tool("up__nope", {"x": argument})
                codes.append(str((info.value.error.data or {}).get("code")))

    anyio.run(session)
    stderr = errlog_path.read_text(encoding="utf-8")
    ops = [s for s in _spans(stderr) if s["name"] == "frontdoor.operation"]
    assert ops, stderr[-2000:]
    assert all(s["attributes"]["mcp.kind"] == "tool" for s in ops)
    assert any(isinstance(s["attributes"].get("revision"), int) and s["attributes"]["revision"] >= 1 for s in ops)
    assert [s["attributes"].get("error.code") for s in ops if "error.code" in s["attributes"]] == codes
    assert argument not in stderr
    _assert_no_secrets(stderr)


def test_missing_sdk_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from opentelemetry import trace

    from mcp_reconciler.api import cli
    from mcp_reconciler.api.otel import INSTALL_HINT, OtelUnavailableError, configure_console

    for name in [m for m in sys.modules if m == "opentelemetry.sdk" or m.startswith("opentelemetry.sdk.")] + [
        "opentelemetry.sdk"
    ]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setattr("mcp_reconciler.api.logs.configure", lambda *args: None)  # leave the root logger alone
    # ``install`` runs once per process; an earlier test in this process may have run it, and then
    # it would answer from that without importing the SDK at all.
    monkeypatch.setattr("mcp_reconciler.api.otel._installed", None)
    before = trace.get_tracer_provider()
    with pytest.raises(OtelUnavailableError, match=r"pip install 'mcp-reconciler\[otel\]'"):
        configure_console()
    assert trace.get_tracer_provider() is before  # nothing installed
    assert cli.main(["--otel-console", "demo"]) == 2
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and "published revision" not in err


def test_exemplars_are_looked_for_only_when_spans_are_exported() -> None:
    """Without a span exporter of ours no histogram record looks for a span to sample (ADR 0038
    "Call CPU"); with console (or OTLP) export the SDK's trace-based default stays."""
    script = textwrap.dedent(
        """
        import sys
        from opentelemetry import metrics
        from mcp_reconciler.api import otel
        if sys.argv[1] == "console":
            otel.configure_console(out=sys.stderr)
        else:
            otel.install()
        print(type(metrics.get_meter_provider()._sdk_config.exemplar_filter).__name__)
        """
    )
    plain, console = _run("-c", script, "plain"), _run("-c", script, "console")
    assert plain.returncode == 0 and console.returncode == 0, plain.stderr[-2000:] + console.stderr[-2000:]
    assert plain.stdout.strip() == "AlwaysOffExemplarFilter"
    assert console.stdout.strip() == "TraceBasedExemplarFilter"
