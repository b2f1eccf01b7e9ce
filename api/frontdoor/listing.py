"""Listing: a session's view of one generation, as the four MCP list results, paged.

A list is the caller's view (its grants) of the generation chosen for the request. Every page
carries that generation's revision in ``_meta``, and the cursor names it too
(``<revision>:<offset>``): a cursor from another revision is refused (``invalid_cursor``), so
the pages of one listing always come from one catalog, however many publications happen while
the client pages.

Definitions are stored upstream-raw in the catalog (JSON); their parsed SDK models, renamed to
the exposed name and flagged when drifted (I10), are cached in a bounded LRU keyed by (kind,
exposed name, served bytes, drift flag) — the served bytes, not the digest, which is the
upstream's original definition and stays the same when trust or overrides change what is served
(I20) — shared with the per-call input-schema lookup."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

from mcp_reconciler.api.frontdoor.cache import LRU
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import DRIFT_META, REVISION_META, choose_generation
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind

PAGE_SIZE = 1000

#: Parsed definitions kept (a few generations of a full ``entries_per_generation`` catalog).
DEFINITION_CACHE_ENTRIES = 50_000

_MODELS: dict[EntryKind, tuple[type[Any], str]] = {
    EntryKind.TOOL: (types.Tool, "name"),
    EntryKind.RESOURCE: (types.Resource, "uri"),
    EntryKind.RESOURCE_TEMPLATE: (types.ResourceTemplate, "uriTemplate"),
    EntryKind.PROMPT: (types.Prompt, "name"),
}


def page(items: list[Any], cursor: str | None, revision: int) -> tuple[list[Any], str | None]:
    """The page of ``items`` that ``cursor`` names (the first page for ``None``) and the cursor
    of the next page (``None`` after the last). Raises ``MCPError`` ``invalid_cursor`` for a
    cursor of another revision or a malformed one."""
    start = 0
    if cursor:
        rev_s, _, off = cursor.partition(":")
        if rev_s != str(revision) or not off.isdigit():
            raise MCPError(-32602, "stale or invalid cursor; list again from the start", {"code": "invalid_cursor"})
        start = int(off)
    end = start + PAGE_SIZE
    return items[start:end], (f"{revision}:{end}" if end < len(items) else None)


class Listing:
    """The list handlers of the front door's MCP server, and the tool input-schema lookup the
    SDK uses to validate new-era call headers. Extra tools (the built-in control tools, when
    exposed) come first in the tool listing of every caller ``may_use_extra`` admits; before
    them ``search_tool`` (``find_tools``) for every session in search mode, whose tool list the
    authority's view limits to its pinned and found tools."""

    def __init__(
        self,
        catalog: CatalogAccess,
        authority: Authority,
        sessions: Sessions,
        *,
        extra_tools: Sequence[types.Tool] = (),
        may_use_extra: Callable[[Binding], bool] = lambda binding: True,
        search_tool: types.Tool | None = None,
        cache_entries: int = DEFINITION_CACHE_ENTRIES,
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions
        self._extra_tools = list(extra_tools)
        self._may_use_extra = may_use_extra
        self._search_tool = search_tool
        self.definitions: LRU[tuple[Any, ...], Any] = LRU(cache_entries)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """One page of the caller's tools (``tools/list``)."""
        items, nxt, rev = self._list(ctx, params, EntryKind.TOOL)
        return types.ListToolsResult(tools=items, next_cursor=nxt, _meta={REVISION_META: rev})

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """One page of the caller's resources (``resources/list``)."""
        items, nxt, rev = self._list(ctx, params, EntryKind.RESOURCE)
        return types.ListResourcesResult(resources=items, next_cursor=nxt, _meta={REVISION_META: rev})

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """One page of the caller's resource templates (``resources/templates/list``)."""
        items, nxt, rev = self._list(ctx, params, EntryKind.RESOURCE_TEMPLATE)
        return types.ListResourceTemplatesResult(resource_templates=items, next_cursor=nxt, _meta={REVISION_META: rev})

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        """One page of the caller's prompts (``prompts/list``)."""
        items, nxt, rev = self._list(ctx, params, EntryKind.PROMPT)
        return types.ListPromptsResult(prompts=items, next_cursor=nxt, _meta={REVISION_META: rev})

    def tool_input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The input schema of the current generation's tool ``name`` (``None``: unknown or no
        schema). O(1): the SDK calls it before every new-era call, before any session is known,
        so it must not run a whole listing."""
        live = self._catalog.current()
        entry = live.generation.tools.get(name) if live is not None else None
        if entry is None:
            return None
        key = ("schema", entry.exposed_name, entry.digest)
        cached = self.definitions.get(key)
        if cached is None:
            cached = json.loads(entry.raw).get("inputSchema") or {}
            self.definitions.put(key, cached)
        return cached or None

    def param_header_schema(self, name: str) -> Mapping[str, Any] | None:
        """The input schema of tool ``name`` when it annotates arguments with ``x-mcp-header``
        (validly), else ``None``: a call of a tool without annotations has no ``Mcp-Param-*``
        header to check (the SDK's check passes it whatever the headers), so a 2026-era call
        skips the schema walk. O(1) and cached per definition, like :meth:`tool_input_schema`."""
        live = self._catalog.current()
        entry = live.generation.tools.get(name) if live is not None else None
        if entry is None:
            return None
        key = ("param-headers", entry.exposed_name, entry.digest)  # as tool_input_schema's
        cached = self.definitions.get(key)
        if cached is None:
            schema = self.tool_input_schema(name)
            valid = schema is not None and find_invalid_x_mcp_header(schema) is None
            cached = (schema,) if valid and x_mcp_header_map(schema) else ()
            self.definitions.put(key, cached)
        return cached[0] if cached else None

    def definition(self, entry: CatalogEntry, drifted: bool = False) -> Any:
        """The SDK model of ``entry`` as the caller sees it: its exposed name, and the drift flag
        in ``_meta`` when its definition changed since the caller's grant (I10). Cached."""
        # Keyed by the served bytes, not the digest: the digest is the upstream's original
        # definition (I10), the same across a change of trust or overrides (I20).
        key = (entry.kind.value, entry.exposed_name, entry.raw, drifted)
        cached = self.definitions.get(key)
        if cached is None:
            model, name_field = _MODELS[entry.kind]
            data = json.loads(entry.raw)
            data[name_field] = entry.exposed_name
            if drifted:
                data["_meta"] = {**(data.get("_meta") or {}), DRIFT_META: True}
            cached = model.model_validate(data)
            self.definitions.put(key, cached)
        return cached

    def _list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None, kind: EntryKind
    ) -> tuple[list[Any], str | None, int]:
        binding = self._sessions.binding(ctx)
        live = choose_generation(self._catalog, ctx, binding.session, params.meta if params is not None else None)
        view = self._authority.view(binding.session, live.generation)
        items = [self.definition(e, f"{kind.value}:{e.exposed_name}" in view.drifted) for e in view.entries[kind]]
        if kind is EntryKind.TOOL:
            # Built-ins first: the search tool (search mode, ADR 0029), then the control tools.
            extra: list[Any] = []
            if self._search_tool is not None and self._authority.searching(binding.session):
                extra.append(self._search_tool)
            if self._extra_tools and self._may_use_extra(binding):
                extra.extend(self._extra_tools)
            items = extra + items
        items_page, nxt = page(items, params.cursor if params is not None else None, live.revision)
        return items_page, nxt, live.revision
