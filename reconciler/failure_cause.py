"""Why a source failed, in words an operator can act on (issue 28, ADR 0027).

A failed connect, initialize or listing used to surface as "upstream unavailable" whatever
happened. :func:`classify` turns the exception a read raised — its whole chain: ``__cause__``,
``__context__`` and exception groups — plus the :class:`Evidence` the connection's transport
gathered (the HTTP status of the last refused request, the exit code of a process that ended
on its own and its last stderr lines) into one :class:`FailureCause`. It is called at the one place a source's read
failure is recorded (``reconciler/reconcile.py``), so ``sources``, ``status``, ``/v1``, the
console and the log all show the same cause.

Sanitized (I12): ``summary`` names the kind of failure, the setting to change and numbers
(seconds, status codes, exit codes), never an upstream's own words, a host or a port.
``stderr_tail`` is for operators only (``/v1`` and the CLI, never an agent): the upstream's last
stderr lines, redacted like the log (``reconciler/redaction.py``) and bounded. Agents calling a
failed source still get only the front door's sanitized JSON-RPC error."""

from __future__ import annotations

import collections
import os
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_reconciler.reconciler.redaction import redact_text

#: Upstream stderr lines kept per connection for the cause of its failure.
STDERR_TAIL_LINES = 5
#: ... each cut to this many characters.
STDERR_TAIL_CHARS = 300

#: Commands whose first start may download a package or an image before the server speaks
#: (``npx -y pkg``, ``uvx pkg``, ``docker run image``): their first connect gets
#: :data:`DEFAULT_STARTUP_S` instead of ``timeouts.connect_s`` unless ``timeouts.startup_s`` says
#: otherwise. A cold ``npx -y`` of a small server takes 5 to 30 s on an ordinary connection; the
#: default stays inside a reconcile cycle's read deadline (90 % of the 45 s ``cycle_timeout_s``),
#: so a slow start never holds the whole cycle past it.
LAUNCHERS = frozenset({"npx", "uvx", "bunx", "pipx", "docker", "podman", "pnpm", "yarn", "deno", "nix"})
DEFAULT_STARTUP_S = 40.0

KINDS = (
    "timeout",
    "connection_refused",
    "dns",
    "tls",
    "http_status",
    "process_not_found",
    "process_exited",
    "protocol",
    "bound_exceeded",
    "rejected",
    "unavailable",
)


@dataclass(frozen=True, slots=True)
class FailureCause:
    """One failure of one source, typed. ``kind`` is one of :data:`KINDS`; ``summary`` is the
    sanitized sentence shown as the source's last error; the other fields are the numbers it
    names (``None`` when not applicable)."""

    kind: str
    summary: str
    setting: str | None = None  # the config key to change, e.g. "timeouts.connect_s"
    timeout_s: float | None = None
    http_status: int | None = None
    exit_code: int | None = None
    stderr_tail: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the wire model ``FailureCauseOut`` has the same keys)."""
        return {
            "kind": self.kind,
            "summary": self.summary,
            "setting": self.setting,
            "timeout_s": self.timeout_s,
            "http_status": self.http_status,
            "exit_code": self.exit_code,
            "stderr_tail": list(self.stderr_tail),
        }


class ConnectTimeoutError(TimeoutError):
    """A connection's connect deadline (MCP handshake included) ran out. ``setting`` names the
    config key that set it: ``timeouts.connect_s`` or, on a first start, ``timeouts.startup_s``."""

    def __init__(self, seconds: float, setting: str) -> None:
        super().__init__(f"connect timed out after {seconds:g} s ({setting})")
        self.seconds = seconds
        self.setting = setting


class Evidence:
    """What one connection's transport saw of its upstream, for the cause of its failure.
    Mutable by design (filled while the connection lives, read once when it fails); bounded."""

    def __init__(self) -> None:
        self.http_status: int | None = None
        self.exit_code: int | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The last stderr lines, oldest first, redacted and cut."""
        return tuple(self._tail)

    def observe_status(self, status: int) -> None:
        """An HTTP answer's status: an error status is remembered (the SDK hides it behind a
        generic JSON-RPC error), a success clears it."""
        self.http_status = status if status >= 400 else None

    def stderr_line(self, text: str) -> None:
        """Note one stderr line (redacted and cut)."""
        line = redact_text(text)
        self._tail.append(line if len(line) <= STDERR_TAIL_CHARS else line[:STDERR_TAIL_CHARS] + " …(cut)")

    def process_exited(self, code: int | None) -> None:
        """The stdio process ended on its own with ``code`` (``stdio_peer.stdio_channel``'s ``on_exit``)."""
        self.exit_code = code


def startup_allowance(transport: Mapping[str, Any]) -> float | None:
    """The first connect's deadline for a source with this transport: ``timeouts.startup_s``
    if set, :data:`DEFAULT_STARTUP_S` for a launcher command (:data:`LAUNCHERS`), else None
    (the first connect gets ``timeouts.connect_s`` like every other)."""
    timeouts = transport.get("timeouts") or {}
    if timeouts.get("startup_s") is not None:
        return float(timeouts["startup_s"])
    if transport.get("kind") == "stdio" and launcher(str(transport.get("command", ""))):
        return DEFAULT_STARTUP_S
    return None


