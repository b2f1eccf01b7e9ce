"""The config file's pydantic models: every key, its type, bounds and ``Field(description=...)``
(the source of ``docs/config.md`` and ``docs/config.schema.json``)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from mcp_reconciler.reconciler.approvals import ApprovalConfig
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.config.interpolation import _TYPED_ENV, InterpolatedStr, _interpolate, _numeric_or_bool
from mcp_reconciler.reconciler.curation_config import (
    FilterConfig,
    ViewConfig,
    valid_served_name,
)
from mcp_reconciler.reconciler.discovery import DiscoveryConfig, Mode
from mcp_reconciler.reconciler.oauth_config import OAuthConfig, UpstreamOAuthConfig
from mcp_reconciler.reconciler.projection import (
    MIN_BUDGET,
    Budgets,
    FindingsPolicy,
    MetadataPolicy,
    Override,
    Trust,
    clean_text,
)
from mcp_reconciler.reconciler.rate_limits import RateLimitsConfig
from mcp_reconciler.reconciler.uris import URI_PREFIX

# fullmatch, not match with "$": "$" would accept a trailing newline.
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.-]{0,64}")
_TRANSPORT_KINDS = ("stdio", "http", "sse")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _typed_interpolation(cls, value: Any, info: ValidationInfo) -> Any:
        """``${VAR}`` in a number or boolean key (``gateway: {port: ${GW_PORT}}``): expanded
        here, then validated as the key's type; string keys interpolate later, where they are
        used (their ``repr`` keeps the template)."""
        if not isinstance(value, str) or "${" not in value or info.field_name is None:
            return value
        field = cls.model_fields.get(info.field_name)
        if field is None or not _numeric_or_bool(field.annotation):
            return value
        typed = _TYPED_ENV.get()
        result, issues = _interpolate(value, typed.environ if typed is not None else os.environ)
        if issues:
            raise PydanticCustomError(
                "env_interpolation", "{message}", {"message": issues[0].message, "hint": issues[0].hint}
            )
        if typed is not None and isinstance(result, InterpolatedStr):
            typed.secrets.update(result.values)
        return str(result)


class TimeoutsConfig(_Frozen):
    """Per-source timeouts in seconds: connecting (incl. the MCP handshake), one call, and the
    first start's allowance (``startup_s``; default 40 s for a launcher command such as ``npx``,
    ``uvx`` or ``docker``, else ``connect_s``: ``reconciler/failure_cause.py``)."""

    connect_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds to connect and finish the MCP handshake (the first start gets `startup_s`).",
    )
    call_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds one call (tools/call, resources/read, prompts/get) may take before it fails.",
    )
    startup_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds the first start may take (a cold `npx -y` download). Default: 40 for a launcher "
        "command (npx, uvx, bunx, pipx, docker, podman, pnpm, yarn, deno, nix), else `connect_s`.",
    )


class StdioTransportConfig(_Frozen):
    """A subprocess speaking MCP on stdin/stdout. ``cwd`` defaults to the declaring file's
    directory (never the gateway's working directory)."""

    command: str = Field(
        min_length=1,
        description="The program to run, looked up on PATH (no shell); `python` means the gateway's own interpreter.",
    )
    args: tuple[str, ...] = Field(default=(), description="Its arguments, passed as they are (no shell expansion).")
    cwd: str | None = Field(
        default=None,
        description="Its working directory; relative to the declaring file's directory (default: that directory).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Variables added to the minimal environment it starts with; write `${VAR}` for secrets.",
    )
    stderr_noise: tuple[str, ...] = Field(
        default=(),
        description="Regexes (Python syntax) for stderr lines that are noise (a banner): logged at DEBUG, not INFO.",
    )

    @field_validator("stderr_noise")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"stderr_noise pattern {pattern!r} is not a valid regex: {exc}") from None
        return value


