"""Rate and concurrency limits (issue 30, ADR 0033): the top-level ``rate_limits:`` config key
and the policy the limiter reads.

A **rate rule** is a token bucket per *scope value*: ``session`` (one bucket per session),
``principal`` (per owner principal: every session of one user together), ``name`` (per served
tool name, resource URI or prompt name), ``source`` (per upstream) or ``total`` (one bucket). It
applies to the calls whose served name matches ``match`` (globs; default all), whose source
matches ``sources`` and whose kind is in ``kinds``. So ``scope: name, match: ["search_*"]`` gives
every search tool its own bucket, and ``scope: total, match: ["search_*"]`` one shared by them.

A **concurrency rule** caps the calls in flight to each source it matches: ``max`` run, up to
``queue`` more wait (each at most ``queue_timeout_s``), the rest are refused at once. The first
rule that matches a source is its rule.

The policy is part of the desired state: a config edit swaps it in after the next cycle, without
a restart and without publishing a revision (``reconciler/limiter.py``). The config models live
here, not in ``config/schema.py``, so the loader only names them."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_reconciler.reconciler.model import EntryKind

#: At most this many rules of each kind (each call checks every rate rule that matches it).
RULES_MAX = 64
#: A bucket refills completely within this long at most (``burst / rate``), so stored buckets
#: (a Redis key's TTL) never outlive a day.
REFILL_MAX_S = 86_400.0
#: Matching answers memoised per policy (kind, name, source); cleared when full.
_MEMO_MAX = 65_536

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")
_PERIOD_S = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
             "d": 86_400, "day": 86_400}  # fmt: skip
_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class Scope(enum.StrEnum):
    """What one bucket of a rate rule counts."""

    SESSION = "session"
    PRINCIPAL = "principal"
    NAME = "name"
    SOURCE = "source"
    TOTAL = "total"


class FailMode(enum.StrEnum):
    """What a shared limit does while the cluster store cannot be reached: ``closed`` refuses
    the call (``cluster_unavailable``, retryable), ``open`` lets it through unlimited."""

    OPEN = "open"
    CLOSED = "closed"


def _matches(globs: tuple[str, ...], value: str) -> bool:
    return not globs or any(fnmatchcase(value, g) for g in globs)


@dataclass(frozen=True, slots=True)
class RateRule:
    """One token-bucket rule (module docstring); ``rate`` in tokens per second."""

    name: str
    scope: Scope
    rate: float
    burst: float
    match: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    kinds: frozenset[EntryKind] = frozenset({EntryKind.TOOL, EntryKind.RESOURCE, EntryKind.PROMPT})

    def applies(self, kind: EntryKind, name: str, source: str) -> bool:
        """Whether a call of ``kind`` on served ``name`` of ``source`` counts against this rule."""
        return kind in self.kinds and _matches(self.match, name) and _matches(self.sources, source)

    def scope_value(self, session_id: str, principal: str, name: str, source: str) -> str:
        """The bucket this rule uses for one call."""
        scope = self.scope
        if scope is Scope.SESSION:
            return session_id
        if scope is Scope.PRINCIPAL:
            return principal
        if scope is Scope.NAME:
            return name
        if scope is Scope.SOURCE:
            return source
        return ""


@dataclass(frozen=True, slots=True)
class ConcurrencyRule:
    """Calls in flight per matching source: ``max`` run, ``queue`` wait ≤ ``queue_timeout_s``."""

    name: str
    max: int
    queue: int = 0
    queue_timeout_s: float = 30.0
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class LimitPolicy:
    """Every limit one good config declares. Immutable; the memo of which rules match a call is
    a cache of a pure function of the rules, bounded, and private to this snapshot."""

    rates: tuple[RateRule, ...] = ()
    concurrency: tuple[ConcurrencyRule, ...] = ()
    fail: FailMode = FailMode.CLOSED
    _memo: dict[tuple[EntryKind, str, str], tuple[RateRule, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _gates: dict[str, ConcurrencyRule | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """No rule at all: the limiter costs nothing."""
        return not self.rates and not self.concurrency

    def rates_for(self, kind: EntryKind, name: str, source: str) -> tuple[RateRule, ...]:
        """The rate rules a call counts against, in config order."""
        key = (kind, name, source)
        found = self._memo.get(key)
        if found is None:
            found = tuple(r for r in self.rates if r.applies(kind, name, source))
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[key] = found
        return found

    def concurrency_for(self, source: str) -> ConcurrencyRule | None:
        """The concurrency rule of ``source`` (the first that matches), if any."""
        try:
            return self._gates[source]
        except KeyError:
            rule = next((c for c in self.concurrency if _matches(c.sources, source)), None)
            if len(self._gates) >= _MEMO_MAX:
                self._gates.clear()
            self._gates[source] = rule
            return rule


NO_LIMITS = LimitPolicy()


# -- config ----------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _globs(value: tuple[str, ...]) -> tuple[str, ...]:
    for g in value:
        if not g or len(g) > 256:
            raise ValueError("globs are 1..256 characters")
    return value


def parse_rate(value: Any) -> tuple[float, float]:
    """``"10/s"``, ``"600/min"``, ``"1000/h"``, ``"5000/day"`` or a number (per second) →
    ``(tokens per second, calls in one period)``; the second is the default burst."""
    if isinstance(value, bool):
        raise ValueError("rate is N/s, N/min, N/h, N/day or a number per second")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError("rate must be above 0")
        return float(value), max(1.0, math.ceil(value))
    m = _RATE.match(str(value))
    if m is None:
        raise ValueError(f"rate {value!r}: write N/s, N/min, N/h or N/day (e.g. 10/s, 600/min)")
    calls, period = float(m.group(1)), _PERIOD_S[m.group(2)]
    if calls <= 0:
        raise ValueError("rate must be above 0")
    return calls / period, max(1.0, calls)


class RateRuleConfig(_Frozen):
    """One ``rate_limits.rules`` entry: a token bucket per scope value."""

    name: str = Field(pattern=_NAME, description="The rule's name: refusals name it (`limit` in the error).")
    scope: Literal["session", "principal", "name", "source", "total"] = Field(
        description="One bucket per `session`, per `principal` (owner), per served `name`, per `source`, or one in "
        "`total`.",
    )
    rate: str | float = Field(
        description="Refill rate: `N/s`, `N/min`, `N/h`, `N/day`, or a number per second.",
    )
    burst: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Bucket capacity: calls that may run back to back (default: N of the rate).",
    )
    match: tuple[str, ...] = Field(
        default=(),
        max_length=64,
        description="Globs on the served name (tool, prompt) or URI (resource); default: every name.",
    )
    sources: tuple[str, ...] = Field(default=(), max_length=64, description="Globs on source names; default: all.")
    kinds: tuple[Literal["tool", "resource", "prompt"], ...] = Field(
        default=("tool", "resource", "prompt"),
        min_length=1,
        description="Which operations count: `tool` (tools/call), `resource` (resources/read), `prompt` (prompts/get).",
    )

    _check_match = field_validator("match", "sources")(_globs)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | float) -> str | float:
        parse_rate(value)
        return value

    @model_validator(mode="after")
    def _refill_bounded(self) -> RateRuleConfig:
        rate, calls = parse_rate(self.rate)
        burst = self.burst if self.burst is not None else calls
        if burst / rate > REFILL_MAX_S:
            raise ValueError(f"burst / rate is {burst / rate:.0f} s; a bucket must refill within a day")
        return self

    def rule(self) -> RateRule:
        """The engine's rule."""
        rate, calls = parse_rate(self.rate)
        return RateRule(
            name=self.name,
            scope=Scope(self.scope),
            rate=rate,
            burst=float(self.burst if self.burst is not None else calls),
            match=self.match,
            sources=self.sources,
            kinds=frozenset(EntryKind(k) for k in self.kinds),
        )


