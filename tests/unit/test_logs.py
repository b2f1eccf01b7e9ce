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
