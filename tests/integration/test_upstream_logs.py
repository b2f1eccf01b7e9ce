"""What real upstreams put in the operator log (issue 10, items 8 and 11; I12, I18).

- ``${VAR}`` values are secrets wherever they land: a stdio command or an HTTP URL built from
  one shows up in a ``FileNotFoundError`` path, an ``HTTPStatusError`` URL and httpx2's request
  line; every one is masked by value, at every level.
- The WARNING line says what happened without the upstream's own words; those go to DEBUG.
- An upstream's stderr is captured per source, labeled, routed through the log system (JSON
  here) and rate-limited, with the suppressed count reported.
- An upstream writing garbage to stdout costs a bounded number of records (it used to be one
  traceback per line), and the upstream keeps serving.

Logs are captured from the gateway's own handler (``api.logs.configure(..., stream=...)``)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_reconciler.api.logs import CHATTY_LOGGERS, GatewayHandler, configure
from mcp_reconciler.reconciler.config import ConfigError, load_config
from mcp_reconciler.reconciler.gateway import Gateway
from mcp_reconciler.reconciler.model import SourceSpec
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE, HttpUpstreams, stdio_spec
from tests.integration.test_upstream_transports import call, engine, status
from tests.support.waits import until

pytestmark = pytest.mark.anyio

SECRET = "SUPERSECRET-abc123"
KEY = "k3y-Zq9/x+y"  # URL-special characters: its encoded form must be masked too


class Captured:
    def __init__(self, stream: io.StringIO, handler: GatewayHandler) -> None:
        self.stream = stream
        self.handler = handler

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines() if line.strip()]

    @property
    def text(self) -> str:
        return self.stream.getvalue()


@pytest.fixture
def logs(request: pytest.FixtureRequest) -> Iterator[Captured]:
    level = getattr(request, "param", "DEBUG")
    root = logging.getLogger()
    saved_level = root.level
    saved_chatty = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    stream = io.StringIO()
    handler = configure(level, "json", stream=stream)
    try:
        yield Captured(stream, handler)
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
        for name, lvl in saved_chatty.items():
            logging.getLogger(name).setLevel(lvl)


def write_config(tmp: Path, sources: list[dict[str, Any]]) -> Path:
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": sources}))
    return cfg


async def test_interpolated_values_never_reach_the_log_and_upstream_words_stay_at_debug(
    tmp_path: Path, logs: Captured, http_upstreams: HttpUpstreams, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_CMD", SECRET)
    monkeypatch.setenv("SECRET_KEY", KEY)
    _proc, port = await http_upstreams.start("--tools", "w1")
    cfg = write_config(
        tmp_path,
        [
            {"name": "badcmd", "stdio": {"command": "/nonexistent/${SECRET_CMD}"}},
            # The test upstream serves /mcp only: this path answers 404 (HTTPStatusError).
            {"name": "badurl", "http": {"url": f"http://127.0.0.1:{port}/sse/${{SECRET_CMD}}?key=${{SECRET_KEY}}"}},
        ],
    )
    async with Gateway(cfg, watch_interval_s=0.1, initial_timeout_s=30) as gw:
        st = await gw.engine.status()
    records = logs.records()
    text = logs.text
    # Masked by value, raw or URL-encoded, at every level and in every traceback.
    for secret in (SECRET, KEY, "k3y-Zq9%2Fx%2By", "k3y-Zq9/x%2By"):
        assert secret not in text, f"{secret!r} leaked into the log"
    assert "[REDACTED]" in text
    for s in st.sources:
        assert SECRET not in (s.last_error or "") and KEY not in (s.last_error or "")
    # The WARNING lines say what happened -- the typed cause (issue 28) -- in the gateway's words only.
    warnings = [r for r in records if r["level"] == "warning" and r["logger"] == "mcp_reconciler.reconciler"]
    assert {r["message"] for r in warnings} >= {
        "source badcmd: process not found: stdio.command is not on PATH or not at its path [process_not_found]",
        "source badurl: HTTP 404 not found; check the source's url path [http_status]",
    }
    for r in records:
        if r["level"] in ("warning", "error", "critical"):
            for upstream_words in ("FileNotFoundError", "/nonexistent", "HTTPStatusError", "Not Found"):
                assert upstream_words not in r["message"], r
    # The upstream's words are there for an operator who asks for DEBUG (masked all the same).
    debug = " ".join(r["message"] for r in records if r["level"] == "debug")
    assert "FileNotFoundError" in debug and "/nonexistent/[REDACTED]" in debug


async def test_upstream_stderr_is_labeled_json_and_rate_limited(logs: Captured) -> None:
    logs.handler.limiter.window_s = 3600.0  # one window for the whole test, however slow the box
    spec = stdio_spec("noisy", "--tools", "a", "--noisy")
    async with engine(spec) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g, "noisy").value == "ready")
        reply = await call(rec, "stderr", {"n": 500, "text": "hello from upstream"}, source="noisy")
        assert reply["stderr"] == 500
        await until(
            lambda: "hello from upstream" in logs.text,
            what="the pump logs what the pipe delivers; wait for the first line",
            timeout_s=10,
        )
    logs.handler.report_suppressed()
    lines = [r for r in logs.records() if r["logger"] == "mcp_reconciler.upstream.stderr"]
    shown = [r for r in lines if "(last of a suppressed run)" not in r["message"]]
    assert shown and all(r["source"] == "noisy" and r["level"] == "info" for r in lines), lines[:3]  # issue 28: INFO
    assert shown[0]["message"] == "upstream noisy stderr: hello from upstream"
    assert len(shown) <= logs.handler.limiter.burst, len(shown)
    assert sum(r.get("suppressed", 0) for r in lines) == 500 - len(shown)


@pytest.mark.parametrize("logs", ["WARNING"], indirect=True)
async def test_garbage_on_stdout_costs_a_bounded_log_and_the_upstream_keeps_serving(logs: Captured) -> None:
    logs.handler.limiter.window_s = 3600.0  # one window for the whole test, however slow the box
    spec = stdio_spec("noisy", "--tools", "a", "--noisy")
    async with engine(spec) as (reader, rec, pubs):
        gen = await pubs.wait_for(lambda g: status(g, "noisy").value == "ready")
        opened = reader.opened
        reply = await call(rec, "garbage", {"n": 20_000}, source="noisy")
        assert reply["garbage"] == 20_000
        assert (await call(rec, "a", {"x": "1"}, source="noisy"))["tool"] == "a"  # still serving
        assert reader.opened == opened and rec.runtime.current is not None
        assert rec.runtime.current.revision == gen.revision
    assert len(logs.text) < 64 * 1024, f"{len(logs.text)} bytes of log for 20,000 garbage lines"
    noisy = [r for r in logs.records() if r.get("source") == "noisy"]
    assert noisy, "the SDK's parse errors are attributed to the source"
    assert len(noisy) <= logs.handler.limiter.burst


async def test_stdio_spec_helper_runs_from_the_repository(tmp_path: Path) -> None:
    """The stdio specs above run the test server by module name from the repository root."""
    spec = stdio_spec("x")
    assert spec.transport["cwd"] == str(REPO_ROOT) and SERVER_MODULE in spec.transport["args"]


async def test_upstream_stderr_is_info_and_lines_marked_as_noise_are_debug(logs: Captured) -> None:
    """Issue 28: an upstream's stderr is INFO (its banner is not a warning of the gateway's);
    lines matching the source's ``stderr_noise`` patterns are DEBUG; the label is the same."""
    logs.handler.limiter.window_s = 3600.0
    base = stdio_spec("chatty", "--tools", "a", "--noisy")
    spec = SourceSpec(name="chatty", transport={**base.transport, "stderr_noise": ["^Secure MCP .* running"]})
    async with engine(spec) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g, "chatty").value == "ready")
        await call(rec, "stderr", {"n": 1, "text": "Secure MCP Filesystem Server running on stdio"}, source="chatty")
        await call(rec, "stderr", {"n": 1, "text": "warning: disk almost full"}, source="chatty")
        await until(
            lambda: "disk almost full" in logs.text and "Filesystem Server" in logs.text,
            what="both stderr lines in the log",
            timeout_s=10,
        )
    lines = {r["message"]: r for r in logs.records() if r["logger"] == "mcp_reconciler.upstream.stderr"}
    banner = lines["upstream chatty stderr: Secure MCP Filesystem Server running on stdio"]
    real = lines["upstream chatty stderr: warning: disk almost full"]
    assert (banner["level"], real["level"]) == ("debug", "info")
    assert banner["source"] == real["source"] == "chatty"


def test_stderr_noise_patterns_are_checked_when_the_config_loads(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, [{"name": "x", "stdio": {"command": "python", "stderr_noise": ["(unclosed"]}}])
    with pytest.raises(ConfigError) as bad:
        load_config(cfg)
    assert "stderr_noise" in str(bad.value) and "not a valid regex" in str(bad.value)