def launcher(command: str) -> bool:
    """Whether ``command`` (a name or a path) is a package or container launcher."""
    name = os.path.basename(command)
    for suffix in (".cmd", ".exe"):
        name = name.removesuffix(suffix)
    return name in LAUNCHERS


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """Every exception in ``exc``'s tree: itself, its groups' members, causes and contexts."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen or len(seen) > 64:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        if e.__cause__ is not None:
            todo.append(e.__cause__)
        if e.__context__ is not None:
            todo.append(e.__context__)


_HTTP_WORDS = {401: "unauthorized", 403: "forbidden", 404: "not found", 429: "too many requests"}
_DNS = re.compile(r"(?i)name or service not known|nodename nor servname|getaddrinfo|temporary failure in name")
_TLS_SUMMARY = "TLS handshake failed (an https:// url to a plain http:// port, or an untrusted certificate?)"
_TLS = re.compile(r"(?i)\bssl\b|\btls\b|certificate|wrong version number|handshake")


def _http(status: int, stderr_tail: tuple[str, ...] = ()) -> FailureCause:
    word = _HTTP_WORDS.get(status, "server error" if status >= 500 else "client error")
    hint = {
        401: "; check the source's headers or oauth credentials",
        403: "; the credentials lack access",
        404: "; check the source's url path",
    }.get(status, "")
    return FailureCause("http_status", f"HTTP {status} {word}{hint}", http_status=status, stderr_tail=stderr_tail)


def classify(exc: BaseException, transport: Mapping[str, Any], evidence: Evidence | None = None) -> FailureCause:
    """The cause of a failed read of a source with ``transport`` (its spec's transport mapping)
    that raised ``exc``; ``evidence`` is what its connection saw (``SourceReadError.evidence``
    when the reader attached it)."""
    evidence = evidence if evidence is not None else _evidence_of(exc)
    tail = evidence.stderr_tail if evidence is not None else ()
    chain = list(_chain(exc))
    kind = transport.get("kind")
    for e in chain:
        if isinstance(e, ConnectTimeoutError):
            return FailureCause(
                "timeout",
                f"timed out after {e.seconds:g} s connecting ({e.setting}); raise it if the server is slow to start",
                setting=e.setting,
                timeout_s=e.seconds,
                stderr_tail=tail,
            )
    for e in chain:
        cause_kind = getattr(e, "cause_kind", None)
        if cause_kind in ("bound_exceeded", "protocol"):
            return FailureCause(cause_kind, str(getattr(e, "reason", e)), stderr_tail=tail)
    if kind == "stdio":
        for e in chain:
            if isinstance(e, FileNotFoundError | PermissionError | NotADirectoryError):
                # The command is not named: it is a path, and may hold an interpolated secret.
                if isinstance(e, PermissionError):
                    return FailureCause("process_not_found", "process not found: stdio.command is not executable")
                cwd = transport.get("cwd")
                if cwd and not os.path.isdir(str(cwd)):
                    return FailureCause("process_not_found", "process not found: the source's stdio.cwd does not exist")
                return FailureCause(
                    "process_not_found", "process not found: stdio.command is not on PATH or not at its path"
                )
        if evidence is not None and evidence.exit_code is not None:
            code = evidence.exit_code
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return FailureCause(
                "process_exited",
                f"process {how}" + ("; its last stderr lines are in the cause" if tail else ""),
                exit_code=code,
                stderr_tail=tail,
            )
    if evidence is not None and evidence.http_status is not None:
        return _http(evidence.http_status)
    for e in chain:
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int) and status >= 400:
            return _http(status)
    for e in chain:
        if isinstance(e, ssl.SSLError | ssl.CertificateError):
            return FailureCause(
                "tls",
                _TLS_SUMMARY,
            )
        if isinstance(e, socket.gaierror):
            return FailureCause("dns", "DNS lookup failed: the url's host name does not resolve")
        if isinstance(e, ConnectionRefusedError):
            return FailureCause("connection_refused", "connection refused: nothing listens at the source's url")
    for e in chain:
        text = str(e)
        if type(e).__name__ == "ConnectError":
            if _TLS.search(text):
                return FailureCause(
                    "tls",
                    _TLS_SUMMARY,
                )
            if _DNS.search(text):
                return FailureCause("dns", "DNS lookup failed: the url's host name does not resolve")
            return FailureCause("connection_refused", "connection refused: nothing listens at the source's url")
    for e in chain:
        if isinstance(e, TimeoutError):
            seconds = getattr(e, "seconds", None)
            setting = getattr(e, "setting", None)
            summary = "timed out" + (f" after {seconds:g} s" if seconds is not None else "")
            return FailureCause(
                "timeout",
                summary + (f" ({setting})" if setting else ""),
                setting=setting,
                timeout_s=seconds,
                stderr_tail=tail,
            )
    for e in chain:
        if type(e).__name__ == "ValidationError":
            return FailureCause("protocol", "protocol error: the upstream sent a malformed message", stderr_tail=tail)
        error = getattr(e, "error", None)
        rpc_code = getattr(error, "code", None)
        if type(e).__name__ == "MCPError" and isinstance(rpc_code, int):
            message = str(getattr(error, "message", ""))
            if message == "Connection closed":
                if kind == "stdio":
                    return FailureCause(
                        "process_exited", "process closed its output before answering", stderr_tail=tail
                    )
                return FailureCause("unavailable", "the upstream closed the connection", stderr_tail=tail)
            return FailureCause(
                "rejected", f"upstream rejected the request (JSON-RPC error {rpc_code})", stderr_tail=tail
            )
    reason = getattr(exc, "reason", None)
    return FailureCause(
        "unavailable", str(reason) if isinstance(reason, str) else "upstream unavailable", stderr_tail=tail
    )


def _evidence_of(exc: BaseException) -> Evidence | None:
    for e in _chain(exc):
        evidence = getattr(e, "evidence", None)
        if isinstance(evidence, Evidence):
            return evidence
    return None