class _RemoteTransportConfig(_Frozen):
    """What both HTTP transports take: the endpoint, headers, and ``oauth`` for a bearer token
    by client credentials (one way to authorize, not both)."""

    url: str = Field(min_length=1, description="The MCP endpoint, an http:// or https:// URL.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description='HTTP headers sent with every request, e.g. `Authorization: "Bearer ${TOKEN}"` '
        "(interpolated values are secrets, redacted in logs).",
    )
    oauth: UpstreamOAuthConfig | None = Field(
        default=None,
        description="OAuth 2.1 client credentials: the gateway fetches its own bearer token for this upstream "
        "(instead of an Authorization header).",
    )

    @model_validator(mode="after")
    def _one_authorization(self) -> Self:
        if self.oauth is not None and any(k.lower() == "authorization" for k in self.headers):
            raise PydanticCustomError(
                "authorization_conflict", "an Authorization header and oauth are both set; keep one of them"
            )
        return self


class HttpTransportConfig(_RemoteTransportConfig):
    """A streamable-HTTP MCP endpoint; ``oauth`` gets its bearer token by client credentials."""


class SseTransportConfig(_RemoteTransportConfig):
    """A legacy HTTP+SSE MCP endpoint; ``oauth`` as for ``http``."""


class RootConfig(_Frozen):
    """One root the gateway answers a source's ``roots/list`` with (see ``SourceConfig.roots``)."""

    uri: str = Field(min_length=8, max_length=2048, description="The root, a `file://` URI (at most 2,048 characters).")
    name: str | None = Field(
        default=None, max_length=256, description="A readable name for it (at most 256 characters)."
    )

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, value: str) -> str:
        if not value.startswith("file://"):
            raise PydanticCustomError("root_uri", "a root is a file:// URI (MCP roots are file:// URIs)")
        return value


RESERVED_SOURCE_NAMES = frozenset({"all", "config"})
_OVERRIDE_DESCRIPTION_MAX = Bounds().description_bytes
_OVERRIDE_TITLE_MAX = 1024


def _check_visible(value: str | None) -> str | None:
    """Pinned text is served as is: it must not hide characters of its own."""
    if value is not None:
        _cleaned, removed = clean_text(value)
        if removed:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(removed.items()))
            raise PydanticCustomError(
                "invisible_text", "text contains invisible or control characters ({kinds})", {"kinds": kinds}
            )
    return value


