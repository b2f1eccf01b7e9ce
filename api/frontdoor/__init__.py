"""The MCP front door: one downstream MCP server over the engine (I4, I9, I10, I12).

Every operation: find the caller's session → choose its generation (a revision asked for in
``_meta``, the ``MCP-Reconciler-Revision`` header, the session's pin, or the current one) →
look the exposed name up in that generation's immutable routing table → check the grant →
pin → forward on the source's live connection → release. Results carry
``_meta["io.mcp-reconciler/revision"]``.

Sessions (ADR 0006, ADR 0013): every HTTP request carries the identity the HTTP layer accepted
(``api/mcp_auth.py``: a session token, or anonymous when the config opens it); stdio's caller is
the process owner. A 2025-11-25 client's connection is bound to one gateway session (its token's,
or one created for it) and stays with the principal that opened it; a 2026-07-28 (sessionless)
client is its token's session (anonymous callers share one). When a session's view changes it
gets the matching
``list_changed`` — pushed on its connection (legacy) or on its own ``subscriptions/listen`` bus
(new era) — coalesced per session, and held until a legacy HTTP client's GET stream is open.

One concept per module; :class:`FrontDoor` (``door``) assembles them:

- ``catalog``: the only window onto the engine (live generations, bounds, readiness).
- ``sessions``: bindings of downstream identities to gateway sessions, both eras.
- ``revisions``: which live generation serves a request; the revision ``_meta`` keys and header.
- ``notify``: the notifier loop, legacy pushes behind the GET-stream gate, new-era listen buses.
- ``listing``: the four list results, paging, and the bounded definition cache (``cache``).
- ``pages``: list pages served from cached wire dicts; the heap frozen after publications.
- ``forwarding``: call/read/get forwarded upstream with pins, progress relay and error mapping.
- ``relay``: what upstreams start while serving a call (sampling, elicitation, roots, log
  records) attributed to that call and relayed to its session only (I17), after a client
  capability check (``capabilities``); ``exchanges`` and ``rounds``: the
  multi-round ``InputRequiredResult`` exchanges of 2026-era clients; ``logs``: per-session log
  levels, upstream levels and bounded log delivery; ``completion``: ``completion/complete``
  routed to the owning source.
- ``subscriptions``: resource subscriptions per session over shared upstream subscriptions
  (``reconciler/subscriptions.py``); ``updates``: delivering ``resources/updated`` to them.
- ``tasks``, ``task_records``: task-augmented calls and ``tasks/*`` (2025-11-25), gateway task ids.
- ``control_tools``: the optional built-in ``gateway_status`` / ``gateway_refresh`` tools.

- ``link``: the connection and back-channel behind a request, named by the data plane's context
  (no SDK privates anywhere in the front door)."""

from mcp_reconciler.api.frontdoor.door import FrontDoor, GatewayServer
from mcp_reconciler.api.frontdoor.listing import PAGE_SIZE
from mcp_reconciler.api.frontdoor.notify import PushGate
from mcp_reconciler.api.frontdoor.progress import PROGRESS_BACKLOG
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