class ConcurrencyRuleConfig(_Frozen):
    """One ``rate_limits.concurrency`` entry: calls in flight per source."""

    name: str = Field(pattern=_NAME, description="The rule's name: refusals name it.")
    sources: tuple[str, ...] = Field(
        default=(), max_length=64, description="Globs on source names (each matching source has its own cap)."
    )
    max: int = Field(ge=1, le=100_000, description="Calls in flight to one source at once.")
    queue: int = Field(
        default=0, ge=0, le=100_000, description="Calls that may wait for a slot; beyond that a call is refused."
    )
    queue_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="How long a queued call waits for a slot before it is refused."
    )

    _check_sources = field_validator("sources")(_globs)

    def rule(self) -> ConcurrencyRule:
        """The engine's rule."""
        return ConcurrencyRule(self.name, self.max, self.queue, self.queue_timeout_s, self.sources)


class RateLimitsConfig(_Frozen):
    """The top-level ``rate_limits:`` key. Reloaded like sources: an edit applies after the next
    cycle, no restart."""

    fail: Literal["open", "closed"] = Field(
        default="closed",
        description="With a Redis cluster store, when Redis cannot be reached: `closed` refuses limited calls "
        "(cluster_unavailable, retryable), `open` lets them through unlimited.",
    )
    rules: tuple[RateRuleConfig, ...] = Field(
        default=(), max_length=RULES_MAX, description="Token-bucket rules (at most 64)."
    )
    concurrency: tuple[ConcurrencyRuleConfig, ...] = Field(
        default=(), max_length=RULES_MAX, description="Calls-in-flight caps per source (at most 64)."
    )

    @model_validator(mode="before")
    @classmethod
    def _null(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("rules", "concurrency", mode="before")
    @classmethod
    def _null_list(cls, value: Any) -> Any:
        return () if value is None else value

    @model_validator(mode="after")
    def _unique_names(self) -> RateLimitsConfig:
        seen: set[str] = set()
        for name in [r.name for r in self.rules] + [c.name for c in self.concurrency]:
            if name in seen:
                raise ValueError(f"limit name {name!r} is used twice; refusals name the limit, so names are unique")
            seen.add(name)
        return self

    def policy(self) -> LimitPolicy:
        """The engine's policy."""
        return LimitPolicy(
            rates=tuple(r.rule() for r in self.rules),
            concurrency=tuple(c.rule() for c in self.concurrency),
            fail=FailMode(self.fail),
        )