class OverrideConfig(_Frozen):
    """Operator-pinned text for one named entry (I20): served instead of the upstream's."""

    title: str | None = Field(
        default=None,
        min_length=1,
        max_length=_OVERRIDE_TITLE_MAX,
        description="The title served instead of the upstream's (at most 1,024 characters, nothing invisible).",
    )
    description: str | None = Field(
        default=None,
        min_length=1,
        description="The description served instead of the upstream's (bounded in bytes, nothing invisible).",
    )
    # The served name of a tool or prompt (curation.py, ADR 0026).
    rename: str | None = Field(
        default=None,
        description="The name a tool or prompt is served under, exactly as written (1..128 characters of "
        "A-Z a-z 0-9 _ . -; no prefix is added).",
    )

    @field_validator("rename")
    @classmethod
    def _served(cls, value: str | None) -> str | None:
        return None if value is None else valid_served_name(value)

    @field_validator("title", "description")
    @classmethod
    def _visible(cls, value: str | None) -> str | None:
        return _check_visible(value)

    @field_validator("description")
    @classmethod
    def _description_bound(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > _OVERRIDE_DESCRIPTION_MAX:
            raise PydanticCustomError(
                "description_bound",
                "a pinned description is at most {limit} bytes",
                {"limit": _OVERRIDE_DESCRIPTION_MAX},
            )
        return value

    @model_validator(mode="after")
    def _something_pinned(self) -> OverrideConfig:
        if self.title is None and self.description is None and self.rename is None:
            raise PydanticCustomError("empty_override", "an override pins a title, a description or a rename")
        return self


class SourceConfig(_Frozen):
    """One source as written in the file (before interpolation and path resolution)."""

    name: str = Field(
        description="The source's name: 1..64 characters of A-Z a-z 0-9 _ . - (`all` and `config` are reserved). "
        "Its entries are served as `<name>__<upstream name>` unless `prefix` says otherwise."
    )
    stdio: StdioTransportConfig | None = Field(
        default=None, description="A subprocess speaking MCP on stdin/stdout. Exactly one of stdio, http, sse."
    )
    http: HttpTransportConfig | None = Field(
        default=None, description="A streamable-HTTP MCP endpoint. Exactly one of stdio, http, sse."
    )
    sse: SseTransportConfig | None = Field(
        default=None, description="A legacy HTTP+SSE MCP endpoint. Exactly one of stdio, http, sse."
    )
    watch: tuple[str, ...] = Field(
        default=(),
        description="Globs of files the source reads at start (relative to the declaring file): a change "
        "respawns it, a new revision.",
    )
    prefix: str | None = Field(
        default=None,
        description='The exposed-name prefix instead of the source\'s name, joined by `__` (`""` for none; '
        "at most 64 characters of A-Z a-z 0-9 _ . -).",
    )
    # Prepended to the source's resource URIs and templates (reconciler/uris.py): two sources
    # serving the same URI stay apart, e.g. "notes+" serves note://x as notes+note://x.
    uri_prefix: str | None = Field(
        default=None,
        description="Prepended to the source's resource URIs and templates, so two sources serving the same URI "
        "stay apart: `notes+` serves `note://x` as `notes+note://x` (1..64 characters of A-Z a-z 0-9 + . - _ : / ~).",
    )
    poll_seconds: float | None = Field(
        default=None,
        ge=1.0,
        description="Re-list the source every N seconds (>= 1), for servers that never announce list_changed. "
        "Default: no polling.",
    )
    timeouts: TimeoutsConfig | None = Field(
        default=None, description="This source's connect, call and first-start timeouts."
    )
    trust: Literal["trusted", "untrusted"] | None = Field(
        default=None,
        description="`untrusted`: its tool and prompt text is projected (bounded, cleaned, checked) before agents "
        "see it (I20). Default: `gateway.metadata.default_trust`.",
    )
    overrides: dict[str, OverrideConfig] = Field(
        default_factory=dict,
        description="By upstream name: a title, description or rename served instead of the upstream's.",
    )
    # Curation (reconciler/curation_config.py): filters on the upstream's own names, and
    # whether `prefix` is used exactly as written instead of joined by the separator.
    prefix_verbatim: bool = Field(
        default=False,
        description="true: `prefix` is used exactly as written (`tz-` serves `tz-get_time`) instead of joined by `__`.",
    )
    tools: FilterConfig | None = Field(
        default=None, description="Which of the upstream's tools are served, by its own names."
    )
    resources: FilterConfig | None = Field(
        default=None, description="Which of the upstream's resources are served, by its own names."
    )
    resource_templates: FilterConfig | None = Field(
        default=None, description="Which of the upstream's resource templates are served, by its own names."
    )
    prompts: FilterConfig | None = Field(
        default=None, description="Which of the upstream's prompts are served, by its own names."
    )
    # What the gateway answers this source's roots/list with. Unset: a roots/list made while
    # serving a call is relayed to that call's client; one made outside any call is refused.
    roots: tuple[RootConfig, ...] | None = Field(
        default=None,
        max_length=64,
        description="What the gateway answers this source's roots/list with (at most 64). Unset: a roots/list "
        "made while serving a call is relayed to that call's client; one made outside any call is refused.",
    )

    @field_validator("overrides")
    @classmethod
    def _check_overrides(cls, value: dict[str, OverrideConfig]) -> dict[str, OverrideConfig]:
        for name in value:
            if not name or len(name) > 2048:
                raise PydanticCustomError("override_name", "an override names an entry: 1..2048 characters")
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME_PATTERN.fullmatch(value):
            raise PydanticCustomError("source_name", "a source name is 1..64 characters of A-Z a-z 0-9 _ . -")
        if value in RESERVED_SOURCE_NAMES:
            # These are the reconciler's own dirty keys (workqueue.ALL / CONFIG).
            raise PydanticCustomError("source_name", "'all' and 'config' are reserved; choose another source name")
        return value

    @field_validator("prefix")
    @classmethod
    def _check_prefix(cls, value: str | None) -> str | None:
        if value is not None and not _PREFIX_PATTERN.fullmatch(value):
            raise PydanticCustomError("source_prefix", "a prefix is at most 64 characters of A-Z a-z 0-9 _ . -")
        return value

    @field_validator("uri_prefix")
    @classmethod
    def _check_uri_prefix(cls, value: str | None) -> str | None:
        if value is not None and not URI_PREFIX.fullmatch(value):
            raise PydanticCustomError(
                "uri_prefix",
                "a uri_prefix is 1..64 characters of A-Z a-z 0-9 + . - _ : / ~ (e.g. 'notes+')",
            )
        return value

    @field_validator("watch")
    @classmethod
    def _check_watch(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not pattern for pattern in value):
            raise PydanticCustomError("empty_glob", "a watch glob must not be empty")
        return value

    @model_validator(mode="after")
    def _exactly_one_transport(self) -> SourceConfig:
        present = [kind for kind in _TRANSPORT_KINDS if getattr(self, kind) is not None]
        if len(present) != 1:
            found = "none" if not present else f"{len(present)}: {', '.join(present)}"
            raise PydanticCustomError(
                "transport_count",
                "exactly one of stdio, http, sse is required, found {found}",
                {"found": found},
            )
        return self


def _nonempty_items(value: tuple[str, ...]) -> tuple[str, ...]:
    if any(not item for item in value):
        raise PydanticCustomError("empty_name", "names must not be empty")
    return value


class AnonymousSettings(_Frozen):
    """Anonymous access to ``/mcp`` over HTTP (``gateway.anonymous``, I16). Absent: every HTTP
    ``/mcp`` request needs a valid credential (401 otherwise). Present: a request without any
    credential gets a gateway session with ``grant_policy`` (legacy: one per MCP session; 2026
    era: one shared session), and ``serve`` warns at startup. ``sources`` scope ``follow``."""

    grant_policy: Literal["current", "follow", "none"] = Field(
        description="What an anonymous client sees: `current` (the names served when its session starts), "
        "`follow` (every name, as the catalog changes) or `none` (nothing until an operator grants it)."
    )
    sources: tuple[str, ...] = Field(
        default=(), description="With `follow`: only these sources' names (default: every source)."
    )

    _check_sources = field_validator("sources")(_nonempty_items)

    @model_validator(mode="after")
    def _sources_need_follow(self) -> AnonymousSettings:
        if self.sources and self.grant_policy != "follow":
            raise PydanticCustomError("sources_need_follow", "sources scope the follow policy only")
        return self


#: The shortest bearer token a config-declared session may have.
MIN_TOKEN_CHARS = 16


class SessionConfig(_Frozen):
    """One session declared in the config (``sessions:``), reconciled like the sources (a reload
    adds, updates or removes it). ``token`` is its ``/mcp`` bearer token — write ``${VAR}`` so the
    secret stays out of the file; it is never logged or shown. ``names`` go with ``explicit``
    (each granted as soon as the catalog has it), ``sources`` with ``follow`` (default: all)."""

    name: str = Field(description="The session's name: 1..64 characters of A-Z a-z 0-9 _ . -, unique.")
    token: str = Field(
        min_length=1,
        description="Its `/mcp` bearer token, at least 16 characters; write `${VAR}`: a secret, never logged or shown.",
    )
    grant_policy: Literal["current", "none", "explicit", "follow"] = Field(
        description="What it sees: `current` (the names served when it is created), `none` (nothing until "
        "granted), `explicit` (exactly `names`) or `follow` (every name of `sources`, as the catalog changes)."
    )
    names: tuple[str, ...] = Field(
        default=(), description="With `explicit`: the served names it is granted, each as soon as the catalog has it."
    )
    sources: tuple[str, ...] = Field(default=(), description="With `follow`: only these sources' names (default: all).")
    control_tools: bool = Field(
        default=False,
        description="true: it may call gateway_status / gateway_refresh (when `gateway.expose_control_tools` is on).",
    )
    # A named view (views:): the session sees only that view's names.
    view: str | None = Field(
        default=None, description="A named view (`views:`): the session sees only that view's names."
    )
    discovery: Mode | None = Field(
        default=None,
        description="`all` or `search` (reconciler/discovery.py, ADR 0029); default: the view's, else the config's.",
    )

    _check_lists = field_validator("names", "sources")(_nonempty_items)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME_PATTERN.fullmatch(value):
            raise PydanticCustomError("session_name", "a session name is 1..64 characters of A-Z a-z 0-9 _ . -")
        return value

    @model_validator(mode="after")
    def _lists_match_policy(self) -> SessionConfig:
        if self.names and self.grant_policy != "explicit":
            raise PydanticCustomError("names_need_explicit", "names go with grant_policy: explicit")
        if self.sources and self.grant_policy != "follow":
            raise PydanticCustomError("sources_need_follow", "sources scope the follow policy only")
        return self


class BudgetsConfig(_Frozen):
    """Length budgets (code points) for an untrusted source's text, per field kind."""

    title: int = Field(
        default=Budgets().title,
        ge=MIN_BUDGET,
        le=1_000_000,
        description="Longest title (code points) of an untrusted source's entry; longer text is cut and flagged.",
    )
    description: int = Field(
        default=Budgets().description,
        ge=MIN_BUDGET,
        le=1_000_000,
        description="Longest description (code points) of an untrusted source's entry; longer is cut and flagged.",
    )
    schema_: int = Field(
        default=Budgets().schema,
        ge=MIN_BUDGET,
        le=1_000_000,
        alias="schema",
        description="Most text (code points) in all strings of one input/output schema of an untrusted source.",
    )

    def budgets(self) -> Budgets:
        """The engine's validated :class:`~reconciler.projection.Budgets` for these settings."""
        return Budgets(title=self.title, description=self.description, schema=self.schema_)


class MetadataSettings(_Frozen):
    """How upstream metadata is treated (I20): ``default_trust`` for sources that do not say
    (``null``: remote http/sse sources untrusted, stdio trusted), projection ``budgets``, and
    what ``findings`` do to an entry (``flag``: served and reported; ``quarantine``: withheld)."""

    default_trust: Literal["trusted", "untrusted"] | None = Field(
        default=None,
        description="Trust of sources that do not set `trust`. null: remote http/sse sources are untrusted, "
        "stdio sources trusted.",
    )
    budgets: BudgetsConfig = Field(
        default_factory=BudgetsConfig, description="Length budgets for an untrusted source's text."
    )
    findings: Literal["flag", "quarantine"] = Field(
        default="flag",
        description="What a projection finding does to an entry: `flag` (served and reported) or `quarantine` "
        "(withheld).",
    )

    @field_validator("budgets", mode="before")
    @classmethod
    def _null_budgets(cls, value: Any) -> Any:
        return {} if value is None else value

    def policy(self, trust: str | None, kind: str, overrides: Mapping[str, OverrideConfig]) -> MetadataPolicy:
        """The policy of one source: its own trust, else the default, else by transport kind."""
        chosen = trust or self.default_trust
        return MetadataPolicy(
            trust=Trust(chosen) if chosen is not None else MetadataPolicy().trust_for(kind),
            budgets=self.budgets.budgets(),
            findings=FindingsPolicy(self.findings),
            overrides={
                name: Override(title=o.title, description=o.description)
                for name, o in overrides.items()
                if o.title is not None or o.description is not None  # a rename alone is curation
            },
        )


def _count(default: int, description: str, *, least: int = 1) -> Any:
    """A quota field: a count of at least ``least`` (ADR 0032)."""
    return Field(default=default, ge=least, description=description)


class LimitsConfig(_Frozen):
    """What one HTTP client can make the gateway hold (the ``gateway.limits:`` mapping, I18).
    Read when ``serve`` starts; a reload does not change them."""

    connections: int = Field(
        default=1024,
        ge=1,
        description="Open downstream HTTP connections; at the bound the oldest idle one is closed to make room. "
        "Clamped at startup to what the descriptor limit leaves after `fd_reserve`.",
    )
    fd_reserve: int = Field(
        default=256,
        ge=16,
        description="Descriptors kept free for config reads, upstream processes and connections, and logs.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection must deliver a complete request head this soon after it opens (or after its "
        "previous response), or it is closed.",
    )
    keep_alive_s: float = Field(
        default=5.0,
        gt=0,
        description="An idle keep-alive connection is closed after this long.",
    )
    header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Request line plus headers, in bytes (431 beyond).",
    )
    body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="`/mcp` request body, in bytes (413 beyond, answered while the body streams); also a request "
        "line of `mcp-reconciler stdio` (INVALID_REQUEST beyond, the rest of the line skipped).",
    )
    transport_sessions: int = Field(
        default=4096,
        ge=1,
        description="Streamable-HTTP transport sessions (2025-11-25 era) open at once, all clients together.",
    )
    transport_sessions_per_client: int = Field(
        default=256,
        ge=1,
        description="Transport sessions per client: per bearer credential, or per peer address without one.",
    )
    session_idle_s: float = Field(
        default=300.0,
        gt=0,
        description="A transport session with no request in flight and no open stream for this long is closed.",
    )
    upstream_message_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=64 * 1024,
        description="One message an upstream sends (a stdio line, a JSON body or an SSE event), in bytes: refused "
        "while it is read beyond this, and the call it answers fails naming this key (ADR 0025). Legacy SSE events are "
        "also held to the SDK's 1 MiB event cap (ADR 0043).",
    )
    # The control API's quotas (ADR 0032): per principal, in total, and a reserve only operators may
    # take, so no principal can take what another needs and an operator can always act.
    sessions: int = _count(10_000, "Control-API and config sessions at once, all principals together (429).")
    sessions_per_principal: int = _count(
        1_000, "Sessions one principal (owner, OAuth subject and client, or operator) may own at once."
    )
    sessions_operator_reserve: int = _count(
        100, "The last sessions of `sessions` only an operator may create (owners stop short of them).", least=0
    )
    api_session_idle_s: float = Field(
        default=86_400.0,
        ge=0,
        description="A control-API session unused this long is removed (0: never). One in use never expires: a "
        "call in flight, an open MCP connection or stream, a live hold of its owner, or activity within this time.",
    )
    grants_per_session: int = _count(
        16_384, "Names one session may be granted (429 too_many_grants beyond; a follow session stops growing)."
    )
    holds: int = _count(64, "Revision holds at once, all principals together (429 too_many_holds).")
    holds_per_principal: int = _count(8, "Revision holds one principal may keep at once (operators included).")
    holds_operator_reserve: int = _count(8, "The last holds of `holds` only an operator may take.", least=0)
    event_streams: int = _count(32, "GET /v1/events streams open at once, all principals together (429).")
    event_streams_per_principal: int = _count(8, "Event streams one principal may keep open.")
    event_streams_operator_reserve: int = _count(
        4, "The last event streams of `event_streams` only an operator may open.", least=0
    )

    @model_validator(mode="after")
    def _reserves_leave_room(self) -> LimitsConfig:
        # A reserve as large as its total would lock every owner out: refused, not clamped.
        for key in ("sessions", "holds", "event_streams"):
            total, reserve = getattr(self, key), getattr(self, f"{key}_operator_reserve")
            if reserve >= total:
                raise ValueError(f"{key}_operator_reserve ({reserve}) must be less than {key} ({total})")
        return self


