"""Multi-round requests (SEP-2322, 2026-07-28): a 2026-era upstream answers a call that needs
input with an ``InputRequiredResult`` — input requests (sampling, elicitation, roots) and an
opaque ``request_state`` — and expects the call again with the answers and the state.

- **For a 2025-era client** (:func:`fulfil`): the gateway asks the client each input request as
  a server→client request on the call's own stream (capability-checked, like any relayed
  request), retries upstream with the answers and the upstream's state — which the client never
  sees — and returns the final result; at most :data:`MAX_INPUT_ROUNDS` rounds
  (``input_rounds_exceeded``, -32032, past them).
- **For a 2026-era client**: the result passes through unchanged except its ``request_state``,
  which the gateway seals to the session (:class:`StateSeal`: ``gw1.s.<payload>.<mac>``, an
  HMAC-SHA256 over the session id, the source, the revision and the upstream's state, which
  stays opaque — base64, never inspected). The retry is unsealed and sent to the same source,
  on the same revision while it is live. A state presented by another session, altered, or for
  another source is ``invalid_request_state`` (-32031). When the result asks for something the
  client did not declare, the client gets ``capability_missing`` (-32030): it could not answer,
  and the upstream has no error channel in this exchange.

(``exchanges`` handles the other direction: 2026-era clients on 2025-era upstreams.)"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from pydantic import Discriminator, Tag, TypeAdapter

from mcp_reconciler.api.frontdoor.capabilities import missing_capability
from mcp_reconciler.api.frontdoor.relay import (
    CAPABILITY_MISSING,
    INPUT_ROUNDS_EXCEEDED,
    INVALID_REQUEST_STATE,
    Call,
    Relay,
    RelayError,
)
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler.upstream import UpstreamConnection

MAX_INPUT_ROUNDS = 10  # rounds fulfilled for one legacy call (the SDK client's own default)

#: Retries the upstream request with a round's answers and the upstream's state.
Retry = Callable[[types.InputResponses | None, str | None], Awaitable[Any]]


def _result_kind(value: Any) -> str:
    """``input`` for an ``InputRequiredResult`` (raw or parsed), ``result`` otherwise."""
    tag = value.get("resultType") if isinstance(value, dict) else getattr(value, "result_type", None)
    return "input" if tag == "input_required" else "result"


def _or_input_required(result: type[Any]) -> TypeAdapter[Any]:
    """A parser for ``result`` or an ``InputRequiredResult``, picked by ``resultType`` — as cheap
    as parsing ``result`` alone (a plain union tries both arms: ~40 % more per call)."""
    arms: Any = Annotated[result, Tag("result")] | Annotated[types.InputRequiredResult, Tag("input")]
    return TypeAdapter(Annotated[arms, Discriminator(_result_kind)])


#: For the results a 2026-era upstream may answer with an ``InputRequiredResult`` instead.
INTERACTIVE: dict[type[Any], TypeAdapter[Any]] = {
    kind: _or_input_required(kind) for kind in (types.CallToolResult, types.ReadResourceResult, types.GetPromptResult)
}


SEALED_PREFIX = "gw1.s."
HELD_PREFIX = "gw1.h."


def invalid_state() -> RelayError:
    """The one answer for a ``request_state`` this session may not use (it does not say why:
    unknown, expired, another session's or another name's all look the same)."""
    return RelayError(
        INVALID_REQUEST_STATE,
        "request_state is not valid for this session (unknown, expired, or for another call)",
        {"code": "invalid_request_state", "retryable": False},
    )


def owned(state: str) -> bool:
    """Whether ``state`` has the shape of a ``request_state`` the gateway mints."""
    return state.startswith((SEALED_PREFIX, HELD_PREFIX))


@dataclass(frozen=True, slots=True)
class Sealed:
    """An opened sealed state: where the retry goes and what the upstream gets back."""

    source: str
    revision: int
    upstream_state: str | None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StateSeal:
    """Seals an upstream's ``request_state`` to one session (HMAC-SHA256 under a key minted per
    process: a state does not survive a gateway restart, like the SDK's own default)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, session_id: str, payload: str) -> str:
        message = b"gw1\x00" + session_id.encode() + b"\x00" + payload.encode()
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest())

    def seal(self, session_id: str, source: str, revision: int, upstream_state: str | None) -> str:
        """The ``request_state`` a 2026-era client gets in place of the upstream's."""
        payload = _b64(json.dumps({"s": source, "r": revision, "u": upstream_state}, separators=(",", ":")).encode())
        return f"{SEALED_PREFIX}{payload}.{self._mac(session_id, payload)}"

    def open(self, session_id: str, state: str) -> Sealed:
        """The sealed content, if ``state`` was sealed for ``session_id``; ``RelayError`` otherwise."""
        body = state.removeprefix(SEALED_PREFIX)
        payload, _, mac = body.partition(".")
        if not mac or not hmac.compare_digest(mac, self._mac(session_id, payload)):
            raise invalid_state()
        try:
            data = json.loads(_unb64(payload))
            return Sealed(str(data["s"]), int(data["r"]), data["u"] if isinstance(data["u"], str) else None)
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise invalid_state() from None


