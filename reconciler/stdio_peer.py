"""Our stdio channel (ADR 0025): an upstream process's newline-delimited JSON, read
incrementally, bounded per line, linear in the bytes read.

It replaces the SDK's ``stdio_client``, whose reader concatenated its whole pending buffer with
every 64 KiB chunk (a 50 MB line cost 22.5 s of CPU). Here a line's chunks are kept as a list
and joined once; a line longer than its bound stops being kept the moment it passes it (the
rest is counted and skipped up to the next newline) and its first :data:`PREFIX_BYTES` tell
which request it answered, so that request fails at once with the bound's error
(:mod:`reconciler.peer_contract`, guarantee 2). List pages have the tighter bound the listing
gives (``bytes_per_candidate``): the writer sees every outgoing list request and remembers its id.

Process handling is what it was under the SDK (I14, I15): the process starts in its own session
(process group); on exit stdin is closed, the process gets
:data:`EXIT_GRACE_S` to go, then its group is SIGTERMed and SIGKILLed
(``mcp.os.posix.utilities.terminate_posix_process_tree``, public). stderr goes where the caller
says (the transport pumps it into log records, ``reconciler/logsource.py``)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

import anyio
import mcp_types as types
import pydantic_core
from anyio.abc import Process
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.peer_contract import (
    ENTRIES_BOUND,
    LIST_FIELDS,
    MESSAGE_BOUND_KEY,
    bound_error,
    is_list_method,
)
from mcp_reconciler.reconciler.sliced_json import SLICED_BYTES, EntriesPassed, parse_message, parse_sliced

log = logging.getLogger("mcp_reconciler.upstream.stdio")

#: How much of a refused line is kept to find its envelope (``id``, ``method``): JSON-RPC
#: envelopes put those first in every SDK we know; a line whose id is not in here is
#: unattributable and ends the channel (guarantee 3).
PREFIX_BYTES = 4096
#: Bytes read from the pipe at once.
CHUNK_BYTES = 256 * 1024
#: After stdin closes, how long the process has to exit before its group is signalled.
EXIT_GRACE_S = 2.0
#: Between SIGTERM and SIGKILL of the process group.
KILL_GRACE_S = 2.0
#: How long the writer may take to flush what it accepted before stdin closes.
FLUSH_S = 0.5
#: How long to wait for the event loop to observe a killed process.
REAP_S = 2.0


@dataclass(frozen=True, slots=True)
class Refused:
    """A line refused at its bound: ``bound`` (config key) and ``limit`` that applied, ``size``
    the bytes seen when it was refused, ``prefix`` its first bytes (for its envelope)."""

    bound: str
    limit: int
    size: int
    prefix: bytes


@dataclass(frozen=True, slots=True)
class Skipped:
    """The end of a refused line: ``size`` is its whole length in bytes (for the operator log)."""

    size: int


#: Given a long line's first bytes, which bound applies to it: (config key, bytes).
LimitFor = Callable[[bytes], tuple[str, int]]


class LineSplitter:
    """Splits a byte stream into lines, keeping at most one line's bytes (up to its bound).

    Linear: each byte is scanned once for the newline and copied at most twice (into a piece,
    then into the joined line). A line is measured as it grows; when it passes ``soft`` bytes
    ``limit_for(first bytes)`` says which bound applies (a list page's may be tighter than the
    message bound); past that bound the line is :class:`Refused` and skipped to its newline
    (:class:`Skipped` then reports its length)."""

    def __init__(self, limit: int, *, limit_for: LimitFor | None = None, soft: int | None = None) -> None:
        self._limit_for = limit_for or (lambda _prefix: (MESSAGE_BOUND_KEY, limit))
        self._soft = min(soft if soft is not None else limit, limit)
        self._pieces: list[bytes] = []
        self._size = 0
        self._line_limit: int | None = None  # decided once the line passes ``soft``
        self._skipping = False
        self._bound = MESSAGE_BOUND_KEY

    @property
    def pending(self) -> int:
        """Bytes of the current, unfinished line (kept or skipped)."""
        return self._size

    def feed(self, chunk: bytes) -> list[bytes | Refused | Skipped]:
        """What ``chunk`` completes: whole lines (without the newline), refusals and skips, in order."""
        out: list[bytes | Refused | Skipped] = []
        start = 0
        end = len(chunk)
        while start < end:
            newline = chunk.find(b"\n", start)
            stop = end if newline < 0 else newline
            self._take(chunk, start, stop, out)
            if newline < 0:
                break
            if self._skipping:
                out.append(Skipped(self._size))
            else:
                line = b"".join(self._pieces)
                if line.strip():
                    out.append(line)
            self._reset()
            start = newline + 1
        return out

    def _reset(self) -> None:
        """Start the next line (or, in a subclass, the next message)."""
        self._pieces = []
        self._size = 0
        self._line_limit = None
        self._skipping = False

    def _head(self, chunk: bytes, start: int) -> bytes:
        """The current line's first :data:`PREFIX_BYTES` (copies no more than that)."""
        head = bytearray()
        for piece in self._pieces:
            head += piece[: PREFIX_BYTES - len(head)]
            if len(head) >= PREFIX_BYTES:
                return bytes(head)
        head += chunk[start : start + PREFIX_BYTES - len(head)]
        return bytes(head)

    def _take(self, chunk: bytes, start: int, stop: int, out: list[bytes | Refused | Skipped]) -> None:
        count = stop - start
        if count == 0:
            return
        if self._skipping:
            self._size += count
            return
        new_size = self._size + count
        if new_size > self._soft and self._line_limit is None:
            self._bound, self._line_limit = self._limit_for(self._head(chunk, start))
        if self._line_limit is not None and new_size > self._line_limit:
            out.append(Refused(self._bound, self._line_limit, new_size, self._head(chunk, start)))
            self._pieces = []
            self._skipping = True
            self._size = new_size
            return
        self._pieces.append(chunk[start:stop])
        self._size = new_size


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the top level of a message's first bytes says: its ``id`` (if seen) and whether it
    has a ``method`` (a request or notification from the server, not an answer)."""

    id: int | str | None
    has_method: bool


def envelope(prefix: bytes) -> Envelope:
    """The top-level ``id`` and ``method`` keys of a JSON object's first bytes. Only depth-1
    keys count (an ``"id"`` inside ``result`` is not the envelope's); scanning stops at the end
    of the prefix."""
    text = prefix.decode("utf-8", "replace")
    depth = 0
    i = 0
    n = len(text)
    found_id: int | str | None = None
    has_method = False
    expect_key = False
    while i < n:
        ch = text[i]
        if ch == '"':
            j = _string_end(text, i)
            if j < 0:
                break
            if depth == 1 and expect_key:
                key = text[i + 1 : j]
                k = j + 1
                while k < n and text[k] in " \t\r\n":
                    k += 1
                if k < n and text[k] == ":":
                    if key == "method":
                        has_method = True
                    elif key == "id":
                        found_id = _id_value(text, k + 1)
                expect_key = False
            i = j + 1
            continue
        if ch in "{[":
            depth += 1
            expect_key = ch == "{" and depth == 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            expect_key = True
        i += 1
    return Envelope(found_id, has_method)


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i
        i += 1
    return -1


def _id_value(text: str, start: int) -> int | str | None:
    i = start
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    if i < len(text) and text[i] == '"':
        end = _string_end(text, i)
        if end < 0:
            return None
        try:
            value = pydantic_core.from_json(text[i : end + 1])
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    j = i
    while j < len(text) and (text[j].isdigit() or (j == i and text[j] == "-")):
        j += 1
    if j == i or j >= len(text) or text[j] not in " \t\r\n,}":
        return None  # not a whole integer in the prefix (or not an integer at all)
    return int(text[i:j])


#: A line longer than this is parsed in slices (``reconciler/sliced_json.py``): the loop gets
#: a checkpoint every few milliseconds instead of waiting for the whole parse.
SLICE_BYTES = SLICED_BYTES


async def parse_line(line: bytes, lists: ListWatch | None = None) -> SessionMessage | Exception:
    """One line as the session's message, or the exception a malformed one is (the session
    hands those to its message handler, as with the SDK's reader). A long line is parsed in
    slices (:func:`~reconciler.sliced_json.parse_message`: no slice holds the loop longer than
    a few ms, ADR 0040), a short one whole with ``from_json``; then the SDK's
    ``validate_python``, the same model as its ``validate_json`` at a tenth of the cost for
    results with many small objects (the result stays a plain ``dict``, not rebuilt). An answer
    to a list request with more entries than ``lists`` allows becomes the bound's error within
    a slice of entry ``entries + 1``: nothing further is parsed, and no entry is validated (the
    session would validate each one)."""
    try:
        request_id = lists.list_request(line) if lists is not None and len(line) > SLICE_BYTES else None
        if request_id is not None:
            assert lists is not None
            try:
                data = await parse_sliced(line, list_fields=_LIST_FIELDS, entries=lists.entries)
            except EntriesPassed as passed:
                return SessionMessage(lists.refused(request_id, passed.count))
        else:
            data = await parse_message(line)
        if lists is not None and (refused := lists.refuse(data)) is not None:
            return SessionMessage(refused)
        message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except (ValueError, ValidationError) as exc:
        return exc
    return SessionMessage(message)


_LIST_FIELDS = frozenset(LIST_FIELDS)


class ListWatch:
    """Ids of list requests in flight on a stdio or legacy-SSE channel: their answers have the
    listing's bounds, ``limit`` bytes (while read) and ``entries`` entries (while parsed, before
    any entry is validated)."""

    def __init__(self, source: str, limit: int | None, entries: int | None = None) -> None:
        self.source = source
        self.limit = limit
        self.entries = entries
        self.ids: set[int | str] = set()

    def watch(self, message: Any) -> None:
        """Remember ``message``'s id if it asks for a list page (and a list bound is set)."""
        if (self.limit is not None or self.entries is not None) and is_list_method(message):
            self.ids.add(message.id)

    def list_request(self, line: bytes) -> int | str | None:
        """The id of the list request ``line`` answers, from its envelope (None: no list request)."""
        env = envelope(line[:PREFIX_BYTES])
        return env.id if not env.has_method and env.id is not None and env.id in self.ids else None

    @staticmethod
    def count(data: Any) -> int:
        """How many entries a (possibly partial) parsed list answer holds."""
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, dict):
            return 0
        return max((len(v) for k in LIST_FIELDS if isinstance(v := result.get(k), list)), default=0)

    def refuse(self, data: Any) -> types.JSONRPCError | None:
        """The bound's error for a parsed answer to a list request with too many entries, else None."""
        if self.entries is None or not isinstance(data, dict):
            return None
        request_id = data.get("id")
        result = data.get("result")
        if not isinstance(request_id, int | str) or request_id not in self.ids or not isinstance(result, dict):
            return None
        count = self.count(data)
        if count <= self.entries:
            return None
        return self.refused(request_id, count)

    def refused(self, request_id: int | str, count: int) -> types.JSONRPCError:
        """The bound's error for the list request ``request_id``, whose page had ``count`` entries
        (at least: a sliced parse stops at the first one past the bound)."""
        assert self.entries is not None
        self.ids.discard(request_id)
        log.warning(
            "upstream %s: a list page refused at %d entries (%s is %d)", self.source, count, ENTRIES_BOUND, self.entries
        )
        telemetry.upstream_messages_refused.add(1, {"source": self.source, "bound": ENTRIES_BOUND})
        return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=bound_error(ENTRIES_BOUND, self.entries, count))

    def limit_for(self, message_limit: int) -> LimitFor:
        """Which bound a long message gets, from its first bytes: a list answer's, else ``message_limit``."""

        def decide(prefix: bytes) -> tuple[str, int]:
            env = envelope(prefix)
            if self.limit is not None and not env.has_method and env.id in self.ids:
                return "bytes_per_candidate", min(self.limit, message_limit)
            return MESSAGE_BOUND_KEY, message_limit

        return decide