class GatewaySettings(_Frozen):
    """Gateway-wide settings (the ``gateway:`` mapping). Every key is optional. ``grant_policy``
    is the policy of the local session ``mcp-reconciler stdio`` serves (the process owner);
    anonymous HTTP access has its own, under ``anonymous``."""

    host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="Where `serve` listens. MCP_RECONCILER_HOST and `--host` win over it.",
    )
    port: int = Field(
        default=8765,
        ge=0,
        le=65535,
        description="The port `serve` listens on (0: any free port). MCP_RECONCILER_PORT and `--port` win over it.",
    )
    cooldown_s: float = Field(
        default=1.0,
        ge=0,
        description="Seconds between the starts of two reconcile batches, and the unit of a failing source's "
        "reconnect backoff.",
    )
    retiring_max: int = Field(
        default=4,
        ge=1,
        description="Superseded revisions kept open for calls in flight and holds; at the bound, publishing the "
        "next revision waits.",
    )
    operation_deadline_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds one operation through the gateway may take before it fails with deadline_exceeded.",
    )
    expose_control_tools: bool = Field(
        default=False,
        description="true: gateway_status / gateway_refresh exist as MCP tools, for the stdio user and for "
        "sessions given `control_tools` (everyone else never sees them).",
    )
    grant_policy: Literal["current", "none", "follow"] = Field(
        default="current",
        description="The policy of the local session `mcp-reconciler stdio` serves: `current`, `none` or `follow`.",
    )
    drift_policy: Literal["allow", "flag", "quarantine"] = Field(
        default="flag",
        description="What happens when a name a session has seen changes its definition (I10): `allow`, `flag` "
        "(served and reported) or `quarantine` (withheld from sessions that saw the old one).",
    )
    # Extra Host values accepted on /mcp and /v1 (DNS-rebinding protection).
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="Extra Host header values accepted on /mcp and /v1 besides loopback names "
        "(DNS-rebinding protection), e.g. the name behind a reverse proxy.",
    )
    anonymous: AnonymousSettings | None = Field(
        default=None,
        description="Anonymous access to /mcp over HTTP. Absent: every HTTP /mcp request needs a credential "
        "(401 otherwise).",
    )
    metadata: MetadataSettings = Field(
        default_factory=MetadataSettings,
        description="How upstream metadata (tool and prompt text) is treated (I20).",
    )

    @field_validator("metadata", mode="before")
    @classmethod
    def _null_metadata(cls, value: Any) -> Any:
        return {} if value is None else value

    limits: LimitsConfig = Field(
        default_factory=LimitsConfig,
        description="What one HTTP client can make the gateway hold (I18); read at startup.",
    )
    shutdown_grace_s: float = Field(
        default=10.0,
        ge=0,
        description="On SIGTERM/SIGINT, operations in flight get this long to finish before they are ended with "
        "a retryable 'shutting down' error.",
    )

    def bounds(self, base: Bounds | None = None) -> Bounds:
        """``base`` (default: the design's defaults) with this file's overrides applied."""
        return dataclasses.replace(
            Bounds() if base is None else base,
            cooldown_s=self.cooldown_s,
            retiring_max=self.retiring_max,
            operation_deadline_s=self.operation_deadline_s,
            upstream_message_bytes=self.limits.upstream_message_bytes,
            sessions=self.limits.sessions,
            sessions_per_principal=self.limits.sessions_per_principal,
            sessions_operator_reserve=self.limits.sessions_operator_reserve,
            api_session_idle_s=self.limits.api_session_idle_s,
            names_per_session=self.limits.grants_per_session,
            holds=self.limits.holds,
            holds_per_owner=self.limits.holds_per_principal,
            holds_operator_reserve=self.limits.holds_operator_reserve,
            event_streams=self.limits.event_streams,
            event_streams_per_principal=self.limits.event_streams_per_principal,
            event_streams_operator_reserve=self.limits.event_streams_operator_reserve,
        )


