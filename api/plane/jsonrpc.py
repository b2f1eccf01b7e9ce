"""JSON-RPC on the gateway's own data plane: a POST body decoded into exactly one message, and
replies encoded with the HTTP status the protocol assigns to their error code.

Guarantee: :func:`decode` never raises; every body is one of a :class:`Call` (a request), a
:class:`Notice` (a notification), a :class:`Reply` (a client's response to the gateway's
request: only the 2025 era and stdio take one) or a :class:`Refusal` (what to answer).
A batch, a posted response and a malformed envelope are ``INVALID_REQUEST``; bytes that are not
JSON (including oversized integer literals and deep nesting) are ``PARSE_ERROR`` — the SDK
server's own answers, so a client cannot tell the gateway from an SDK server by its errors.
The status table is the SDK's public ``ERROR_CODE_HTTP_STATUS`` (one table for every era).
:func:`legacy_refusal` words a refused body as the SDK's 2025-era handler does (the parser's or
the envelope validator's own text, ``INVALID_PARAMS`` for an envelope)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, jsonrpc_message_adapter
from pydantic import ValidationError

from mcp_reconciler.reconciler.sliced_json import Slices

#: The ``message`` of a body that is JSON but not one request or notification object.
INVALID_BODY = "Body must be a single JSON-RPC request or notification object"

RequestId = str | int


@dataclass(frozen=True, slots=True)
class Call:
    """One JSON-RPC request: its id, method and (raw, unvalidated) params."""

    id: RequestId
    method: str
    params: Mapping[str, Any] | None
    raw: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Notice:
    """One JSON-RPC notification (no id: nothing is owed back)."""

    method: str
    params: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A body the plane answers with an error before any handler runs (``id`` ``None`` when the
    request's id could not be read)."""

    id: RequestId | None
    error: ErrorData


@dataclass(frozen=True, slots=True)
class Reply:
    """A client's response to a request the gateway sent it (2025 era and stdio only)."""

    id: RequestId
    result: Mapping[str, Any] | None
    error: Mapping[str, Any] | None


def decode(body: bytes) -> Call | Notice | Reply | Refusal:
    """The one message in ``body`` (module docstring)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return Refusal(None, ErrorData(code=PARSE_ERROR, message="Parse error"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Refusal(None, ErrorData(code=INVALID_REQUEST, message=INVALID_BODY))
    reply = _reply(message)
    if reply is not None:
        return reply
    method = message.get("method")
    params = message.get("params")
    if not isinstance(method, str) or not (params is None or isinstance(params, dict)):
        return Refusal(None, ErrorData(code=INVALID_REQUEST, message=INVALID_BODY))
    if "id" not in message:
        return Notice(method, params)
    id_ = message["id"]
    # JSON-RPC ids are strings or integers (bool is an int in Python, never an id).
    if not isinstance(id_, str | int) or isinstance(id_, bool):
        return Refusal(None, ErrorData(code=INVALID_REQUEST, message=INVALID_BODY))
    return Call(id_, method, params, message)


def _reply(message: dict[str, Any]) -> Reply | None:
    """``message`` as a response (an id, no method, exactly one of result/error objects)."""
    if "method" in message or ("result" in message) == ("error" in message):
        return None
    id_, result, error = message.get("id"), message.get("result"), message.get("error")
    if not isinstance(id_, str | int) or isinstance(id_, bool):
        return None
    if not (result is None or isinstance(result, dict)) or not (error is None or isinstance(error, dict)):
        return None
    return Reply(id_, result, error)


class EncodedResult(dict[str, Any]):
    """A result that also carries its own compact JSON (``wire``, exactly ``encode(result)``):
    :func:`encode` and :func:`encode_sliced` splice those bytes into a response instead of
    encoding the result again. The list pages (``ListCache``, ADR 0019) are kept this way, so a
    repeated ``tools/list`` is a lookup and a write (ADR 0038). Shared between requests, so
    never written once made: the dict is for readers, the bytes are what goes out."""

    __slots__ = ("wire",)

    def __init__(self, result: Mapping[str, Any], wire: bytes) -> None:
        super().__init__(result)
        self.wire = wire

    @classmethod
    async def of(cls, result: Mapping[str, Any]) -> EncodedResult:
        """``result`` with its JSON, encoded in slices (ADR 0040) — once, however often sent."""
        return cls(result, b"".join(await encode_sliced(result)))


def result_message(id_: RequestId, result: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-RPC response carrying ``result``."""
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_message(id_: RequestId | None, error: ErrorData) -> dict[str, Any]:
    """The JSON-RPC error response; ``id`` is ``null`` on the wire when it could not be read."""
    return {"jsonrpc": "2.0", "id": id_, "error": error.model_dump(mode="json", by_alias=True, exclude_none=True)}


def status_of(message: Mapping[str, Any]) -> int:
    """The HTTP status of a JSON reply: the error code's status, else 200."""
    error = message.get("error")
    if isinstance(error, Mapping):
        return ERROR_CODE_HTTP_STATUS.get(int(error.get("code", 0)), 200)
    return 200


def encode(message: Mapping[str, Any]) -> bytes:
    """Compact JSON, as the SDK server writes it, in one call: for the gateway's own small
    messages (notifications, refusals, the handshake). A result goes out by
    :func:`encode_sliced`."""
    spliced = _spliced(message)
    return b"".join(spliced) if spliced is not None else _dumps(message).encode()