def _command(params: StdioServerParameters) -> list[str]:
    command = params.command
    if command in ("python", "python3"):
        command = sys.executable
    return [command, *params.args]


@asynccontextmanager
async def stdio_channel(
    source: str,
    params: StdioServerParameters,
    *,
    message_bytes: int,
    list_bytes: int | None = None,
    list_entries: int | None = None,
    stderr: int | IO[Any] | None = None,
    on_exit: Callable[[int | None], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``params``'s process and yield the (read, write) streams a client session speaks
    through (:class:`~reconciler.peer_contract.UpstreamChannel`). ``message_bytes`` bounds every
    line; ``list_bytes`` and ``list_entries`` (if given) bound the answers to list requests.
    ``stderr`` is where the process's stderr goes (a file descriptor or file; default:
    inherited). ``on_exit`` gets the exit status of a process that ended on its own (its stdout
    closed before the channel did; negative: the signal), for the cause of a failed connect
    (``reconciler/failure_cause.py``). Spawn failures (``OSError``) propagate before anything
    else starts."""
    process = await anyio.open_process(
        _command(params),
        env=get_default_environment() | (params.env or {}),
        stderr=stderr,
        cwd=params.cwd,
        start_new_session=True,  # its own process group: stopped as a group, nothing else signalled
    )
    # From here, no await until the task group is entered (a cancellation would leak the process).
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    lists = ListWatch(source, list_bytes, list_entries)
    writer_done = anyio.Event()
    ended = anyio.Event()  # the process closed its stdout (exited) before the channel closed
    soft = min(message_bytes, list_bytes) if list_bytes is not None else message_bytes
    splitter = LineSplitter(message_bytes, limit_for=lists.limit_for(message_bytes), soft=soft)

    async def answer_refused(request_id: int | str, refused: Refused) -> None:
        error = bound_error(refused.bound, refused.limit, refused.size)
        reply = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await write_stream.send(SessionMessage(reply))

    async def on_refused(refused: Refused) -> bool:
        """Fail what the refused line was for; False when it cannot be attributed (end the channel)."""
        env = envelope(refused.prefix)
        log.warning(
            "upstream %s: message over %s (%d bytes) refused after %d bytes%s",
            source,
            refused.bound,
            refused.limit,
            refused.size,
            "" if env.id is not None or env.has_method else "; it names no request, so the connection is recycled",
        )
        telemetry.upstream_messages_refused.add(1, {"source": source, "bound": refused.bound})
        if env.has_method:
            if env.id is not None:  # a server→client request: tell the server, not the session
                await answer_refused(env.id, refused)
            return True
        if env.id is None:
            return False
        lists.ids.discard(env.id)
        error = bound_error(refused.bound, refused.limit, refused.size)
        await to_session.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=env.id, error=error)))
        return True

    async def reader() -> None:
        assert process.stdout is not None
        async with to_session:
            try:
                while True:
                    chunk = await process.stdout.receive(CHUNK_BYTES)
                    for item in splitter.feed(chunk):
                        if isinstance(item, bytes):
                            message = await parse_line(item, lists)
                            if isinstance(message, Exception):
                                # Labeled with the source and rate-limited by the edge's log filter.
                                log.warning(
                                    "upstream %s: skipped %d bytes on stdout that are not a JSON-RPC message (%s)",
                                    source,
                                    len(item),
                                    type(message).__name__,
                                )
                            if isinstance(message, SessionMessage) and isinstance(
                                message.message, types.JSONRPCResponse | types.JSONRPCError
                            ):
                                lists.ids.discard(message.message.id)
                            await to_session.send(message)
                        elif isinstance(item, Refused):
                            if not await on_refused(item):
                                return
                        else:
                            log.info("upstream %s: skipped a refused message of %d bytes", source, item.size)
            except anyio.EndOfStream:
                ended.set()  # stdout closed before we stopped it: the process ended on its own
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                return  # the process gone, or our own shutdown: the session sees the end

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for item in from_session:
                    lists.watch(item.message)
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the process stopped reading: the session must see the end
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # every wait below is bounded
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(FLUSH_S):
                    await writer_done.wait()
                ended_alone = ended.is_set()
                await stop_process(process)
                if on_exit is not None and ended_alone:
                    on_exit(process.returncode)
            tg.cancel_scope.cancel()


async def stop_process(process: Process) -> None:
    """Close stdin, give the process :data:`EXIT_GRACE_S`, then SIGTERM and SIGKILL its group
    (I15: only the group we started); then reap it, so no zombie outlives the channel.
    Bounded: returns within about 8 s whatever the process does."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    exited = await _exited(process, EXIT_GRACE_S)
    if not exited:
        await terminate_posix_process_tree(process, KILL_GRACE_S)
        exited = await _exited(process, REAP_S)
        if not exited:
            log.warning("upstream process %d is still alive after SIGKILL; abandoning it", process.pid)
    for out in (process.stdout, process.stderr):
        if out is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await out.aclose()
    if exited:
        # Our pipe ends are closed, so ``wait`` now waits only for the event loop to reap the
        # exited process (a grandchild holding the pipes open cannot delay it).
        with anyio.move_on_after(REAP_S), contextlib.suppress(OSError, ProcessLookupError, RuntimeError):
            await process.aclose()


async def _exited(process: Process, timeout_s: float) -> bool:
    """Whether the process exited within ``timeout_s``. Waits on a pidfd (readable once the
    process ends), not ``process.wait()``: on asyncio that also waits for pipe EOF, which a
    grandchild holding the pipe would delay for ever."""
    if process.returncode is not None:
        return True
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return True  # already gone and reaped
    try:
        with anyio.move_on_after(timeout_s):
            await anyio.wait_readable(pidfd)
            return True
        return False
    finally:
        os.close(pidfd)


__all__ = ["LineSplitter", "ListWatch", "Refused", "Skipped", "envelope", "parse_line", "stdio_channel", "stop_process"]

if os.name != "posix":  # pragma: no cover - the gateway runs on POSIX (process groups, I15)
    raise ImportError("reconciler.stdio_peer needs POSIX process groups")
