"""The MCP front door: one downstream MCP server over the engine (I4, I9, I10, I12).

Every operation: find the caller's session → choose its generation (a revision asked for in
``_meta``, the ``MCP-Reconciler-Revision`` header, the session's pin, or the current one) →
look the exposed name up in that generation's immutable routing table → check the grant →
pin → forward on the source's live connection → release. Results carry
``_meta["io.mcp-reconciler/revision"]``.

Sessions (ADR 0006): a 2025-11-25 client's connection is one gateway session; a 2026-07-28
(sessionless) client is identified by its bearer token, or shares one anonymous session per
front door when it sends none. When a session's view changes it gets the matching
``list_changed`` — pushed on its connection (legacy) or on its own ``subscriptions/listen`` bus
(new era) — coalesced per session, and held until a legacy HTTP client's GET stream is open.

One concept per module; :class:`FrontDoor` (``door``) assembles them:

- ``catalog``: the only window onto the engine (live generations, bounds, readiness).
- ``sessions``: bindings of downstream identities to gateway sessions, both eras.
- ``revisions``: which live generation serves a request; the revision ``_meta`` keys and header.
- ``notify``: the notifier loop, legacy pushes behind the GET-stream gate, new-era listen buses.
- ``listing``: the four list results, paging, and the bounded definition cache (``cache``).
- ``forwarding``: call/read/get forwarded upstream with pins, progress relay and error mapping.
- ``subscriptions``: resource subscriptions per session over shared upstream subscriptions
  (``reconciler/subscriptions.py``); ``updates``: delivering ``resources/updated`` to them.
- ``tasks``, ``task_records``: task-augmented calls and ``tasks/*`` (2025-11-25), gateway task ids.
- ``control_tools``: the optional built-in ``gateway_status`` / ``gateway_refresh`` tools.

SDK privates are used only through ``mcp_reconciler.api.sdk_compat``."""

from mcp_reconciler.api.frontdoor.door import FrontDoor, GatewayServer
from mcp_reconciler.api.frontdoor.forwarding import PROGRESS_BACKLOG
from mcp_reconciler.api.frontdoor.listing import PAGE_SIZE
from mcp_reconciler.api.frontdoor.notify import PushGate
from mcp_reconciler.api.frontdoor.revisions import DRIFT_META, REVISION_HEADER, REVISION_META
from mcp_reconciler.api.frontdoor.sessions import Binding

__all__ = [
    "DRIFT_META",
    "PAGE_SIZE",
    "PROGRESS_BACKLOG",
    "REVISION_HEADER",
    "REVISION_META",
    "Binding",
    "FrontDoor",
    "GatewayServer",
    "PushGate",
]
