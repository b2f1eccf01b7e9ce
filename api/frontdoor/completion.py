"""Completion: ``completion/complete`` routed to the source that owns the prompt or template.

The reference names an exposed prompt (``ref/prompt``) or resource template (``ref/resource``,
by its URI template). It goes through authority like any
other operation (I9): a name the session was not granted answers as unknown, a granted one that
left the catalog as "currently unavailable". It runs on the revision the request chose, pinned
for its duration, and the upstream sees its own name or URI template.

``completions`` is always advertised: capabilities are fixed at a session's start while sources
come and go, so a source that does not offer completions is answered here, with an empty
completion (a valid "no suggestions"), rather than advertised conditionally."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor.forwarding import Forwarder
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.upstream import UpstreamConnection

EMPTY = types.Completion(values=[], total=0, has_more=False)


def _unsupported(conn: UpstreamConnection) -> types.CompleteResult | None:
    """An empty completion for a source that does not offer completions."""
    caps = conn.capabilities
    if caps is not None and caps.completions is None:
        return types.CompleteResult(completion=EMPTY)
    return None


class Completer:
    """The ``completion/complete`` handler (contract in the module docstring)."""

    def __init__(self, forwarder: Forwarder) -> None:
        self._forwarder = forwarder

    async def complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """Forward the completion to the owning source under its upstream name."""
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            kind, name = EntryKind.PROMPT, ref.name
        else:
            kind, name = EntryKind.RESOURCE_TEMPLATE, ref.uri

        def build(entry: CatalogEntry, meta: Any, extra: dict[str, Any]) -> types.CompleteRequest:
            upstream_ref: types.PromptReference | types.ResourceTemplateReference
            if isinstance(ref, types.PromptReference):
                upstream_ref = types.PromptReference(name=entry.upstream_name, title=ref.title)
            else:
                upstream_ref = types.ResourceTemplateReference(uri=entry.upstream_name)
            return types.CompleteRequest(
                params=types.CompleteRequestParams(
                    ref=upstream_ref, argument=params.argument, context=params.context, _meta=meta
                )
            )

        return await self._forwarder.forward(  # type: ignore[no-any-return]
            ctx, kind, name, params, build, types.CompleteResult, op="complete", shortcut=_unsupported
        )
