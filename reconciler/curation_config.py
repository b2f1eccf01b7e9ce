"""The config keys that curate the catalog (ADR 0026): per-source ``tools`` / ``resources`` /
``resource_templates`` / ``prompts`` filters, ``prefix_verbatim``, per-entry ``rename`` (in
``overrides``), and the top-level ``views:``. Here: the pydantic models of the new keys and the
checks that need more than one entry (unknown sources in a view, rename collisions), reported as
``(document, location, message, hint)`` so ``reconciler/config/`` turns them into
``file:line: field`` problems. The engine's values are built by :func:`curation_of`.

Nothing here imports the ``config`` package (it imports this module)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from mcp_reconciler.reconciler.curation import Curation, NameFilter, SourceCuration, ViewSpec, glob_problem
from mcp_reconciler.reconciler.model import EntryKind

__all__ = ["FILTER_KEYS", "FilterConfig", "ViewConfig", "check_curation", "curation_of", "valid_served_name"]

#: Config key → kind, in the order the keys are documented.
FILTER_KEYS: dict[str, EntryKind] = {
    "tools": EntryKind.TOOL,
    "resources": EntryKind.RESOURCE,
    "resource_templates": EntryKind.RESOURCE_TEMPLATE,
    "prompts": EntryKind.PROMPT,
}
_SERVED_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_VIEW_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def valid_served_name(value: str) -> str:
    """``value`` if it is a valid served name (I13: ``[A-Za-z0-9_.-]``, 1..128 characters)."""
    if not _SERVED_NAME.fullmatch(value):
        raise PydanticCustomError(
            "served_name", "a served name is 1..128 characters of A-Z a-z 0-9 _ . - (like an upstream name)"
        )
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FilterConfig(_Strict):
    """``allow`` / ``deny`` lists of exact names or globs (``*``, ``?``, ``[abc]``)."""

    allow: tuple[str, ...] = Field(
        default=(), description="Only names matching one of these are served (empty: every name)."
    )
    deny: tuple[str, ...] = Field(
        default=(), description="Names matching one of these are not served (wins over allow)."
    )

    @field_validator("allow", "deny")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            problem = glob_problem(pattern)
            if problem is not None:
                raise PydanticCustomError(
                    "bad_glob", "{problem}: {pattern}", {"problem": problem, "pattern": repr(pattern)}
                )
        return value

    def engine(self) -> NameFilter:
        """The engine's filter."""
        return NameFilter(allow=self.allow, deny=self.deny)


class ViewConfig(_Strict):
    """One named view: served at ``/mcp/<name>`` and by ``stdio --view <name>``. ``sources`` it
    takes (empty: all), then filters and ``rename`` (served name → the view's name) on the names
    the gateway serves."""

    name: str = Field(description="The view's name: 1..64 characters of A-Z a-z 0-9 _ . -.")
    sources: tuple[str, ...] = Field(default=(), description="The sources it takes (empty: all).")
    tools: FilterConfig | None = Field(default=None, description="Which served tool names it keeps.")
    resources: FilterConfig | None = Field(default=None, description="Which served resource URIs it keeps.")
    resource_templates: FilterConfig | None = Field(
        default=None, description="Which served resource templates it keeps."
    )
    prompts: FilterConfig | None = Field(default=None, description="Which served prompt names it keeps.")
    rename: dict[str, str] = Field(
        default_factory=dict, description="Served name to the name this view serves it under."
    )
    discovery: Literal["all", "search"] | None = Field(
        default=None,
        description="The discovery mode of the view's sessions (`all` or `search`; default: the config's `discovery`).",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _VIEW_NAME.fullmatch(value):
            raise PydanticCustomError("view_name", "a view name is 1..64 characters of A-Z a-z 0-9 _ . -")
        return value

    @field_validator("rename")
    @classmethod
    def _check_rename(cls, value: dict[str, str]) -> dict[str, str]:
        for served, new in value.items():
            valid_served_name(served)
            valid_served_name(new)
        return value

    def engine(self) -> ViewSpec:
        """The engine's view."""
        return ViewSpec(name=self.name, sources=self.sources, filters=filters_of(self), renames=dict(self.rename))


def filters_of(model: Any) -> dict[EntryKind, NameFilter]:
    """The filters a source or view model configures, by kind."""
    out: dict[EntryKind, NameFilter] = {}
    for key, kind in FILTER_KEYS.items():
        flt = getattr(model, key, None)
        if isinstance(flt, FilterConfig):
            out[kind] = flt.engine()
    return out


@dataclass(frozen=True, slots=True)
class CuratedSource:
    """What the cross-checks need of one declared source: its name, renames (upstream name →
    served name), filters, the document it is in (any key) and its location there."""

    name: str
    renames: dict[str, str]
    filters: dict[EntryKind, NameFilter]
    doc: Any
    loc: tuple[int | str, ...]


#: One cross-check finding: (document, location, message, hint).
Finding = tuple[Any, tuple[int | str, ...], str, str | None]


def check_curation(
    sources: Sequence[CuratedSource], views: Sequence[ViewConfig], main_doc: Any, also_named: Iterable[str] = ()
) -> list[Finding]:
    """The problems no single entry shows: two renames serving one name (naming both sources),
    views naming unknown sources, duplicate view names, view renames that collide. (A rename
    equal to a name another source's upstream lists is known only once it is listed: the merge
    reports that collision, naming both sources, in status.) ``also_named``: names of sources
    declared but invalid (reported on their own; a view naming one is not "unknown")."""
    found: list[Finding] = []
    claimed: dict[str, tuple[str, str]] = {}  # served name -> (source, upstream name)
    for src in sources:
        for upstream, served in src.renames.items():
            prior = claimed.get(served)
            if prior is not None:
                found.append(
                    (
                        src.doc,
                        (*src.loc, "overrides", upstream, "rename"),
                        f"rename collision: {served!r} is also the rename of {prior[1]!r} in source {prior[0]!r}",
                        "give one of them another name",
                    )
                )
            else:
                claimed[served] = (src.name, upstream)
    known = {src.name for src in sources} | set(also_named)
    seen: dict[str, int] = {}
    for index, view in enumerate(views):
        loc: tuple[int | str, ...] = ("views", index)
        if view.name in seen:
            found.append(
                (main_doc, (*loc, "name"), f"duplicate view name {view.name!r}", "each view needs its own name")
            )
        seen.setdefault(view.name, index)
        for i, name in enumerate(view.sources):
            if name not in known:
                found.append((main_doc, (*loc, "sources", i), f"no source named {name!r}", _close(name, known)))
        targets: dict[str, str] = {}
        for served, new in view.rename.items():
            if new in targets:
                found.append(
                    (
                        main_doc,
                        (*loc, "rename", served),
                        f"rename collision in view {view.name!r}: {new!r} is also the rename of {targets[new]!r}",
                        "give one of them another name",
                    )
                )
            targets.setdefault(new, served)
    return found


def _close(name: str, known: set[str]) -> str | None:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"declared sources: {', '.join(sorted(known)) or 'none'}"


def curation_of(sources: Sequence[CuratedSource], views: Sequence[ViewConfig]) -> Curation:
    """The engine's :class:`Curation` for valid declarations."""
    return Curation(
        sources={s.name: SourceCuration(filters=s.filters, renames=s.renames) for s in sources},
        views=tuple(v.engine() for v in views),
    )
