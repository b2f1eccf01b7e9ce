"""Operator CLI for approvals (ADR 0034): ``approvals [list|show|approve|deny]``.

``list`` shows the requests the caller may answer (operators: all; owners: their sessions'),
pending first; ``approve`` runs the parked call on exactly the definition the request names (I22),
optionally covering ``--uses`` calls or a ``--window`` for the same principal, tool, arguments and
definition; ``deny`` fails it with ``approval_denied``. Exit codes are the operator CLI's
(``api/operator_cli.py``): answering a request that is no longer pending is 1 (409)."""

from __future__ import annotations

import argparse
import time

from mcp_reconciler.api.operator_cli import EXIT_OK, ago, emit_json, table
from mcp_reconciler.api.session_cli import add_leaf_common
from mcp_reconciler.sdk import wire
from mcp_reconciler.sdk.client import ReconcilerClient


def add_approval_actions(approvals: argparse.ArgumentParser) -> None:
    """The actions under ``approvals`` (no action: ``list``)."""
    actions = approvals.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="approval requests the caller may answer, pending first (the default)")
    listing.add_argument("--pending", action="store_true", help="only the requests still waiting")
    show = actions.add_parser("show", help="one request: principal, session, tool, digests, revision, expiry")
    show.add_argument("approval_id", metavar="APPROVAL")
    approve = actions.add_parser("approve", help="let the parked call run on the definition it names")
    approve.add_argument("approval_id", metavar="APPROVAL")
    approve.add_argument("--uses", type=int, default=1, help="also cover later identical calls: N calls in all")
    approve.add_argument("--window", type=float, default=0.0, help="also cover identical calls for this many seconds")
    deny = actions.add_parser("deny", help="fail the parked call with approval_denied")
    deny.add_argument("approval_id", metavar="APPROVAL")
    for parser in actions.choices.values():
        add_leaf_common(parser)


def _rows(found: list[wire.ApprovalOut]) -> str:
    rows = [
        (a.id, a.state, a.tool, a.principal, a.session, a.revision, a.arguments_digest[:12], _expiry(a)) for a in found
    ]
    return table(rows, ("APPROVAL", "STATE", "TOOL", "PRINCIPAL", "SESSION", "REVISION", "ARGS", "EXPIRES"))


def _expiry(a: wire.ApprovalOut) -> str:
    if a.state != "pending":
        return f"{a.state} by {a.decided_by}" if a.decided_by else a.state
    left = a.expires_at - time.time()
    return f"in {left:.0f}s" if left >= 0 else "expired"


def _show(a: wire.ApprovalOut) -> None:
    print(f"approval    {a.id}   ({a.state}{', by ' + a.decided_by if a.decided_by else ''})")
    print(f"tool        {a.tool}   called by {a.principal} in session {a.session}")
    print(f"arguments   sha256 {a.arguments_digest}")
    print(f"definition  sha256 {a.definition_digest} at revision {a.revision}")
    print(f"requested   {ago(a.requested_at)}; expires {_expiry(a)}")


async def approvals(rc: ReconcilerClient, args: argparse.Namespace) -> int:
    """``approvals [ACTION]``: list (default), show, approve, deny."""
    action = getattr(args, "action", None) or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "list":
        found = await rc.approvals(pending=bool(getattr(args, "pending", False)))
        emit_json(found) if as_json else print(_rows(found))
        return EXIT_OK
    if action == "show":
        one = await rc.approval(args.approval_id)
    elif action == "approve":
        one = await rc.approve(args.approval_id, uses=args.uses, window_s=args.window)
    else:  # deny
        one = await rc.deny(args.approval_id)
    emit_json(one) if as_json else _show(one)
    return EXIT_OK
