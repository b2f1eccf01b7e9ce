"""``find_tools``: the search tool of sessions in search mode (issue 31, ADR 0029).

A session in search mode (``reconciler/discovery.py``) lists ``find_tools``, the operator's
always-visible tools and what it has found. ``find_tools(query, limit)`` runs on the generation
the request runs on (``choose_generation``: a pinned session searches its pinned revision's
index), asks the authority (:meth:`Authority.find`, one path for every check: grants, view,
curation, quarantine) for the best tools the session may call, and answers them — name, title,
one-line description, revision — as JSON text and structured content. The found tools join
the session's list at once: every binding of the session is re-evaluated and told
``tools/list_changed`` in its era by the notifier, before the answer goes out. Names the bound
pushed out are announced in the answer (``dropped``).

To a session not in search mode ``find_tools`` does not exist (not listed; a call is the
catalog's, and answers "unknown tool" unless a source serves that name)."""

from __future__ import annotations

import json
import time
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.notify import Notifier
from mcp_reconciler.api.frontdoor.revisions import REVISION_META, choose_generation
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.discovery import FIND_TOOLS, LIMIT_DEFAULT
from mcp_reconciler.reconciler.search_index import LIMIT_MAX, QUERY_CHARS_MAX

FIND_TOOL = types.Tool(
    name=FIND_TOOLS,
    title="Find tools",
    description=(
        "Search this gateway's tools by what you want to do (natural language or keywords). "
        "The tools found become available to call by name; call find_tools again for others."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what the tool should do, e.g. 'send an email'"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": LIMIT_MAX,
                "description": f"how many tools to return (default {LIMIT_DEFAULT})",
            },
        },
        "required": ["query"],
    },
)

_searches = telemetry.meter.create_counter("frontdoor.find_tools", description="find_tools calls answered")
_seconds = telemetry.meter.create_histogram(
    "frontdoor.find_tools.duration", unit="s", description="find_tools search time (index build included)"
)


def _invalid(message: str) -> MCPError:
    return MCPError(-32602, message, {"code": "invalid_params"})


class FindTools:
    """Answers ``find_tools`` for bindings in search mode (module docstring)."""

    tool = FIND_TOOL
    name = FIND_TOOLS

    def __init__(self, catalog: CatalogAccess, authority: Authority, sessions: Sessions, notifier: Notifier) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions
        self._notifier = notifier

    def shown(self, binding: Binding) -> bool:
        """Whether ``binding`` lists (and may call) ``find_tools``: its session is in search mode."""
        return self._authority.searching(binding.session)

    async def call(
        self, ctx: ServerRequestContext[Any], binding: Binding, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        """Search, make the hits visible, tell the session's bindings, answer."""
        args = arguments or {}
        query = args.get("query")
        limit = args.get("limit", LIMIT_DEFAULT)
        if not isinstance(query, str) or not query.strip():
            raise _invalid("find_tools needs a non-empty 'query' string")
        if len(query) > QUERY_CHARS_MAX:
            raise _invalid(f"'query' may be at most {QUERY_CHARS_MAX} characters")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
            raise _invalid(f"'limit' must be an integer from 1 to {LIMIT_MAX}")
        live = choose_generation(self._catalog, ctx, binding.session, None)
        with telemetry.tracer.start_as_current_span("frontdoor.find_tools") as span:
            started = time.perf_counter()
            found = self._authority.find(binding.session, live.generation, query, limit)
            _seconds.record(time.perf_counter() - started)
            span.set_attribute("mcp_reconciler.revision", found.revision)
            span.set_attribute("mcp_reconciler.find_tools.hits", len(found.hits))
        _searches.add(1)
        if found.added or found.dropped:
            await self._notifier.tell_session(binding.session, live.generation)
        body = {
            "revision": found.revision,
            "tools": [
                {"name": h.name, "title": h.title, "description": h.description, "revision": found.revision}
                for h in found.hits
            ],
            "dropped": list(found.dropped),
        }
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(body))],
            structured_content=body,
            _meta={REVISION_META: found.revision},
        )
