"""Client capabilities: what a server→client request needs from the client it goes to.

The gateway declares every client capability upstream (so servers enable their features), but
each downstream client declares its own; before relaying a request the relay asks
:func:`missing_capability`, and a client that lacks it costs the upstream a clear error instead
of a request it cannot answer."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext


def missing_capability(ctx: ServerRequestContext[Any], request: types.InputRequest) -> str | None:
    """The client capability ``request`` needs that the downstream did not declare, if any."""
    return missing_from(ctx.session.client_capabilities, request)


def missing_from(declared: types.ClientCapabilities | None, request: types.InputRequest) -> str | None:
    """The capability ``request`` needs that ``declared`` lacks, if any."""
    caps = declared or types.ClientCapabilities()
    if isinstance(request, types.CreateMessageRequest):
        if caps.sampling is None:
            return "sampling"
        if (request.params.tools or request.params.tool_choice) and caps.sampling.tools is None:
            return "sampling.tools"
        return None
    if isinstance(request, types.ElicitRequest):
        elicitation = caps.elicitation
        if elicitation is None:
            return "elicitation"
        if isinstance(request.params, types.ElicitRequestURLParams):
            return "elicitation.url" if elicitation.url is None else None
        # An empty elicitation capability means form mode (2025-06-18 clients declared just {}).
        return "elicitation.form" if elicitation.form is None and elicitation.url is not None else None
    return "roots" if caps.roots is None else None
