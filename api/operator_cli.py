"""Operator commands of the CLI (``status``, ``refresh``, ``sources``, ``generations``,
``sessions``, ``holds``, ``approvals``; the last three in ``api/session_cli.py`` and
``api/approval_cli.py``): human tables by default,
``--json`` for scripts.

Exit codes scripts can rely on: 0 success (``status``: the gateway serves, as ``/readyz`` 200
says — degraded included) · 1 the API answered an error (auth, not found, invalid) · 2 usage
error · 3 gateway unreachable · 4 ``status``: not ready (``/readyz`` 503: nothing published,
shutting down, cluster unconfirmed) · 5 ``refresh``: the cycle failed or timed out ·
6 ``status --strict``: serving, but degraded or with a config error."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
from pydantic import BaseModel

from mcp_reconciler.sdk import wire
from mcp_reconciler.sdk.auth import CommandTokenProvider, TokenProvider, TokenProviderError
from mcp_reconciler.sdk.client import ReconcilerClient
from mcp_reconciler.sdk.errors import ReconcilerAPIError, RefreshTimeout, Unreachable

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_NOT_READY, EXIT_CYCLE, EXIT_DEGRADED = 0, 1, 2, 3, 4, 5, 6
DEFAULT_URL = "http://127.0.0.1:8765"


def add_common(parser: argparse.ArgumentParser) -> None:
    """The connection options every operator command takes (``--url``, ``--token``, ``--token-command``,
    ``--json``)."""
    parser.add_argument("--url", default=os.environ.get("MCP_RECONCILER_URL", DEFAULT_URL), help="gateway base URL")
    parser.add_argument(
        "--token", default=os.environ.get("MCP_RECONCILER_TOKEN"), help="bearer token (env MCP_RECONCILER_TOKEN)"
    )
    parser.add_argument(
        "--token-command",
        default=os.environ.get("MCP_RECONCILER_TOKEN_COMMAND"),
        help="a command whose output is the bearer token, re-run when it expires or is refused "
        "(env MCP_RECONCILER_TOKEN_COMMAND; takes precedence over --token)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def ago(ts: float | None) -> str:
    """``ts`` (wall clock) as "12s ago", "3m ago", "1.5h ago"; "-" for None."""
    if ts is None:
        return "-"
    delta = max(0.0, time.time() - ts)
    if delta < 120:
        return f"{delta:.0f}s ago"
    if delta < 7200:
        return f"{delta / 60:.0f}m ago"
    return f"{delta / 3600:.1f}h ago"


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """``rows`` as a plain-text table under ``header`` and a dashed rule, columns padded to their widest
    cell (None shows as ``-``). Every row must have as many cells as the header."""
    cells = [list(map(str, header))] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit_json(value: Any) -> None:
    """Print ``value`` (a wire model, a list of them, or plain JSON data) as indented JSON."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    print(json.dumps(value, indent=2))


