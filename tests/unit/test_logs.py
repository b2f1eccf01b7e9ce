"""Logs never carry secrets or tokens (I12, observability)."""

from __future__ import annotations

import io
import json
import logging

from mcp_reconciler.api.logs import JsonFormatter, RedactingFilter, redact


def test_redact_bearer_tokens_and_key_values() -> None:
    text = redact('Authorization: Bearer abc.DEF-123 token=s3cr3t {"api_key": "k-9"} password: hunter2')
    for secret in ("abc.DEF-123", "s3cr3t", "k-9", "hunter2"):
        assert secret not in text
    assert text.count("[REDACTED]") == 4


def test_json_logs_are_redacted_including_arguments_and_exceptions() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.logs")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.info("connecting with %s", "Bearer TOPSECRET42")
        try:
            raise RuntimeError("upstream said token=LEAKME")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["message"] == "connecting with Bearer [REDACTED]"
    assert lines[0]["level"] == "info" and lines[0]["logger"] == "test.logs"
    assert "LEAKME" not in stream.getvalue() and "TOPSECRET42" not in stream.getvalue()
    assert "exception" in lines[1]


# -- redaction by value (issue 10, item 11) ------------------------------------------------------


def test_interpolated_values_are_redacted_by_value_raw_and_url_encoded() -> None:
    from mcp_reconciler.reconciler.redaction import MIN_CHARS, SecretValues

    secrets = SecretValues()
    secrets.add(["SUPERSECRET-abc123", "a/b c+d", "xy"])
    text = secrets.redact("spawn /nonexistent/SUPERSECRET-abc123 GET /p?key=a%2Fb%20c%2Bd&x=a/b%20c%2Bd xy")
    assert "SUPERSECRET" not in text and "a%2Fb" not in text and "a/b%20c" not in text
    assert text.endswith(" xy"), "values shorter than MIN_CHARS are not registered"
    assert len("xy") < MIN_CHARS


def test_the_log_redacts_values_the_config_interpolated(tmp_path: object) -> None:
    from pathlib import Path

    from mcp_reconciler.reconciler.config import load_config
    from mcp_reconciler.reconciler.redaction import SECRETS

    assert isinstance(tmp_path, Path)
    cfg = tmp_path / "g.yaml"
    stdio = '{command: "/opt/${CMD_SECRET}/run", args: ["--k=${ARG_SECRET}"]}'
    cfg.write_text(f"sources:\n  - name: a\n    stdio: {stdio}\n")
    loaded = load_config(cfg, environ={"CMD_SECRET": "cmd-s3cr3t-77", "ARG_SECRET": "arg-s3cr3t-88"})
    assert loaded.secret_values == {"cmd-s3cr3t-77", "arg-s3cr3t-88"}
    assert "cmd-s3cr3t-77" not in repr(loaded)
    SECRETS.add(loaded.secret_values)  # what the config source does on every good load
    assert redact("FileNotFoundError: '/opt/cmd-s3cr3t-77/run' --k=arg-s3cr3t-88") == (
        "FileNotFoundError: '/opt/[REDACTED]/run' --k=[REDACTED]"
    )


def test_secret_registry_is_bounded() -> None:
    from mcp_reconciler.reconciler.redaction import MAX_VALUES, SecretValues

    secrets = SecretValues()
    secrets.add(f"value-{i:06d}" for i in range(MAX_VALUES + 10))
    assert len(secrets) == MAX_VALUES
    assert "value-000000" not in secrets and f"value-{MAX_VALUES + 9:06d}" in secrets


# -- rate limiting per source (issue 10, item 8) ---------------------------------------------------


def test_repeated_records_pass_burst_times_per_window_and_the_rest_are_counted() -> None:
    from mcp_reconciler.api.logs import configure
    from mcp_reconciler.reconciler.logsource import current_source

    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure("INFO", "json", stream=stream)
    handler.limiter.window_s = 3600.0  # one window for the whole test: no timing involved
    burst = handler.limiter.burst
    log = logging.getLogger("test.flood")
    try:
        token = current_source.set("noisy")
        try:
            for i in range(burst + 1):  # N pass, N+1 is suppressed
                log.warning("garbage %d", i)
            for i in range(100):
                log.warning("garbage %d", i)
        finally:
            current_source.reset(token)
        log.warning("garbage %d", 0, extra={"source": "other"})  # another source: its own budget
        handler.report_suppressed()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    noisy = [r for r in lines if r.get("source") == "noisy"]
    assert [r["message"] for r in noisy[:burst]] == [f"garbage {i}" for i in range(burst)]
    assert noisy[-1]["suppressed"] == 101 and "(last of a suppressed run)" in noisy[-1]["message"]
    assert len(noisy) == burst + 1
    assert next(r for r in lines if r.get("source") == "other")["message"] == "garbage 0"


def test_text_format_labels_the_source_and_the_suppressed_count() -> None:
    from mcp_reconciler.api.logs import TextFormatter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "upstream said %s", ("hi",), None)
    record.source = "up"
    record.suppressed = 7
    assert TextFormatter().format(record).endswith("WARNING x [up] upstream said hi [7 similar suppressed]")


def test_accept_failures_are_logged_once_per_interval_with_a_count() -> None:
    """asyncio logs one traceback per failed accept(), 100 per loop tick (86 MB in 35 s under
    20,000 idle connections); the gateway's handler turns them into one line per interval."""
    import asyncio
    import errno

    from mcp_reconciler.api.http_limits import AcceptErrorLog

    passed: list[dict[str, object]] = []
    handler = AcceptErrorLog(lambda loop, ctx: passed.append(ctx), interval_s=3600.0)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    log = logging.getLogger("mcp_reconciler.http")
    log.addHandler(keep)
    loop = asyncio.new_event_loop()
    try:
        context = {"message": AcceptErrorLog.MESSAGE, "exception": OSError(errno.EMFILE, "Too many open files")}
        for _ in range(10_000):
            handler(loop, context)
        handler(loop, {"message": "something else"})
    finally:
        loop.close()
        log.removeHandler(keep)
    assert len(records) == 1 and "file descriptors" in records[0].getMessage()
    assert handler.total == 10_000 and handler.suppressed == 9_999
    assert passed == [{"message": "something else"}]  # other contexts reach the previous handler