def _spliced(message: Mapping[str, Any]) -> list[bytes] | None:
    """A response carrying an :class:`EncodedResult` as pieces around its bytes (no copy of
    them), byte for byte what encoding the whole message writes; ``None`` for any other."""
    result = message.get("result")
    if not isinstance(result, EncodedResult) or list(message) != ["jsonrpc", "id", "result"]:
        return None
    head = _dumps({"jsonrpc": message["jsonrpc"], "id": message["id"], "result": 0})[:-2]  # up to ``"result":``
    return [head.encode(), result.wire, b"}"]


#: Estimated characters of JSON a value may take before it is encoded in pieces, with the
#: loop's turns between them (about a millisecond of ``json``'s C encoder for ASCII text).
PIECE_CHARS = 256 * 1024

#: How much longer than its length a non-ASCII string's JSON may be (``\\uXXXX``).
_NON_ASCII_GROWTH = 6

_dumps = json.JSONEncoder(separators=(",", ":")).encode
#: ``json``'s C string encoder (ASCII-only output, as ``json.dumps`` writes strings by default).
_encode_string: Any = json.encoder.encode_basestring_ascii  # the C one when built


async def encode_sliced(message: Mapping[str, Any]) -> list[bytes]:
    """``encode(message)`` as a list of pieces whose concatenation is exactly those bytes, with
    the loop's turns between pieces (ADR 0040): every response carrying a result goes out this
    way, whatever its size. A value whose JSON is estimated under :data:`PIECE_CHARS` is one
    ``json`` call; a longer one is written member by member (objects), in batches of elements
    (arrays), or :data:`PIECE_CHARS` at a time (a long string: a 30 MB text is about a hundred
    pieces of a millisecond each, where one ``json.dumps`` held the loop 200 ms). A response
    carrying an :class:`EncodedResult` is its bytes, spliced."""
    spliced = _spliced(message)
    if spliced is not None:
        return spliced
    out: list[str] = []
    slices = Slices()
    await _emit(message, out, slices)
    chunks: list[bytes] = []
    for piece in _joined(out):
        chunks.append(piece.encode())  # ASCII (``json`` escapes the rest): a copy, no codec work
        await slices.tick()
    return chunks


def _joined(parts: list[str]) -> list[str]:
    """``parts`` joined into pieces of about :data:`PIECE_CHARS` (few, large writes)."""
    pieces: list[str] = []
    run: list[str] = []
    size = 0
    for part in parts:
        run.append(part)
        size += len(part)
        if size >= PIECE_CHARS:
            pieces.append("".join(run))
            run, size = [], 0
    if run:
        pieces.append("".join(run))
    return pieces


def _weight(value: Any, budget: int) -> int:
    """The estimated length of ``value``'s JSON, counted until it passes ``budget``."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) * (1 if item.isascii() else _NON_ASCII_GROWTH) + 2
        elif isinstance(item, dict):
            total += 2 + 8 * len(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += 8
        if total > budget:
            break
    return total


async def _emit(value: Any, out: list[str], slices: Slices) -> None:
    if _weight(value, PIECE_CHARS) <= PIECE_CHARS:
        out.append(_dumps(value))
    elif isinstance(value, str):
        # Any cut of a ``str`` is between code points, and each is escaped on its own.
        step = PIECE_CHARS if value.isascii() else PIECE_CHARS // _NON_ASCII_GROWTH
        out.append('"')
        for start in range(0, len(value), step):
            out.append(_encode_string(value[start : start + step])[1:-1])
            await slices.tick()
        out.append('"')
    elif isinstance(value, dict):
        out.append("{")
        for n, (key, item) in enumerate(value.items()):
            if n:
                out.append(",")
            out.append(_dumps({key: 0})[1:-2])  # the key as ``json`` writes it (``"key":``)
            await _emit(item, out, slices)
            await slices.tick()
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        batch: list[Any] = []
        size = 0
        first = True
        for item in value:
            weight = _weight(item, PIECE_CHARS)
            if batch and (weight > PIECE_CHARS or size + weight > PIECE_CHARS):
                out.append(("" if first else ",") + _dumps(batch)[1:-1])
                first, batch, size = False, [], 0
                await slices.tick()
            if weight > PIECE_CHARS:
                if not first:
                    out.append(",")
                await _emit(item, out, slices)
                first = False
                continue
            batch.append(item)
            size += weight
        if batch:
            out.append(("" if first else ",") + _dumps(batch)[1:-1])
        out.append("]")
    else:  # a scalar can only be this long as a huge number: one call, as before
        out.append(_dumps(value))


def legacy_refusal(body: bytes, refusal: Refusal) -> dict[str, Any]:
    """The 2025-era answer to a ``body`` :func:`decode` refused, in the SDK's 2025 handler's words:
    ``Parse error: <the parser's text>`` or ``Validation error: <the envelope validator's text>``
    (``INVALID_PARAMS``); ``refusal`` itself when the SDK's checks would pass it. Runs only on a
    refused body: a well-formed one is parsed once."""
    try:
        parsed = pydantic_core.from_json(body)
    except ValueError as exc:
        return error_message(None, ErrorData(code=PARSE_ERROR, message=f"Parse error: {exc}"))
    try:
        jsonrpc_message_adapter.validate_python(parsed, by_name=False)
    except ValidationError as exc:
        return error_message(None, ErrorData(code=INVALID_PARAMS, message=f"Validation error: {exc}"))
    return error_message(refusal.id, refusal.error)
