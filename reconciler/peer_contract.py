"""The contract every upstream channel keeps (ADR 0025), and the error a bound produces.

An upstream *channel* is what one connected source speaks JSON-RPC through: the pair of
streams the gateway's session (``reconciler/jsonrpc_peer.py::StreamSession``, ADR 0037) reads
:class:`~mcp.shared.message.SessionMessage` items (or transport ``Exception`` values) from and
writes them to. The stdio channel is ours (``reconciler/stdio_peer.py``); every exchange with a
streamable-HTTP source goes through that source's peer (``reconciler/http_peer.py``, ADR 0030),
which keeps guarantees 1, 2 and 4 per exchange (a refused message drops its connection: 3 is
"recycled"); legacy SSE's channel is the SDK's ``sse_client`` (the documented exception) over
our bounded HTTP transport (``reconciler/sse_channel.py``, ADR 0043), which keeps 1 to 5 per event.

Guarantees of a channel that keeps :class:`UpstreamChannel` (the stdio one does; the tests in
``tests/integration/test_stdio_peer.py`` check each):

1. **Bounded while reading.** A single message (a line on stdio) is counted as it arrives; one
   larger than ``limits.upstream_message_bytes`` is refused *there*: its bytes past the bound are
   skipped, never buffered or parsed. Memory per channel is one message at most.
2. **The refused call gets an answer.** When the refused message is a response, the request it
   answers fails at once with :func:`bound_error` (a JSON-RPC error naming the bound, its size
   and the config key; nothing about the upstream itself, I12). The client session raises it as
   :class:`MessageBoundError`. A refused server→client request is answered upstream with the same
   error; a refused notification is dropped. The operator log names the source and the size.
3. **Recovered or recycled.** After a refused message the channel resynchronises at the next
   message boundary (stdio: the next newline) and keeps serving; when the refused message cannot
   be attributed to a request, the channel ends instead (its connection dies and is replaced),
   so no call waits on an answer that was skipped.
4. **Linear.** Reading costs time proportional to the bytes read: each byte is copied a bounded
   number of times, whatever the chunking (the SDK's stdio reader re-copied its whole buffer per
   chunk: quadratic).
5. **Ends are observed.** End of stream (EOF, process exit, broken pipe) closes the read stream
   so the session, and the connection's death detection, see it.
6. **Owned stop.** Leaving the channel's context stops everything it started, in the order
   docs/DESIGN.md gives (I14, I15): for a process, close stdin, wait, SIGTERM its process group,
   wait, SIGKILL the group; it never signals any other process."""

from __future__ import annotations

from typing import Any, Protocol

import mcp_types as types
from mcp import MCPError
from mcp.shared.message import SessionMessage

#: The config key (under ``gateway:``) of the per-message bound, as clients and operators see it.
MESSAGE_BOUND_KEY = "limits.upstream_message_bytes"

#: The default per-message bound. 32 MiB holds every real tool result we have seen (the largest
#: common ones are base64 images and file contents of a few MiB) with room to spare, while
#: keeping one connection's worst case a small multiple of it in RSS (ADR 0025).
DEFAULT_UPSTREAM_MESSAGE_BYTES = 32 * 1024 * 1024

#: ``error.data.code`` of the JSON-RPC error a refused message produces, and its JSON-RPC code
#: (in the gateway's own range, ``api/errors.py``; stable: clients may branch on it).
MESSAGE_TOO_LARGE = "upstream_message_too_large"
MESSAGE_TOO_LARGE_CODE = -32020


class MessageBoundError(MCPError):
    """An upstream message larger than a bound was refused while it was read. ``bound`` is the
    bound's config key, ``limit`` its value in bytes, ``size`` how many bytes had arrived when
    the message was refused (a lower bound of its size). An :class:`~mcp.MCPError`, so callers
    that forward upstream errors forward this one as the client-facing error it carries."""

    def __init__(self, bound: str, limit: int, size: int) -> None:
        error = bound_error(bound, limit, size)
        super().__init__(error.code, error.message, error.data)
        self.bound = bound
        self.limit = limit
        self.size = size

    @classmethod
    def from_mcp_error(cls, exc: MCPError) -> MessageBoundError | None:
        """The bound error ``exc`` carries (an error answer :func:`bound_error` made), or None."""
        data = exc.error.data
        if not isinstance(data, dict) or data.get("code") != MESSAGE_TOO_LARGE:
            return None
        # The error travels through the client session like an upstream's own, so an upstream
        # could send one: only known bound names and integers are taken from it, and the message
        # is rebuilt from them (no upstream text reaches a client, I12).
        bound, limit, size = data.get("bound"), data.get("limit"), data.get("size")
        if bound not in KNOWN_BOUNDS or type(limit) is not int or type(size) is not int:
            return None
        return cls(bound, limit, size)


#: The bound a list page's entry count is held to while read (not a config key: ``Bounds``).
ENTRIES_BOUND = "entries_per_generation"


#: The bound a legacy-SSE event is held to where the SDK's SSE client's own event cap is tighter
#: than the configured bound (``reconciler/sse_channel.py``, ADR 0043; not a config key).
SSE_EVENT_BOUND = "sse_event_bytes"

#: Every bound a channel refuses a message at.
KNOWN_BOUNDS = frozenset({MESSAGE_BOUND_KEY, ENTRIES_BOUND, "bytes_per_candidate", SSE_EVENT_BOUND})


def bound_unit(bound: str) -> str:
    """What ``bound`` counts: ``entries`` for the entry bound, ``bytes`` for the others."""
    return "entries" if bound == ENTRIES_BOUND else "bytes"


def bound_error(bound: str, limit: int, size: int) -> types.ErrorData:
    """The JSON-RPC error a call gets when its upstream answer passed ``bound``."""
    unit = bound_unit(bound)
    hint = f"ask for less, or raise gateway.{bound}" if bound == MESSAGE_BOUND_KEY else "ask for less"
    return types.ErrorData(
        code=MESSAGE_TOO_LARGE_CODE,
        message=f"the upstream's answer is larger than {bound} ({limit} {unit}; refused at {size} {unit}): {hint}",
        data={"code": MESSAGE_TOO_LARGE, "retryable": False, "bound": bound, "limit": limit, "size": size},
    )


class UpstreamChannel(Protocol):
    """The two ends a client session speaks through (see the module docstring for the
    guarantees). ``receive`` yields messages in arrival order, or transport ``Exception`` values
    for a malformed message; it raises ``anyio.EndOfStream`` once the upstream is gone."""

    async def receive(self) -> SessionMessage | Exception:
        """The next message from the upstream."""
        ...

    async def send(self, item: SessionMessage) -> None:
        """Write one message to the upstream (in order; ``anyio.ClosedResourceError`` after the end)."""
        ...

    async def aclose(self) -> None:
        """Close this end."""
        ...


#: The fields of a list result that hold its entries.
LIST_FIELDS = ("tools", "resources", "resourceTemplates", "prompts")


def is_list_method(message: Any) -> bool:
    """Whether an outgoing JSON-RPC message asks for a list page (its answer is bounded by the
    listing's bounds as well as the message bound)."""
    return getattr(message, "method", None) in LIST_METHODS


#: The methods whose answers are list pages.
LIST_METHODS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
