"""Generates the control API's OpenAPI document from ``api/control.py``'s route table and the
wire models. ``python -m mcp_reconciler.api.openapi > api/openapi.json`` refreshes the committed copy; a test
fails when the two differ (API compatibility check)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from mcp_reconciler.api.events import EVENT_MODELS
from mcp_reconciler.api.routes import EVENTS_PATH, ROUTES
from mcp_reconciler.api.version import __version__ as VERSION
from mcp_reconciler.sdk import wire

_ERRORS = {
    400: "invalid parameter or body",
    401: "unauthenticated",
    403: "forbidden (operator only)",
    404: "not found",
    422: "invalid request",
}
_DEFAULT_ERROR = (
    "any other error, same shape: 409 conflict, 413 body too large, 429 too many holds, "
    "503 unavailable (retryable), 504 refresh timeout, 500 internal"
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the control API: every route of ``ROUTES`` plus ``/healthz``,
    ``/readyz`` and the event stream, with the wire models as component schemas. Deterministic for
    one code version."""
    models: set[type[BaseModel]] = {wire.ErrorOut, wire.HealthOut, wire.ReadyOut, *EVENT_MODELS.values()}
    for spec in ROUTES:
        if spec.request is not None:
            models.add(spec.request)
        models.update(m for _, m in spec.responses if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    _, schemas = models_json_schema(
        [(m, "serialization") for m in ordered], ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, dict[str, Any]] = {
        "/healthz": {
            "get": {
                "summary": "Process is up",
                "operationId": "healthz",
                "security": [],
                "responses": {"200": {"description": "ok", "content": _json(_ref(wire.HealthOut))}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "A generation is published and the config is valid",
                "operationId": "readyz",
                "security": [],
                "responses": {
                    "200": {"description": "ready", "content": _json(_ref(wire.ReadyOut))},
                    "503": {"description": "not ready", "content": _json(_ref(wire.ReadyOut))},
                },
            }
        },
    }
    for spec in ROUTES:
        op: dict[str, Any] = {"summary": spec.summary, "operationId": spec.handler}
        params = [
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": {"type": "integer"} if name == "n" else {"type": "string"},
            }
            for name in re.findall(r"{(\w+)}", spec.path)
        ]
        if spec.handler == "get_catalog":
            params.append({"name": "revision", "in": "query", "required": False, "schema": {"type": "integer"}})
        if params:
            op["parameters"] = params
        if spec.request is not None:
            # A body is required exactly when its model has a required field (no usable default).
            required = any(f.is_required() for f in spec.request.model_fields.values())
            op["requestBody"] = {"required": required, "content": _json(_ref(spec.request))}
        responses: dict[str, Any] = {}
        for status, model in spec.responses:
            if model is None:
                responses[str(status)] = {"description": "no content"}
            else:
                schema: dict[str, Any] = {"type": "array", "items": _ref(model)} if spec.list_of else _ref(model)
                responses[str(status)] = {"description": "ok", "content": _json(schema)}
        for status, what in _ERRORS.items():
            responses.setdefault(str(status), {"description": what, "content": _json(_ref(wire.ErrorOut))})
        responses["default"] = {"description": _DEFAULT_ERROR, "content": _json(_ref(wire.ErrorOut))}
        op["responses"] = responses
        paths.setdefault(spec.path, {})[spec.method.lower()] = op
    paths[EVENTS_PATH] = {"get": _events_operation()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "mcp-reconciler control API", "version": VERSION},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _events_operation() -> dict[str, Any]:
    """``GET /v1/events``: a server-sent event stream (``api/events.py``), so its 200 answer is
    ``text/event-stream`` whose messages' ``data`` lines are the event models by ``event`` name."""
    kinds = ", ".join(f"`{name}` ({model.__name__})" for name, model in EVENT_MODELS.items())
    return {
        "summary": "Follow engine events: a server-sent event stream (publish, retire, source, session, hold)",
        "operationId": "get_events",
        "description": (
            "Each SSE message has `event: <type>`, one `data:` line of JSON and, for engine events, an "
            f"`id:` (strictly increasing). Types and their data: {kinds}. `hello` opens every stream; "
            "`reset` answers a `Last-Event-ID` older than the kept events (re-read state); `dropped` ends the "
            "stream of a follower whose buffer overflowed (resume with `Last-Event-ID`). Operators see every "
            "event; owners see gateway-wide events and their own sessions' and holds'. Bounded: concurrent "
            "streams (429 `too_many_streams`), a per-stream buffer, a write timeout."
        ),
        "parameters": [
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "integer"},
                "description": "resume after this event id (kept events are replayed first)",
            }
        ],
        "responses": {
            "200": {
                "description": "the event stream",
                "content": {
                    "text/event-stream": {
                        "schema": {
                            "type": "string",
                            "description": "SSE messages; each `data` line is one of the event models",
                        },
                        "x-event-schemas": {name: _ref(model) for name, model in EVENT_MODELS.items()},
                    }
                },
            },
            "401": {"description": "unauthenticated", "content": _json(_ref(wire.ErrorOut))},
            "429": {"description": "too many event streams open", "content": _json(_ref(wire.ErrorOut))},
            "default": {"description": _DEFAULT_ERROR, "content": _json(_ref(wire.ErrorOut))},
        },
    }


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def render() -> str:
    """:func:`document` as JSON text with sorted keys, byte for byte what ``api/openapi.json`` holds."""
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
