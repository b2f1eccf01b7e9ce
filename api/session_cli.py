"""Operator CLI for sessions and holds (issue 28): ``sessions [list|show|create|grant|revoke|delete]``
and ``holds [list|create|release]``, so an operator manages agent sessions without curl.

``sessions create`` prints the new session's token once (it is never shown again: only its
hash is kept); ``--json`` prints the whole answer, token included, for scripts. Every action
talks to ``/v1`` through the SDK, like ``status`` and ``sources``; exit codes are the operator
CLI's (``api/operator_cli.py``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from mcp_reconciler.api.operator_cli import EXIT_OK, ago, emit_json, table
from mcp_reconciler.sdk import wire
from mcp_reconciler.sdk.client import ReconcilerClient

POLICIES = ("current", "none", "explicit", "follow")


def add_leaf_common(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--token``, ``--token-command`` and ``--json`` on an action, without defaults of
    its own (argparse would let them overwrite what was given before the action's name)."""
    keep = argparse.SUPPRESS
    parser.add_argument("--url", default=keep, help="gateway base URL")
    parser.add_argument("--token", default=keep, help="bearer token (env MCP_RECONCILER_TOKEN)")
    parser.add_argument("--token-command", default=keep, help="a command whose output is the bearer token")
    parser.add_argument("--json", action="store_true", default=keep, help="machine-readable output")


def add_session_actions(sessions: argparse.ArgumentParser) -> None:
    """The actions under ``sessions`` (no action: ``list``)."""
    actions = sessions.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="every session visible to the caller (the default)")
    show = actions.add_parser("show", help="one session: policy, granted, drifted and quarantined names")
    show.add_argument("session_id", metavar="SESSION")
    create = actions.add_parser("create", help="create a session; prints its token once")
    create.add_argument("--owner", help="operators only: the owner the session is for")
    create.add_argument("--policy", choices=POLICIES, default="current", help="how grants start (default current)")
    create.add_argument("--name", action="append", default=[], help="explicit: a name to grant (repeatable)")
    create.add_argument("--source", action="append", default=[], help="follow: a source to follow (repeatable)")
    create.add_argument("--revision", type=int, help="pin the session to this live revision")
    create.add_argument("--control-tools", action="store_true", help="operators only: may call the control tools")
    create.add_argument(
        "--discovery", choices=("all", "search"), help="search: list find_tools and what it finds (ADR 0029)"
    )
    grant = actions.add_parser("grant", help="grant names from the current revision (all or nothing)")
    grant.add_argument("session_id", metavar="SESSION")
    grant.add_argument("names", nargs="+", metavar="NAME")
    revoke = actions.add_parser("revoke", help="take granted names away (all or nothing)")
    revoke.add_argument("session_id", metavar="SESSION")
    revoke.add_argument("names", nargs="+", metavar="NAME")
    delete = actions.add_parser("delete", help="end a session: its token stops working at once")
    delete.add_argument("session_id", metavar="SESSION")
    for parser in actions.choices.values():
        add_leaf_common(parser)


def add_hold_actions(holds: argparse.ArgumentParser) -> None:
    """The actions under ``holds`` (no action: ``list``)."""
    actions = holds.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="every hold visible to the caller, by revision (the default)")
    create = actions.add_parser("create", help="keep a live revision open for a run")
    create.add_argument("revision", type=int, metavar="REVISION")
    create.add_argument("--ttl", type=float, default=600.0, help="seconds (default 600, at most 3600)")
    release = actions.add_parser("release", help="release a hold")
    release.add_argument("hold_id", metavar="HOLD")
    for parser in actions.choices.values():
        add_leaf_common(parser)


def _session_rows(sessions: list[wire.SessionOut]) -> str:
    rows: list[tuple[Any, ...]] = [
        (s.id, s.owner, s.grant_policy, s.granted, s.pinned_revision, ago(s.created_at), len(s.drifted))
        for s in sessions
    ]
    return table(rows, ("SESSION", "OWNER", "POLICY", "GRANTED", "PINNED", "CREATED", "DRIFTED"))


def _show(s: wire.SessionOut) -> None:
    print(f"session     {s.id}")
    print(f"owner       {s.owner}{'   (declared in the config)' if s.declared else ''}")
    print(f"policy      {s.grant_policy}" + (f"   sources: {', '.join(s.sources)}" if s.sources else ""))
    print(f"pinned      {s.pinned_revision if s.pinned_revision is not None else '-'}")
    print(f"created     {ago(s.created_at)}")
    print(f"granted     {s.granted}: {', '.join(s.names) or '-'}")
    if s.discovery == "search":
        print(f"discovery   search; found: {', '.join(s.found) or '-'}")
    if s.drifted:
        print(f"drifted     {', '.join(s.drifted)}")
    if s.quarantined:
        print(f"quarantined {', '.join(s.quarantined)}")


async def sessions(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    """``sessions [ACTION]``: list (default), show, create, grant, revoke, delete."""
    action = getattr(args, "action", None) or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "list":
        found = await rc.sessions()
        emit_json(found) if as_json else print(_session_rows(found))
    elif action == "show":
        one = await rc.session(args.session_id)
        emit_json(one) if as_json else _show(one)
    elif action == "create":
        created = await rc.create_session(
            owner=args.owner,
            grant_policy=args.policy,
            names=args.name,
            sources=args.source,
            revision=args.revision,
            control_tools=args.control_tools,
            discovery=args.discovery,
        )
        if as_json:
            emit_json(created)
        else:
            print(f"created session {created.id} for {created.owner} ({created.grant_policy}, {created.granted} names)")
            print(f"token: {created.token}")
            print("the token is shown once: store it now (agents send it as 'Authorization: Bearer <token>')")
    elif action == "grant":
        granted = await rc.grant(args.session_id, args.names)
        emit_json(granted) if as_json else print(
            f"granted at revision {granted.revision}: {', '.join(granted.added) or 'nothing new'}"
        )
    elif action == "revoke":
        revoked = await rc.revoke(args.session_id, args.names)
        emit_json(revoked) if as_json else print(f"revoked: {', '.join(revoked.removed)}")
    else:  # delete
        await rc.delete_session(args.session_id)
        emit_json({"deleted": args.session_id}) if as_json else print(f"deleted session {args.session_id}")
    return EXIT_OK


async def holds(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    """``holds [ACTION]``: list (default), create, release."""
    action = getattr(args, "action", None) or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "list":
        gens = await rc.generations()
        found = [(g.revision, g.state, h) for g in gens.generations for h in g.holds]
        if as_json:
            emit_json([{"revision": r, "state": st, **h.model_dump(mode="json")} for r, st, h in found])
        else:
            rows = [(h.id, r, st, h.owner, _until(h.expires_at)) for r, st, h in found]
            print(table(rows, ("HOLD", "REVISION", "STATE", "OWNER", "EXPIRES")))
    elif action == "create":
        hold = await rc.hold(args.revision, ttl_s=args.ttl)
        emit_json(hold) if as_json else print(
            f"hold {hold.id} keeps revision {hold.revision} live (expires {_until(hold.expires_at)})"
        )
    else:  # release
        await rc.release_hold(args.hold_id)
        emit_json({"released": args.hold_id}) if as_json else print(f"released hold {args.hold_id}")
    return EXIT_OK


def _until(ts: float) -> str:
    left = ts - time.time()
    return f"in {left:.0f}s" if left >= 0 else "expired"
