"""Every MCP SDK *client-side* private the engine uses, in one place (``mcp`` 2.3; pyproject pins <2.4).

The gateway's upstream connections keep the SDK's ``ClientSession`` for the handshake and, on
stdio and SSE, as their session layer; their requests go through one path,
:meth:`~reconciler.upstream.UpstreamConnection.send_raw` (ADR 0030). That path needs three
things the SDK offers no public way to do, reached here and nowhere else (the front door and
the data plane reach none: ``api/sdk_compat.py`` is gone, issue 26);
``tests/unit/test_sdk_client.py`` builds the SDK objects for real and fails naming the attribute
if an SDK release moves one:

1. **The session's stamp** (``ClientSession._stamp``, with ``MCP_NAME_HEADER`` added as
   ``send_request`` adds it): a request sent by our HTTP peers carries exactly the protocol
   ``_meta`` and headers the SDK's ``send_request`` would give it (2026 era: protocol version,
   client info and capabilities, ``Mcp-Method``/``Mcp-Name``; 2025 era: the version header).
2. **A request whose result the SDK would reject**: a task-augmented ``tools/call`` is answered
   with a ``CreateTaskResult`` that ``send_request`` would validate as a ``CallToolResult``.
   :func:`send_raw_request` sends through the session's stamp and dispatcher (the SDK's own
   ``listen()`` does the same) and returns the raw result.
3. **The result check of ``send_request``** (``mcp.client.session._clamp_inbound_ttl``,
   ``_later_revision_fields`` and ``ClientSession._negotiated_version``): :func:`check_result`
   types a raw result exactly as ``send_request`` would, so a malformed upstream answer is still
   a validation error wherever it arrived."""

from __future__ import annotations

import contextlib
from typing import Any

from mcp import ClientSession
from mcp.client.session import _clamp_inbound_ttl, _later_revision_fields
from mcp.shared.dispatcher import CallOptions, ProgressFnT
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from mcp_types import methods as _methods
from pydantic import TypeAdapter

#: The SDK minor version this module was written and tested against.
TESTED_SDK = "2.3"


class SDKChangedError(RuntimeError):
    """An SDK private the gateway relies on is gone or changed shape. The message names it."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"mcp SDK changed: {what} is missing or changed (the gateway's SDK compat modules were written "
            f"for mcp {TESTED_SDK}.x)"
        )


def stamp(session: ClientSession, request: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """``request`` (an ``mcp_types`` request model) as the wire dict and headers
    ``session.send_request`` would send: the session's stamp, then ``Mcp-Name`` for a request
    that names something (1.)."""
    try:
        stamp_fn = session._stamp
    except AttributeError:
        raise SDKChangedError("ClientSession._stamp") from None
    data: dict[str, Any] = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {}
    stamp_fn(data, opts)
    headers: dict[str, str] = dict(opts.get("headers") or {})
    key = type(request).name_param
    name = (data.get("params") or {}).get(key) if key is not None else None
    if isinstance(name, str):
        headers.setdefault(MCP_NAME_HEADER, encode_header_value(name))
    return data, headers


def read_timeout(session: ClientSession) -> float | None:
    """The session's default read timeout (what ``send_request`` uses without one of its own)."""
    try:
        value: float | None = session._session_read_timeout_seconds
    except AttributeError:
        raise SDKChangedError("ClientSession._session_read_timeout_seconds") from None
    return value


async def send_raw_request(
    session: ClientSession,
    request: Any,
    *,
    timeout_s: float | None = None,
    progress_callback: ProgressFnT | None = None,
) -> dict[str, Any]:
    """Send ``request`` on ``session`` exactly as ``send_request`` would — stamp, ``Mcp-Name``,
    timeout (``timeout_s``, else the session's read timeout), progress — and return the raw
    result dict, unvalidated (2.). Raises ``MCPError`` for an error response, a timeout or a
    closed connection, like ``send_request``."""
    try:
        dispatcher = session._dispatcher
    except AttributeError:
        raise SDKChangedError("ClientSession._dispatcher") from None
    data, headers = stamp(session, request)
    opts: CallOptions = {"headers": headers} if headers else {}
    timeout = timeout_s if timeout_s is not None else read_timeout(session)
    if timeout is not None:
        opts["timeout"] = timeout
    if progress_callback is not None:
        opts["on_progress"] = progress_callback
    raw = await dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    return dict(raw)


def check_result(session: ClientSession, method: str, raw: dict[str, Any], result_type: Any) -> Any:
    """``raw`` (a result of ``method`` received for ``session``) checked and typed exactly as the
    tail of ``ClientSession.send_request`` does it (3.); raises ``pydantic.ValidationError`` for a
    result that does not conform to the negotiated version."""
    try:
        version = session._negotiated_version or "2025-11-25"
    except AttributeError:
        raise SDKChangedError("ClientSession._negotiated_version") from None
    _clamp_inbound_ttl(raw)
    with contextlib.suppress(KeyError):
        _methods.validate_server_result(method, version, raw)
    if not (foreign := _later_revision_fields(method, version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    if isinstance(result_type, TypeAdapter):
        return result_type.validate_python(raw, by_name=False)
    return result_type.model_validate(raw, by_name=False)