async def _status(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    # The exit code is /readyz's answer (ADR 0027): a gateway serving a revision is ready even
    # when degraded (a stale source, an invalid edit while the last good config serves);
    # ``--strict`` turns "serving, but not everything is well" into exit 6.
    ready = await rc.readyz()
    try:
        st = await rc.status()
    except ReconcilerAPIError as exc:
        if ready.ready:
            raise
        # Not ready (shutting down, say) and no status to show: the readiness answer is the news.
        print(f"not ready: {ready.reason or exc.code}")
        return EXIT_NOT_READY
    if args.json:
        emit_json(st)
    else:
        print(f"state       {st.state}")
        print(f"revision    {st.revision}   built {ago(st.built_at)}   digest {(st.digest or '-')[:12]}")
        print(f"reloading   {st.reload_mode}, {st.tracked_files} tracked files, reconciling={st.reconciling}")
        for c in st.conditions:
            print(f"condition   {c.type} ({c.reason}): {c.message}")
        if st.config_error:
            print(f"CONFIG ERROR (last good config still serving):\n  {st.config_error}")
        for w in st.warnings:
            print(f"warning     {w}")
        print()
        print(
            table(
                [
                    (s.name, s.state, s.entries, ago(s.last_ok_at), s.last_error, ago(s.next_attempt_at))
                    for s in st.sources
                ],
                ("SOURCE", "STATE", "ENTRIES", "LAST OK", "LAST ERROR", "NEXT ATTEMPT"),
            )
        )
        _print_causes(st.sources)
        if st.retiring:
            print()
            print(table([(r.revision, r.pins, r.operations) for r in st.retiring], ("RETIRING", "PINS", "OPS")))
    if not ready.ready:
        return EXIT_NOT_READY
    return EXIT_DEGRADED if args.strict and st.state != "ready" else EXIT_OK


async def _refresh(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    sources = [args.source] if args.source else None
    progress = not args.json and not args.no_wait and sys.stderr.isatty()
    if progress:
        print("reconciling", end="", file=sys.stderr, flush=True)
    failure: ReconcilerAPIError | None = None
    async with anyio.create_task_group() as tg:
        if progress:
            tg.start_soon(_progress_dots)
        try:
            out = await rc.refresh(sources, wait=not args.no_wait, timeout_s=args.timeout)
        except ReconcilerAPIError as exc:
            # Re-raised below, outside the task group: inside it would leave wrapped in an
            # exception group, which `run` does not map to an exit code.
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if progress:
        print(file=sys.stderr)
    if failure is not None:
        raise failure
    if args.json:
        emit_json(out)
    elif hasattr(out, "ticket"):
        print(f"accepted: cycle {out.ticket} will answer; current revision {out.revision}")
    else:
        change = "new revision" if out.changed else "no change" + await _already_current(rc, out)
        print(f"cycle {out.cycle}: {out.cycle_status} — revision {out.revision} ({change})")
        if out.error:
            print(f"error: {out.error}")
    if getattr(out, "cycle_status", None) == "failed":
        return EXIT_CYCLE
    return EXIT_OK


async def _already_current(rc: ReconcilerClient, out: wire.RefreshOut) -> str:
    """For an unchanged refresh: since when the revision is current and what built it. The
    watcher often publishes an edit before ``refresh`` asks, and "no change" alone reads as
    "my edit did not take"."""
    if out.revision is None:
        return ""
    current = next((g for g in (await rc.generations()).generations if g.revision == out.revision), None)
    if current is None:
        return ""
    why = ""
    if current.trigger is not None and current.trigger.reasons:
        why = ": " + ", ".join(current.trigger.reasons)
        keys = [k for k in current.trigger.keys if k != "all"]
        why += f" [{', '.join(keys)}]" if keys else ""
    return f"; already current since {ago(current.published_at)}{why}"


async def _sources(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    sources = await rc.sources()
    if args.json:
        emit_json(sources)
    else:
        print(
            table(
                [(s.name, s.state, s.entries, ago(s.last_ok_at), s.last_error, s.diagnostics) for s in sources],
                ("SOURCE", "STATE", "ENTRIES", "LAST OK", "LAST ERROR", "DIAGNOSTICS"),
            )
        )
        _print_causes(sources)
    return EXIT_OK


def _print_causes(sources: Sequence[wire.SourceOut]) -> None:
    """Under the table: each failed source's setting to change and its upstream's last stderr
    lines (redacted), which the LAST ERROR column has no room for."""
    for s in sources:
        cause = s.cause
        if cause is None or not (cause.setting or cause.stderr_tail):
            continue
        print()
        print(f"{s.name}: {cause.kind}" + (f" (setting: {cause.setting})" if cause.setting else ""))
        for line in cause.stderr_tail:
            print(f"  stderr | {line}")


async def _generations(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    gens = await rc.generations()
    if args.json:
        emit_json(gens)
    else:
        rows = [(g.revision, g.state, g.pins, g.entries, ago(g.built_at), g.digest[:12]) for g in gens.generations]
        print(table(rows, ("REVISION", "STATE", "PINS", "ENTRIES", "BUILT", "DIGEST")))
        if gens.pending_publication:
            print("a publication is deferred until a retiring generation drains")
    return EXIT_OK


async def _sessions(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    from mcp_reconciler.api.session_cli import sessions  # imports this module: imported late

    return await sessions(rc, args)


async def _holds(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    from mcp_reconciler.api.session_cli import holds

    return await holds(rc, args)


async def _approvals(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    from mcp_reconciler.api.approval_cli import approvals

    return await approvals(rc, args)


#: One operator command: talks to the gateway through ``rc``, prints, returns the exit code.
Operation = Callable[[ReconcilerClient, argparse.Namespace], Awaitable[int]]

_COMMANDS: tuple[tuple[str, str, Operation], ...] = (
    ("status", "provenance: revision, freshness, sources (exit 0 serving, 4 not ready, as /readyz)", _status),
    ("sources", "every source's live state", _sources),
    ("generations", "live generations (current and retiring)", _generations),
    ("sessions", "agent sessions: list, show, create, grant, revoke, delete", _sessions),
    ("holds", "revision holds: list, create, release", _holds),
    ("approvals", "calls waiting for an approval: list, show, approve, deny", _approvals),
    ("refresh", "reconcile now and print the resulting revision", _refresh),
)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the operator commands on the CLI's subparsers; each runs as ``run(args)`` with
    its coroutine in ``args.operation`` (``set_defaults``)."""
    for name, text, operation in _COMMANDS:
        parser = sub.add_parser(name, help=text)
        add_common(parser)
        parser.set_defaults(func=run, operation=operation)
        if operation in (_sessions, _holds):
            from mcp_reconciler.api.session_cli import add_hold_actions, add_session_actions

            (add_session_actions if operation is _sessions else add_hold_actions)(parser)
        if operation is _approvals:
            from mcp_reconciler.api.approval_cli import add_approval_actions

            add_approval_actions(parser)
        if operation is _status:
            parser.add_argument(
                "--strict", action="store_true", help="exit 6 when serving but degraded or with a config error"
            )
        if operation is _refresh:
            parser.add_argument("--source", help="only this source")
            parser.add_argument("--no-wait", action="store_true", help="return once the request is queued (202)")
            parser.add_argument(
                "--timeout", type=float, default=30.0, help="seconds to wait for the cycle (default 30)"
            )


async def _run(args: argparse.Namespace) -> int:
    command = getattr(args, "token_command", None)
    token: str | TokenProvider | None = CommandTokenProvider(command) if command else args.token
    async with ReconcilerClient(args.url, token) as rc:
        operation: Operation = args.operation
        return await operation(rc, args)


async def _progress_dots() -> None:
    if not sys.stderr.isatty():
        return
    while True:
        await anyio.sleep(1.0)
        print(".", end="", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run ``args.operation`` against the gateway; map failures to the documented exit codes."""
    try:
        return anyio.run(_run, args)
    except Unreachable as exc:
        print(f"mcp-reconciler: {exc.message} (is `mcp-reconciler serve` running? set --url)", file=sys.stderr)
        return EXIT_UNREACHABLE
    except RefreshTimeout as exc:
        print(f"mcp-reconciler: {exc.message}", file=sys.stderr)
        return EXIT_CYCLE
    except TokenProviderError as exc:
        print(f"mcp-reconciler: --token-command: {exc}", file=sys.stderr)
        return EXIT_API
    except ReconcilerAPIError as exc:
        hint = " (set --token or MCP_RECONCILER_TOKEN)" if exc.status == 401 else ""
        print(f"mcp-reconciler: {exc.status} {exc.code}: {exc.message}{hint}", file=sys.stderr)
        return EXIT_API