class ClusterConfig(_Frozen):
    """Many replicas sharing sessions, grants, holds and revisions (the ``cluster:`` mapping,
    ADR 0020). ``store``: ``memory`` (this process only: the single-replica default) or a
    ``redis://`` / ``rediss://`` / ``unix://`` URL (``${VAR}`` for its password: interpolated
    values are secrets, redacted in logs). ``replica_id``: this replica's name in the cluster
    (default: host name and process id). ``staleness_s``: how long the store may be unconfirmed
    before shared sessions fail closed and ``/readyz`` turns false. Read at startup: changing
    it takes a restart."""

    store: str = Field(
        default="memory",
        min_length=1,
        description="`memory` (this process only) or a redis:// / rediss:// / unix:// URL; write `${VAR}` for "
        "its password (a secret, redacted in logs).",
    )
    replica_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="This replica's name in the cluster, unique per replica (default: host name and process id).",
    )
    staleness_s: float = Field(
        default=3.0,
        gt=0,
        le=300,
        description="How long the store may go unconfirmed before shared sessions fail closed and /readyz turns false.",
    )
    prefix: str = Field(
        default="mcpr",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The prefix of every key the cluster writes in the store (several gateways can share one).",
    )

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if value != "memory" and "${" not in value and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise PydanticCustomError("cluster_store", "store must be memory or a redis://, rediss:// or unix:// URL")
        return value