async def answer_input_required(
    relay: Relay,
    seal: StateSeal,
    binding: Binding,
    ctx: ServerRequestContext[Any],
    call: Call,
    conn: UpstreamConnection,
    source: str,
    revision: int,
    first: types.InputRequiredResult,
    retry: Retry,
) -> Any:
    """What the caller gets for an upstream ``InputRequiredResult`` (module docstring)."""
    if binding.era == "legacy":
        return await fulfil(relay, call, conn, first, retry)
    refusal = missing_for_client(ctx, first.input_requests or {})
    if refusal is not None:
        raise refusal
    return first.model_copy(
        update={"request_state": seal.seal(binding.session.id, source, revision, first.request_state)}
    )


async def fulfil(
    relay: Relay,
    call: Call,
    conn: UpstreamConnection,
    first: types.InputRequiredResult,
    retry: Retry,
) -> Any:
    """Drive an upstream ``InputRequiredResult`` to its final result for a legacy client:
    each round's input requests are asked of the client (server→client requests), then the
    upstream request is retried with the answers and the upstream's ``request_state``
    (never shown to the client). A round with only state waits 50 ms doubling to 250 ms."""
    current: Any = first
    rounds = 0
    delay = 0.05
    while isinstance(current, types.InputRequiredResult):
        rounds += 1
        if rounds > MAX_INPUT_ROUNDS:
            raise RelayError(
                INPUT_ROUNDS_EXCEEDED,
                f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times",
                {"code": "input_rounds_exceeded", "retryable": False},
            )
        responses: types.InputResponses | None = None
        if current.input_requests:
            delay = 0.05
            responses = {}
            for key, request in current.input_requests.items():
                answer = await relay.ask_downstream(call, conn, request)
                if isinstance(answer, types.ErrorData):
                    raise client_error(answer)
                responses[key] = answer
        else:
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)
        current = await retry(responses, current.request_state)
    return current


def client_error(answer: types.ErrorData) -> RelayError:
    """The downstream-facing error for an input request that could not be fulfilled."""
    data = answer.data if isinstance(answer.data, dict) else {}
    if data.get("code") == "capability_missing":
        return RelayError(
            CAPABILITY_MISSING,
            f"the upstream needs {data.get('capability', 'a capability')}, which this client did not declare",
            {"code": "capability_missing", "capability": data.get("capability"), "retryable": False},
        )
    # The client's own answer (declined, failed): its words, back to it.
    return RelayError(answer.code, answer.message, answer.data)


def missing_for_client(ctx: ServerRequestContext[Any], requests: Mapping[str, types.InputRequest]) -> RelayError | None:
    """For a 2026-era client: the error to answer when an upstream ``InputRequiredResult`` asks
    for something the client did not declare (it could not answer, and the upstream has no
    error channel in that exchange)."""
    for request in requests.values():
        missing = missing_capability(ctx, request)
        if missing is not None:
            return RelayError(
                CAPABILITY_MISSING,
                f"the upstream needs {missing}, which this client did not declare",
                {"code": "capability_missing", "capability": missing, "retryable": False},
            )
    return None
