"""Idle expiry of control-API sessions (ADR 0032): a session nobody uses goes away by itself.

A session created over the control API that is unused for ``gateway.limits.api_session_idle_s``
is removed, exactly as ``DELETE /v1/sessions/{id}`` would (its token stops working at once). A
session *in use* never expires: a request of it in flight (``Session.in_flight``, counted by the
front door), an open MCP connection bound to it, a live revision hold of its owner, or activity
within the idle time (:meth:`~mcp_reconciler.reconciler.authority.Authority.expires_at`).
Sessions declared in the config live as long as their declaration, transport-owned ones as long
as their connection, and shared (cluster) ones are not expired here: another replica may be
using them.

:func:`run_idle_expiry` runs in the engine's task group: it sleeps until the earliest expiry any
session could reach (at most one idle period), removes what expired, and repeats. A session that
stops being in use is therefore removed at most two idle periods after its last use."""

from __future__ import annotations

import time

import anyio

from mcp_reconciler.reconciler.authority import Authority

#: Never wake more often than this, whatever the idle time (a tiny idle time in a test).
_MIN_WAIT_S = 0.05


async def run_idle_expiry(
    authority: Authority, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Expire idle sessions until cancelled (module docstring). Does nothing while idle expiry is
    off (``api_session_idle_s`` 0)."""
    task_status.started()
    idle_s = authority.bounds.api_session_idle_s
    if idle_s <= 0:
        return
    while True:
        now = time.time()
        authority.expire_idle(now)
        nxt = authority.next_expiry()
        wait = idle_s if nxt is None else min(idle_s, nxt - time.time())
        await anyio.sleep(max(_MIN_WAIT_S, wait))  # a timer, not a wait for another task
