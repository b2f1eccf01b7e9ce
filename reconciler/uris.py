"""Resource URI namespacing: a per-source prefix that keeps two sources' URIs apart.

Tool and prompt names get a per-source name prefix; resource URIs cannot (a URI is not a name,
and two servers may both serve ``note://x``). A source configured with ``uri_prefix: P`` exposes
each of its resources ``U`` as ``P + U`` and each of its resource templates ``T`` as ``P + T``;
what a client sends back under ``P + …`` reaches the upstream without ``P``. The rewrite is a
pure prefix, so it is reversible by construction and costs nothing for a source without one.

Where it applies, both ways (the contract, tested end to end):

- listings: ``resources/list`` (``uri``), ``resources/templates/list`` (``uriTemplate``); the
  catalog's routing tables hold the exposed URIs, so collisions are decided on them;
- requests: ``resources/read`` (a listed URI or one matching an exposed template),
  ``resources/subscribe`` / ``unsubscribe`` and ``subscriptions/listen`` resource subscriptions;
- results and events: resource links and embedded resources in ``tools/call`` and
  ``prompts/get`` results (task results included), the ``contents[].uri`` of a read, and
  ``notifications/resources/updated``.

Not rewritten: URIs inside free text or tool arguments (the gateway cannot know which strings
are URIs), and ``_meta``.

A good prefix is ``<tag>+``: it turns the scheme ``s`` into ``<tag>+s``, still a valid URI
scheme (RFC 3986 allows ``+``), so ``note://x`` becomes ``notes+note://x`` and
``file:///a`` becomes ``notes+file:///a``. :func:`suggested_prefix` derives one from a source
name for the collision diagnostic's advice."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import mcp_types as types

from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind

#: What a ``uri_prefix`` may contain: URI characters, no template braces, no whitespace.
URI_PREFIX = re.compile(r"[A-Za-z0-9+.\-_:/~]{1,64}")

_SCHEME_BAD = re.compile(r"[^a-z0-9+.-]")

R = TypeVar("R")


def suggested_prefix(source: str) -> str:
    """A ``<tag>+`` prefix for ``source`` that keeps URIs valid: the source name lowercased, with
    characters a URI scheme cannot hold replaced by ``-`` and a leading letter guaranteed."""
    tag = _SCHEME_BAD.sub("-", source.lower()) or "src"
    if not tag[0].isalpha():
        tag = "s" + tag
    return tag + "+"


def expose(prefix: str | None, uri: str) -> str:
    """The exposed form of an upstream URI (or URI template) of a source with ``prefix``."""
    return prefix + uri if prefix else uri


def prefix_of(entry: CatalogEntry) -> str:
    """The URI prefix a resource or template entry was exposed with (``""`` for none): exposed
    URIs are the prefix followed by the upstream URI, so the prefix is what precedes it."""
    if entry.kind not in (EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE):
        raise ValueError(f"{entry.kind} entries are not URIs")
    return entry.exposed_name[: len(entry.exposed_name) - len(entry.upstream_name)]


def upstream_uri(entry: CatalogEntry, exposed_uri: str) -> str:
    """The URI to send upstream for ``exposed_uri``, which resolved to ``entry`` (a listed
    resource, or a template it matched: it then starts with the template's literal prefix)."""
    if entry.kind is EntryKind.RESOURCE and exposed_uri == entry.exposed_name:
        return entry.upstream_name
    prefix = prefix_of(entry)
    if not exposed_uri.startswith(prefix):
        raise ValueError("the URI does not carry its source's prefix")
    return exposed_uri[len(prefix) :]


def rewrite_result(result: R, prefix: str | None) -> R:
    """``result`` with every URI it carries in exposed form (see the module docstring): resource
    links and embedded resources of a ``CallToolResult`` or ``GetPromptResult``, the contents of
    a ``ReadResourceResult``. The same object when ``prefix`` is empty (nothing to rewrite)."""
    if not prefix:
        return result
    if isinstance(result, types.CallToolResult):
        return result.model_copy(update={"content": [_block(b, prefix) for b in result.content]})
    if isinstance(result, types.GetPromptResult):
        messages = [m.model_copy(update={"content": _block(m.content, prefix)}) for m in result.messages]
        return result.model_copy(update={"messages": messages})
    if isinstance(result, types.ReadResourceResult):
        contents = [c.model_copy(update={"uri": prefix + c.uri}) for c in result.contents]
        return result.model_copy(update={"contents": contents})
    return result


def _block(block: Any, prefix: str) -> Any:
    if isinstance(block, types.ResourceLink):
        return block.model_copy(update={"uri": prefix + block.uri})
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource.model_copy(update={"uri": prefix + block.resource.uri})
        return block.model_copy(update={"resource": resource})
    return block