class AuditConfig(_Frozen):
    """The audit trail (the ``telemetry.audit:`` mapping, ADR 0031, I23): one JSON line per
    operation and decision. Read at startup."""

    path: str = Field(
        min_length=1,
        description="Where records go: a file path (relative to the config file; rotated by size), or `stderr`.",
    )
    max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=4096,
        description="A file is rotated (`<path>.1`, `<path>.2`, …) when the next record would take it past this.",
    )
    keep: int = Field(
        default=5, ge=0, le=1000, description="Rotated files kept besides the live one; older ones are deleted."
    )
    queue: int = Field(
        default=10_000,
        ge=16,
        le=1_000_000,
        description="Records waiting for the writer; beyond it records are dropped and counted, a call never "
        "waits (I23).",
    )
    argument_digest: bool = Field(
        default=False,
        description="true: records carry a SHA-256 digest of the call's arguments (never the arguments themselves).",
    )


class TelemetryConfig(_Frozen):
    """Metrics, OTLP export and the audit trail (the ``telemetry:`` mapping, ADR 0031). Read at
    startup: changing it takes a restart."""

    metrics: bool = Field(
        default=True,
        description="Serve `/metrics` (Prometheus text) on the main listener, for operator tokens.",
    )
    # Declared before metrics_listen: its validator reads this one.
    metrics_listen_public: bool = Field(
        default=False,
        description="true: `metrics_listen` may be a non-loopback address (anyone who reaches it reads the metrics).",
    )
    metrics_listen: str | None = Field(
        default=None,
        min_length=3,
        description="`host:port` of a second listener serving only `/metrics`, without auth (e.g. "
        "`127.0.0.1:9464`). Loopback only unless `metrics_listen_public` is true.",
    )
    served_names_max: int = Field(
        default=200,
        ge=0,
        le=10_000,
        description="Served names that get their own `name` label on the per-name call metrics; later names are "
        "counted under `other` (bounded cardinality).",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        min_length=1,
        description="OTLP/HTTP base URL spans and metrics are exported to (needs the `[otel]` extra); "
        "OTEL_EXPORTER_OTLP_ENDPOINT is used when this is absent.",
    )
    audit: AuditConfig | None = Field(
        default=None, description="The audit trail: one JSON line per operation and decision. Absent: off."
    )

    @field_validator("metrics_listen")
    @classmethod
    def _host_port(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise PydanticCustomError("host_port", "metrics_listen must be host:port, e.g. 127.0.0.1:9464")
        if not info.data.get("metrics_listen_public") and not is_loopback(host.strip("[]")):
            raise PydanticCustomError(
                "metrics_listen_public",
                "{host} is not a loopback address and this listener serves /metrics without auth; "
                "set metrics_listen_public: true to allow it",
                {"host": host},
            )
        return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _MainFile(_Frozen):
    """The main config file (``--config``, ``MCP_RECONCILER_CONFIG``). A drop-in file named by
    ``include`` holds one source mapping (the keys of ``sources`` entries)."""

    sources: tuple[SourceConfig, ...] = Field(default=(), description="The MCP servers the gateway serves.")
    include: tuple[str, ...] = Field(
        default=(),
        description="Globs of drop-in files (relative to this file), each holding one source mapping.",
    )
    gateway: GatewaySettings = Field(default_factory=GatewaySettings, description="Gateway-wide settings.")
    sessions: tuple[SessionConfig, ...] = Field(
        default=(), description="Sessions declared in the file, reconciled like the sources."
    )
    oauth: OAuthConfig | None = Field(
        default=None, description="Accept OAuth access tokens from these issuers on /mcp and /v1."
    )
    cluster: ClusterConfig | None = Field(
        default=None, description="Many replicas sharing sessions, grants, holds and revisions (ADR 0020)."
    )
    telemetry: TelemetryConfig = Field(
        default_factory=TelemetryConfig,
        description="Metrics (/metrics), OTLP export and the audit trail (ADR 0031); read at startup.",
    )
    # Each is a table per publication.
    views: tuple[ViewConfig, ...] = Field(
        default=(),
        max_length=64,
        description="Named views (at most 64): each served at /mcp/<name> and by `stdio --view <name>`.",
    )
    discovery: DiscoveryConfig = Field(
        default_factory=DiscoveryConfig,
        description="Search mode for large catalogs (ADR 0029): `search`, or `{mode, always_visible, found_max}`.",
    )
    approvals: ApprovalConfig = Field(
        default_factory=ApprovalConfig,
        description="Tools whose calls wait for a human approval (ADR 0034): a list of served names or globs, "
        "or `{required, timeout_s, parked_max, parked_per_principal, elicitation}`.",
    )
    rate_limits: RateLimitsConfig = Field(
        default_factory=RateLimitsConfig,
        description="Rate and concurrency limits on forwarded calls (ADR 0033); reloaded without a restart.",
    )

    @field_validator("sources", "include", "sessions", "views", mode="before")
    @classmethod
    def _null_list_is_empty(cls, value: Any) -> Any:
        # "sources:" with nothing after it parses as null; read it as "none" rather than
        # reporting a type error the operator did not mean to make.
        return () if value is None else value

    @field_validator("gateway", "telemetry", mode="before")
    @classmethod
    def _null_mapping_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value
