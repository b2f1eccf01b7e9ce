"""What a ``tools/call`` result may pass through as the upstream's JSON
(``api/frontdoor/passthrough.simple_call_result``): only text content, structured content, the
error flag and ``_meta``; anything else is validated."""

from __future__ import annotations

from mcp_reconciler.api.frontdoor.passthrough import simple_call_result


def test_a_result_that_cannot_pass_through_is_validated() -> None:
    assert simple_call_result({"content": [{"type": "text", "text": "x"}], "isError": False, "_meta": {"a": 1}})
    assert simple_call_result({"content": [], "structuredContent": {"a": None}, "resultType": "complete"})
    for raw in (
        {"content": "not a list"},  # malformed: must be validated (and fail there, sanitized)
        {"content": [{"type": "text", "text": 1}]},
        {"content": [{"type": "resource_link", "uri": "file:///x", "name": "x"}]},  # a URI to rewrite
        {"content": [{"type": "text", "text": "x", "annotations": {}}]},
        {"content": [], "isError": "yes"},
        {"content": [], "extra": 1},
        {"content": [], "resultType": "input_required"},
        [],
    ):
        assert not simple_call_result(raw), raw
