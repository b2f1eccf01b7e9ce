"""``mcp-reconciler audit tail``: read the audit trail (``telemetry.audit``, ADR 0031).

    mcp-reconciler audit tail [--file PATH | --config FILE] [-n N] [--follow] [--session S] [--tool T] [--json]

The file is ``--file``, else the ``telemetry.audit.path`` of ``--config`` (or
``$MCP_RECONCILER_CONFIG``). Prints the last ``-n`` records (default 20) that match the filters,
one line each (``--json``: the records as written); ``--follow`` then keeps printing new ones,
across rotations (a new file at the path is reopened from its start), until interrupted.
``--tool`` matches the served name (a tool, a prompt, a URI)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

#: How often ``--follow`` looks for new lines (a CLI poll, like ``tail -f``).
FOLLOW_POLL_S = 0.25


def add_parser(sub: Any) -> None:
    """Register ``audit tail`` on the CLI's subparsers."""
    audit = sub.add_parser("audit", help="read the audit trail (telemetry.audit)")
    commands = audit.add_subparsers(dest="audit_command", required=True)
    tail = commands.add_parser("tail", help="print the last records, optionally following new ones")
    tail.add_argument("--file", help="the audit file (default: telemetry.audit.path of --config)")
    tail.add_argument("--config", help="gateway YAML (default: $MCP_RECONCILER_CONFIG)")
    tail.add_argument("-n", type=int, default=20, help="records to print first (default 20)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--session", help="only records of this session id")
    tail.add_argument("--tool", help="only records of this served name")
    tail.add_argument("--json", action="store_true", help="print the records as written (JSON lines)")
    tail.set_defaults(func=run_tail)


def _path(args: argparse.Namespace) -> Path | str:
    if args.file:
        return Path(args.file)
    config = args.config or os.environ.get("MCP_RECONCILER_CONFIG")
    if not config:
        return "give --file, or --config (or MCP_RECONCILER_CONFIG) with a telemetry.audit section"
    from mcp_reconciler.reconciler.config import load_config

    loaded = load_config(config)
    trail = loaded.telemetry.audit
    if trail is None:
        return f"{config} has no telemetry.audit section"
    if trail.path == "stderr":
        return f"{config} writes the audit trail to stderr, not to a file"
    path = Path(trail.path)
    return path if path.is_absolute() else loaded.path.parent / path


def _matches(record: dict[str, Any], args: argparse.Namespace) -> bool:
    if args.session and record.get("session") != args.session:
        return False
    return not (args.tool and record.get("name") != args.tool)


def format_record(record: dict[str, Any]) -> str:
    """One human line: time, kind, outcome, who, what, where, how long."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(float(record.get("ts", 0))))
    parts = [when + "Z", str(record.get("kind", "?")), str(record.get("outcome", ""))]
    if record.get("error"):
        parts[-1] += f"({record['error']})"
    for key in ("principal", "session", "name", "source", "revision", "duration_ms", "replica", "reason"):
        if record.get(key) is not None:
            parts.append(f"{key}={record[key]}")
    return " ".join(parts)


def _records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn last line while the writer appends
        if isinstance(record, dict):
            yield record


def run_tail(args: argparse.Namespace) -> int:
    """``audit tail``: exit 0, or 1 when there is no file to read."""
    path = _path(args)
    if isinstance(path, str):
        print(f"mcp-reconciler audit tail: {path}", file=sys.stderr)
        return 1
    show = (lambda r: json.dumps(r, separators=(",", ":"))) if args.json else format_record
    try:
        f: IO[str] = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - followed below
    except OSError as exc:
        print(f"mcp-reconciler audit tail: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 1
    with f:
        last = deque((r for r in _records(f) if _matches(r, args)), maxlen=max(args.n, 0))
        for record in last:
            print(show(record), flush=True)
        if not args.follow:
            return 0
        return _follow(f, path, args, show)


def _follow(f: IO[str], path: Path, args: argparse.Namespace, show: Any) -> int:
    inode = os.fstat(f.fileno()).st_ino
    pending = ""
    try:
        while True:
            chunk = f.read()
            if chunk:
                pending += chunk
                *complete, pending = pending.split("\n")
                for record in _records(complete):
                    if _matches(record, args):
                        print(show(record), flush=True)
                continue
            try:
                rotated = os.stat(path).st_ino != inode
            except FileNotFoundError:
                rotated = False
            if rotated:  # the writer rotated: read the new file from its start
                f.close()
                f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
                inode, pending = os.fstat(f.fileno()).st_ino, ""
                continue
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0
    finally:
        f.close()
