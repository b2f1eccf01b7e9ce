"""Discovery modes (issue 31, ADR 0029): how a session's ``tools/list`` is made.

``all`` (the default): a session lists every tool it may use. ``search``: it lists the gateway's
``find_tools`` tool, the tools the operator pins as always visible, and the tools its own
``find_tools`` calls have found so far (oldest dropped past ``found_max``). Search mode changes
what is *listed*, never what may be *called*: every name still goes through the session's grants
(``reconciler/authority.py``), and ``find_tools`` only returns names those grants let it call.

A session's mode is, first found: its own (``discovery`` in a config-declared session or in the
control API's create request), its view's (``views: [{discovery: ...}]``), the config default
(top-level ``discovery:``). The config models live here, not in ``config.py``, so the config
loader only names them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The gateway's search tool, listed first to sessions in search mode.
FIND_TOOLS = "find_tools"
#: Found-set bound when the config does not say.
FOUND_MAX_DEFAULT = 32
#: Results of one ``find_tools`` call when the caller does not say.
LIMIT_DEFAULT = 5


class DiscoveryMode(enum.StrEnum):
    """``all``: list every usable tool. ``search``: list ``find_tools`` + pinned + found."""

    ALL = "all"
    SEARCH = "search"


Mode = Literal["all", "search"]


@dataclass(frozen=True, slots=True)
class DiscoveryPolicy:
    """The config's discovery settings, as the authority reads them: the default ``mode``, the
    mode per named view, the exposed tool names always visible in search mode (``always_visible``)
    and the found-set bound."""

    mode: DiscoveryMode = DiscoveryMode.ALL
    views: Mapping[str, DiscoveryMode] = field(default_factory=lambda: MappingProxyType({}))
    always_visible: frozenset[str] = frozenset()
    found_max: int = FOUND_MAX_DEFAULT

    def mode_of(self, own: str | None, view: str | None) -> DiscoveryMode:
        """A session's mode: its ``own``, else its ``view``'s, else the default."""
        if own is not None:
            return DiscoveryMode(own)
        if view is not None and view in self.views:
            return self.views[view]
        return self.mode


DEFAULT_POLICY = DiscoveryPolicy()


class DiscoveryConfig(BaseModel):
    """The top-level ``discovery:`` key: ``discovery: search`` (the default mode for every
    session), or a mapping ``{mode, always_visible, found_max}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = Field(
        default="all",
        description="`all` (every granted tool listed) or `search` (find_tools, always-visible and found tools).",
    )
    always_visible: tuple[str, ...] = Field(
        default=(),
        max_length=64,
        description="Exposed tool names listed to every search-mode session that may use them.",
    )
    found_max: int = Field(
        default=FOUND_MAX_DEFAULT,
        ge=1,
        le=1000,
        description="Found tools a search-mode session keeps listed; past it the oldest is dropped (and announced).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, str):
            return {"mode": value}
        return value

    @field_validator("always_visible")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or len(name) > 128:
                raise ValueError("always_visible holds exposed tool names (1..128 characters)")
        return value

    def policy(self, views: Mapping[str, str | None]) -> DiscoveryPolicy:
        """The engine's policy, with the modes the named ``views`` declare (``None``: inherit)."""
        return DiscoveryPolicy(
            mode=DiscoveryMode(self.mode),
            views=MappingProxyType({name: DiscoveryMode(m) for name, m in views.items() if m is not None}),
            always_visible=frozenset(self.always_visible),
            found_max=self.found_max,
        )
