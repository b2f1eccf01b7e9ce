"""The gateway's YAML configuration: parsing, validation, ``${VAR}`` interpolation, and the
translation into engine ``SourceSpec`` values.

Guarantees:

* Every problem is reported as ``file:line: field: message (hint)``; all problems of one load
  are collected, not just the first. Lines come from the YAML nodes, falling back to the
  nearest enclosing node that exists.
* Error messages never contain interpolated values (only variable names and templates), and
  ``repr`` of the loaded objects shows ``${VAR}`` templates instead of the values they were
  replaced by (:class:`InterpolatedStr`). The real values are what ``str``/``==``/JSON see,
  because the engine needs them to connect and the spec digest must cover them (a rotated
  secret respawns the connection).
* An empty file is an error, not "zero sources": an editor's truncate-then-write must never
  look like an intentional removal of every source.
* Relative ``cwd``, ``watch`` and ``include`` paths resolve against the directory of the file
  that declared them, so a config means the same thing whatever the gateway's working
  directory.

Nothing here imports an HTTP framework.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.curation import NO_CURATION, Curation
from mcp_reconciler.reconciler.curation_config import (
    CuratedSource,
    FilterConfig,
    ViewConfig,
    check_curation,
    curation_of,
    filters_of,
    valid_served_name,
)
from mcp_reconciler.reconciler.discovery import DEFAULT_POLICY, DiscoveryConfig, DiscoveryPolicy, Mode
from mcp_reconciler.reconciler.freshness import raise_if_exhausted, strict_glob
from mcp_reconciler.reconciler.model import SessionSpec, SourceSpec
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
from mcp_reconciler.reconciler.uris import URI_PREFIX

__all__ = [
    "MIN_TOKEN_CHARS",
    "AnonymousSettings",
    "BudgetsConfig",
    "ClusterConfig",
    "ConfigError",
    "ConfigProblem",
    "GatewaySettings",
    "HttpTransportConfig",
    "InterpolatedStr",
    "LimitsConfig",
    "LoadedConfig",
    "MetadataSettings",
    "OAuthConfig",
    "OverrideConfig",
    "SessionConfig",
    "SourceConfig",
    "SseTransportConfig",
    "StdioTransportConfig",
    "TimeoutsConfig",
    "UpstreamOAuthConfig",
    "check_config",
    "display_transport",
    "load_config",
]

# fullmatch, not match with "$": "$" would accept a trailing newline.
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.-]{0,64}")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Order matters: "$${" (escape) must win over "${" at the same position.
_VAR_TOKEN = re.compile(r"\$\$\{|\$\{(?P<name>[^}]*)\}|\$\{")
_TRANSPORT_KINDS = ("stdio", "http", "sse")


# --------------------------------------------------------------------------------------------
# Problems and errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One finding in a config file.

    ``file`` is the path as the operator named it (drop-ins relative to the main file's
    directory as named), ``line`` is 1-based (``None`` when the problem is not tied to a line,
    e.g. an unreadable file), ``field`` is a dotted path like ``sources[1].http.url`` (empty for
    the whole document). No field ever holds an interpolated value."""

    file: str
    line: int | None
    field: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(Exception):
    """The configuration is invalid. ``str()`` renders one problem per line.

    ``files`` and ``include_globs`` describe the inputs the failed load discovered (best
    effort; ``include_globs`` is ``None`` when the main file could not be parsed), so a caller
    can keep watching them and notice the fix."""

    def __init__(
        self,
        problems: Sequence[ConfigProblem],
        *,
        files: Sequence[Path] = (),
        include_globs: Sequence[str] | None = None,
    ) -> None:
        self.problems: list[ConfigProblem] = list(problems)
        self.files: tuple[Path, ...] = tuple(files)
        self.include_globs: tuple[str, ...] | None = None if include_globs is None else tuple(include_globs)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


# --------------------------------------------------------------------------------------------
# Interpolated strings


class InterpolatedStr(str):
    """A string produced by ``${VAR}`` interpolation.

    It *is* the interpolated value for every string operation (the engine connects with it and
    digests it), but its ``repr`` is the template, so reprs of specs, configs and errors that
    embed it never reveal the secret that was substituted."""

    template: str
    #: The environment values substituted into it (secrets: the log system redacts them).
    values: tuple[str, ...]

    def __new__(cls, value: str, template: str, values: tuple[str, ...] = ()) -> InterpolatedStr:
        """The string ``value`` that reprs as ``template``; ``values`` are the substituted secrets."""
        obj = super().__new__(cls, value)
        obj.template = template
        obj.values = values
        return obj

    def __repr__(self) -> str:
        return repr(self.template)

    def __reduce__(self) -> tuple[Any, ...]:
        return (InterpolatedStr, (str(self), self.template, self.values))


def display_transport(transport: Mapping[str, Any]) -> dict[str, Any]:
    """A plain-data copy of a spec's transport that is safe to show an operator.

    Interpolated values become their ``${VAR}`` templates; literal header and env values are
    masked too (a token pasted into the file is still a token)."""

    def show(value: Any, *, mask: bool) -> Any:
        if isinstance(value, InterpolatedStr):
            return value.template
        if isinstance(value, Mapping):
            return {str(k): show(v, mask=mask) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [show(v, mask=mask) for v in value]
        if mask and isinstance(value, str):
            return "***"
        return value

    shown = {str(k): show(v, mask=k in ("headers", "env")) for k, v in transport.items()}
    oauth = transport.get("oauth")
    if isinstance(oauth, Mapping) and "client_secret" in oauth:
        secret = oauth["client_secret"]
        shown["oauth"]["client_secret"] = secret.template if isinstance(secret, InterpolatedStr) else "***"
    return shown


@dataclass(frozen=True, slots=True)
class _InterpolationIssue:
    message: str
    hint: str


def _interpolate(template: str, environ: Mapping[str, str]) -> tuple[str, list[_InterpolationIssue]]:
    """Expand ``${VAR}`` from ``environ``; ``$${`` is a literal ``${``.

    Issues name variables, never values. The result is an :class:`InterpolatedStr` when at
    least one variable was substituted, a plain ``str`` otherwise."""
    if "${" not in template:
        return template, []
    out: list[str] = []
    issues: list[_InterpolationIssue] = []
    substituted: list[str] = []
    pos = 0
    for m in _VAR_TOKEN.finditer(template):
        out.append(template[pos : m.start()])
        pos = m.end()
        token = m.group(0)
        if token == "$${":
            out.append("${")
            continue
        name = m.group("name")
        if name is None:
            issues.append(_InterpolationIssue("unterminated ${", "close it with }, or write $${ for a literal ${"))
            continue
        if not _VAR_NAME.match(name):
            issues.append(
                _InterpolationIssue(
                    "invalid variable reference",
                    "use ${NAME} with letters, digits and _; write $${ for a literal ${",
                )
            )
            continue
        value = environ.get(name)
        if value is None:
            issues.append(
                _InterpolationIssue(
                    f"environment variable {name} is not set",
                    f"export {name} before starting the gateway, or write $${{ for a literal ${{",
                )
            )
            continue
        out.append(value)
        substituted.append(value)
    out.append(template[pos:])
    value_str = "".join(out)
    return (InterpolatedStr(value_str, template, tuple(substituted)) if substituted else value_str), issues


# --------------------------------------------------------------------------------------------
# Schema


class _TypedEnv:
    """What a load's typed interpolation reads and fills (:data:`_TYPED_ENV`)."""

    def __init__(self, environ: Mapping[str, str], secrets: set[str]) -> None:
        self.environ = environ
        self.secrets = secrets


#: Set by :func:`load_config` while it validates: the environment ``${VAR}`` in a number or
#: boolean key reads, and the set its substituted values join (secrets, like every other).
_TYPED_ENV: contextvars.ContextVar[_TypedEnv | None] = contextvars.ContextVar("config_typed_env", default=None)


def _numeric_or_bool(annotation: Any) -> bool:
    """Whether a field holds an int, float or bool (optionally ``None``): where ``${VAR}`` is
    expanded before validation, so ``port: ${GW_PORT}`` is a number."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    kinds = [a for a in args if a is not type(None)] if args else [annotation]
    return bool(kinds) and all(k in (int, float, bool) for k in kinds)


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

    connect_s: float = Field(default=10.0, gt=0)
    call_s: float = Field(default=300.0, gt=0)
    startup_s: float | None = Field(default=None, gt=0)


class StdioTransportConfig(_Frozen):
    """A subprocess speaking MCP on stdin/stdout. ``cwd`` defaults to the declaring file's
    directory (never the gateway's working directory)."""

    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    #: Regexes (Python syntax) for stderr lines the operator calls noise: logged at DEBUG, not INFO.
    stderr_noise: tuple[str, ...] = ()

    @field_validator("stderr_noise")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"stderr_noise pattern {pattern!r} is not a valid regex: {exc}") from None
        return value


class HttpTransportConfig(_Frozen):
    """A streamable-HTTP MCP endpoint; ``oauth`` gets its bearer token by client credentials."""

    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    oauth: UpstreamOAuthConfig | None = None

    @model_validator(mode="after")
    def _one_authorization(self) -> HttpTransportConfig:
        return _one_authorization(self)


class SseTransportConfig(_Frozen):
    """A legacy HTTP+SSE MCP endpoint; ``oauth`` as for ``http``."""

    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    oauth: UpstreamOAuthConfig | None = None

    @model_validator(mode="after")
    def _one_authorization(self) -> SseTransportConfig:
        return _one_authorization(self)


_Remote = typing.TypeVar("_Remote", HttpTransportConfig, SseTransportConfig)


def _one_authorization(remote: _Remote) -> _Remote:
    if remote.oauth is not None and any(k.lower() == "authorization" for k in remote.headers):
        raise PydanticCustomError(
            "authorization_conflict", "an Authorization header and oauth are both set; keep one of them"
        )
    return remote


class RootConfig(_Frozen):
    """One root the gateway answers a source's ``roots/list`` with (see ``SourceConfig.roots``)."""

    uri: str = Field(min_length=8, max_length=2048)
    name: str | None = Field(default=None, max_length=256)

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

    title: str | None = Field(default=None, min_length=1, max_length=_OVERRIDE_TITLE_MAX)
    description: str | None = Field(default=None, min_length=1)
    rename: str | None = None  # the served name of a tool or prompt (curation.py, ADR 0026)

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

    name: str
    stdio: StdioTransportConfig | None = None
    http: HttpTransportConfig | None = None
    sse: SseTransportConfig | None = None
    watch: tuple[str, ...] = ()
    prefix: str | None = None
    # Prepended to the source's resource URIs and templates (reconciler/uris.py): two sources
    # serving the same URI stay apart, e.g. "notes+" serves note://x as notes+note://x.
    uri_prefix: str | None = None
    poll_seconds: float | None = Field(default=None, ge=1.0)
    timeouts: TimeoutsConfig | None = None
    trust: Literal["trusted", "untrusted"] | None = None  # default: gateway.metadata.default_trust
    overrides: dict[str, OverrideConfig] = Field(default_factory=dict)
    # Curation (reconciler/curation_config.py): filters on the upstream's own names, and
    # whether `prefix` is used exactly as written instead of joined by the separator.
    prefix_verbatim: bool = False
    tools: FilterConfig | None = None
    resources: FilterConfig | None = None
    resource_templates: FilterConfig | None = None
    prompts: FilterConfig | None = None
    # What the gateway answers this source's roots/list with. Unset: a roots/list made while
    # serving a call is relayed to that call's client; one made outside any call is refused.
    roots: tuple[RootConfig, ...] | None = Field(default=None, max_length=64)

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

    grant_policy: Literal["current", "follow", "none"]
    sources: tuple[str, ...] = ()

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

    name: str
    token: str = Field(min_length=1)
    grant_policy: Literal["current", "none", "explicit", "follow"]
    names: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    control_tools: bool = False
    view: str | None = None  # a named view (views:): the session sees only that view's names
    discovery: Mode | None = None  # all | search (reconciler/discovery.py; default: the view's or the config's)

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

    title: int = Field(default=Budgets().title, ge=MIN_BUDGET, le=1_000_000)
    description: int = Field(default=Budgets().description, ge=MIN_BUDGET, le=1_000_000)
    schema_: int = Field(default=Budgets().schema, ge=MIN_BUDGET, le=1_000_000, alias="schema")

    def budgets(self) -> Budgets:
        """The engine's validated :class:`~reconciler.projection.Budgets` for these settings."""
        return Budgets(title=self.title, description=self.description, schema=self.schema_)


class MetadataSettings(_Frozen):
    """How upstream metadata is treated (I20): ``default_trust`` for sources that do not say
    (``null``: remote http/sse sources untrusted, stdio trusted), projection ``budgets``, and
    what ``findings`` do to an entry (``flag``: served and reported; ``quarantine``: withheld)."""

    default_trust: Literal["trusted", "untrusted"] | None = None
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    findings: Literal["flag", "quarantine"] = "flag"

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


class LimitsConfig(_Frozen):
    """What one HTTP client can make the gateway hold (the ``gateway.limits:`` mapping, I18).
    Read when ``serve`` starts; a reload does not change them."""

    #: Open downstream HTTP connections; at the bound the oldest idle one is closed to make room.
    #: Clamped at startup to what the descriptor limit leaves after ``fd_reserve``.
    connections: int = Field(default=1024, ge=1)
    #: Descriptors kept free for config reads, upstream processes and connections, and logs.
    fd_reserve: int = Field(default=256, ge=16)
    #: A connection must deliver a complete request head this soon after it opens (or after its
    #: previous response), or it is closed.
    header_timeout_s: float = Field(default=10.0, gt=0)
    #: An idle keep-alive connection is closed after this long.
    keep_alive_s: float = Field(default=5.0, gt=0)
    #: Request line plus headers, in bytes (431 beyond).
    header_bytes: int = Field(default=64 * 1024, ge=1024)
    #: ``/mcp`` request body, in bytes (413 beyond, answered while the body streams).
    body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: Streamable-HTTP transport sessions (2025-11-25 era) open at once, all clients together.
    transport_sessions: int = Field(default=4096, ge=1)
    #: Transport sessions per client: per bearer credential, or per peer address without one.
    transport_sessions_per_client: int = Field(default=256, ge=1)
    #: A transport session with no request in flight and no open stream for this long is closed.
    session_idle_s: float = Field(default=300.0, gt=0)
    #: One message an upstream sends (a stdio line), in bytes: refused while it is read beyond
    #: this, and the call it answers fails naming this key (ADR 0025).
    upstream_message_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024)


class GatewaySettings(_Frozen):
    """Gateway-wide settings (the ``gateway:`` mapping). Every key is optional. ``grant_policy``
    is the policy of the local session ``mcp-reconciler stdio`` serves (the process owner);
    anonymous HTTP access has its own, under ``anonymous``."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8765, ge=0, le=65535)
    cooldown_s: float = Field(default=1.0, ge=0)
    retiring_max: int = Field(default=4, ge=1)
    operation_deadline_s: float = Field(default=300.0, gt=0)
    expose_control_tools: bool = False
    grant_policy: Literal["current", "none", "follow"] = "current"
    drift_policy: Literal["allow", "flag", "quarantine"] = "flag"
    allowed_hosts: tuple[str, ...] = ()  # extra Host values accepted on /mcp and /v1 (DNS-rebinding protection)
    anonymous: AnonymousSettings | None = None
    metadata: MetadataSettings = Field(default_factory=MetadataSettings)

    @field_validator("metadata", mode="before")
    @classmethod
    def _null_metadata(cls, value: Any) -> Any:
        return {} if value is None else value

    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    #: On SIGTERM/SIGINT, operations in flight get this long to finish before they are ended
    #: with a retryable "shutting down" error.
    shutdown_grace_s: float = Field(default=10.0, ge=0)

    def bounds(self, base: Bounds | None = None) -> Bounds:
        """``base`` (default: the design's defaults) with this file's overrides applied."""
        return dataclasses.replace(
            Bounds() if base is None else base,
            cooldown_s=self.cooldown_s,
            retiring_max=self.retiring_max,
            operation_deadline_s=self.operation_deadline_s,
            upstream_message_bytes=self.limits.upstream_message_bytes,
        )


class ClusterConfig(_Frozen):
    """Many replicas sharing sessions, grants, holds and revisions (the ``cluster:`` mapping,
    ADR 0020). ``store``: ``memory`` (this process only: the single-replica default) or a
    ``redis://`` / ``rediss://`` / ``unix://`` URL (``${VAR}`` for its password: interpolated
    values are secrets, redacted in logs). ``replica_id``: this replica's name in the cluster
    (default: host name and process id). ``staleness_s``: how long the store may be unconfirmed
    before shared sessions fail closed and ``/readyz`` turns false. Read at startup: changing
    it takes a restart."""

    store: str = Field(default="memory", min_length=1)
    replica_id: str | None = Field(default=None, min_length=1, max_length=128)
    staleness_s: float = Field(default=3.0, gt=0, le=300)
    prefix: str = Field(default="mcpr", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if value != "memory" and "${" not in value and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise PydanticCustomError("cluster_store", "store must be memory or a redis://, rediss:// or unix:// URL")
        return value


class _MainFile(_Frozen):
    sources: tuple[SourceConfig, ...] = ()
    include: tuple[str, ...] = ()
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    sessions: tuple[SessionConfig, ...] = ()
    oauth: OAuthConfig | None = None
    cluster: ClusterConfig | None = None
    views: tuple[ViewConfig, ...] = Field(default=(), max_length=64)  # each is a table per publication
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)  # search mode (ADR 0029)

    @field_validator("sources", "include", "sessions", "views", mode="before")
    @classmethod
    def _null_list_is_empty(cls, value: Any) -> Any:
        # "sources:" with nothing after it parses as null; read it as "none" rather than
        # reporting a type error the operator did not mean to make.
        return () if value is None else value

    @field_validator("gateway", mode="before")
    @classmethod
    def _null_mapping_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


# --------------------------------------------------------------------------------------------
# Loaded configuration


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """One valid reading of the main file and its drop-ins.

    ``specs`` are in declaration order (main file first, then drop-ins sorted by path);
    ``files`` lists every file read (main first); ``include_globs`` are absolute patterns."""

    path: Path
    settings: GatewaySettings
    specs: tuple[SourceSpec, ...]
    files: tuple[Path, ...]
    include_globs: tuple[str, ...]
    sessions: tuple[SessionSpec, ...] = ()
    oauth: OAuthConfig | None = None  # the resource-server section, secrets interpolated (HTTP edge only)
    #: Every value ``${VAR}`` interpolation substituted: secrets wherever they land (the log
    #: system redacts them by value, ``reconciler/redaction.py``).
    secret_values: frozenset[str] = field(default=frozenset(), repr=False)
    #: The ``cluster:`` section with ``${VAR}`` expanded (``None``: absent, one replica).
    cluster: ClusterConfig | None = field(default=None, repr=False)
    #: Per-source filters and renames, and the named views (ADR 0026).
    curation: Curation = NO_CURATION
    #: Discovery modes and the search-mode settings (ADR 0029).
    discovery: DiscoveryPolicy = DEFAULT_POLICY


# --------------------------------------------------------------------------------------------
# YAML with line numbers


@dataclass(slots=True)
class _Document:
    file: str  # display name
    path: Path  # absolute
    root: yaml.Node | None
    data: Any


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _locate(root: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """Line of the node at ``loc``, or of the deepest ancestor that exists.

    For a mapping key, the line of the *key* is used: that is where an operator looks for
    ``url:`` even when its value starts on the next line."""
    if root is None:
        return None
    node: yaml.Node = root
    line = _line(root)
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            found: tuple[yaml.Node, yaml.Node] | None = None
            for key, value in node.value:
                # The constructor keeps the last of duplicate keys; so do we.
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    found = (key, value)
            if found is None:
                break
            line, node = _line(found[0]), found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = _line(node)
        else:
            break
    return line


def _duplicate_keys(root: yaml.Node | None) -> Iterator[tuple[yaml.Node, yaml.Node, str]]:
    """(first key node, repeated key node, dotted path) for each duplicated mapping key.

    YAML silently keeps the last duplicate; a config that says two things is an error."""
    if root is None:
        return
    seen: set[int] = set()  # aliases share nodes; visit each once
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in first and key.value != "<<":
                        yield first[key.value], key, _join(path, key.value)
                    first.setdefault(key.value, key)
                    stack.append((value, _join(path, key.value)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, f"{path}[{index}]"))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _read_document(path: Path, display: str) -> _Document | ConfigProblem:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ConfigProblem(display, None, "", "file not found")
    except OSError as exc:
        # Out of descriptors or memory says nothing about the file: not a config problem.
        raise_if_exhausted(exc, display)
        return ConfigProblem(display, None, "", f"cannot read file: {exc.strerror or type(exc).__name__}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ConfigProblem(display, raw[: exc.start].count(b"\n") + 1, "", "file is not valid UTF-8")
    try:
        root, data = _parse_yaml(text)
    except yaml.MarkedYAMLError as exc:
        with contextlib.suppress(yaml.YAMLError):
            # ``{port: ${GW_PORT}}``: a bare ``${VAR}`` is not a plain scalar inside a flow
            # mapping (its braces are flow syntax); the same text with it quoted is what the
            # writer meant. Only a document that does not parse as written is read so.
            quoted = _quote_bare_variables(text)
            if quoted != text:
                root, data = _parse_yaml(quoted)
                return _Document(display, path, root, data)
        mark = exc.problem_mark or exc.context_mark
        # Only the parser's problem/context text: str(exc) would quote a snippet of the line,
        # which may be a secret pasted into the file.
        message = "; ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        return ConfigProblem(display, None if mark is None else mark.line + 1, "", f"YAML syntax: {message}")
    except yaml.YAMLError as exc:
        return ConfigProblem(display, None, "", f"YAML syntax: {type(exc).__name__}")
    return _Document(display, path, root, data)


def _parse_yaml(text: str) -> tuple[Any, Any]:
    """(root node, constructed data) of a single-document YAML text."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return root, None if root is None else loader.construct_document(root)
    finally:
        loader.dispose()


_BARE_VARIABLE = re.compile(r"(?<=[:\[,])(\s*)(\$\{[A-Za-z_][A-Za-z0-9_]*\})(?=\s*(?:[,}\]]|#|$))", re.MULTILINE)


def _quote_bare_variables(text: str) -> str:
    """``text`` with each unquoted ``${VAR}`` value quoted (``: ${X}}`` → ``: "${X}"}``); lines
    keep their numbers, so problems still point at the right line."""

    def quote(m: re.Match[str]) -> str:
        line_start = text.rfind("\n", 0, m.start()) + 1
        before = text[line_start : m.start()]
        if before.count('"') % 2 or before.count("'") % 2:
            return m.group(0)  # inside a quoted string already
        return f'{m.group(1)}"{m.group(2)}"'

    return _BARE_VARIABLE.sub(quote, text)


# --------------------------------------------------------------------------------------------
# Validation errors → problems


def _model_at(model: Any, loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model class that ``loc`` lands in (to suggest its keys), if any."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            info = current.model_fields.get(part)
            if info is None:
                return None
            current = info.annotation
        elif typing.get_origin(current) in (tuple, list) and isinstance(part, int):
            args = [a for a in typing.get_args(current) if a is not Ellipsis]
            current = args[0] if args else None
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _field_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, part)
    return out


_MISSING_HINTS = {
    "name": "every source needs a unique name",
    "command": "stdio needs the command to run",
    "url": "give the server's MCP endpoint URL",
    "grant_policy": "say what these callers may see: current, follow or none (sessions also: explicit)",
    "token": "the session's bearer token, from the environment: token: ${MY_SESSION_TOKEN}",
    "resource": "the public URL of this gateway's /mcp endpoint (the aud tokens must carry)",
    "issuers": "list the authorization servers whose tokens are accepted",
    "issuer": "the issuer identifier, exactly as in the authorization server's metadata",
    "token_url": "the authorization server's token endpoint",
}


def _validation_problems(
    exc: ValidationError,
    doc: _Document,
    model: type[BaseModel],
    prefix: Sequence[int | str],
) -> list[ConfigProblem]:
    problems = []
    # include_input=False: even templates stay out of messages; values are never needed here.
    for err in exc.errors(include_url=False, include_input=False):
        loc = tuple(part for part in err["loc"] if isinstance(part, int | str))
        kind = err["type"]
        message = err["msg"]
        hint: str | None = None
        if kind == "missing":
            message = "field required"
            hint = _MISSING_HINTS.get(str(loc[-1])) if loc else None
        elif kind == "extra_forbidden":
            message = "unknown key"
            parent = _model_at(model, loc[:-1])
            if parent is not None and loc:
                allowed = [info.alias or name for name, info in parent.model_fields.items()]
                close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
                if parent is SourceConfig and loc[-1] == "sources":  # not "resources": a drop-in's list
                    hint = "a drop-in holds one source mapping (name, stdio/http/sse, ...), not a sources: list"
        elif kind == "transport_count":
            hint = "each source needs exactly one of stdio, http, sse"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = "expected a mapping"
        elif kind in ("tuple_type", "list_type"):
            message = "expected a list"
        elif kind == "string_type":
            message = "expected a string"
            hint = "quote values YAML would read as numbers, booleans or null"
        elif kind == "env_interpolation":
            ctx = err.get("ctx") or {}
            message, hint = str(ctx.get("message", message)), str(ctx.get("hint", "")) or None
        else:
            message = message[:1].lower() + message[1:]
        full = (*prefix, *loc)
        problems.append(ConfigProblem(doc.file, _locate(doc.root, full), _field_path(full), message, hint))
    return problems


# --------------------------------------------------------------------------------------------
# Building specs


@dataclass(slots=True)
class _Declared:
    """A validated source plus where it came from (for lines and relative paths)."""

    source: SourceConfig
    doc: _Document
    loc: tuple[int | str, ...]  # path of the source mapping inside its document


def _build_spec(
    declared: _Declared,
    environ: Mapping[str, str],
    problems: list[ConfigProblem],
    metadata: MetadataSettings | None = None,
    secrets: set[str] | None = None,
) -> SourceSpec | None:
    src, doc = declared.source, declared.doc
    base_dir = doc.path.parent
    before = len(problems)

    def expand(value: str, *loc: int | str) -> str:
        result, issues = _interpolate(value, environ)
        if secrets is not None and isinstance(result, InterpolatedStr):
            secrets.update(result.values)
        full = (*declared.loc, *loc)
        for issue in issues:
            problems.append(
                ConfigProblem(doc.file, _locate(doc.root, full), _field_path(full), issue.message, issue.hint)
            )
        return result

    def check_url(url: str, *loc: int | str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            full = (*declared.loc, *loc)
            # The value itself is not quoted: it may carry an interpolated token.
            problems.append(
                ConfigProblem(
                    doc.file,
                    _locate(doc.root, full),
                    _field_path(full),
                    "not an http:// or https:// URL",
                    "e.g. http://127.0.0.1:9000/mcp",
                )
            )

    timeouts = src.timeouts or TimeoutsConfig()
    transport: dict[str, Any]
    if src.stdio is not None:
        stdio = src.stdio
        cwd = expand(stdio.cwd, "stdio", "cwd") if stdio.cwd is not None else None
        transport = {
            "kind": "stdio",
            "command": expand(stdio.command, "stdio", "command"),
            "args": [expand(arg, "stdio", "args", i) for i, arg in enumerate(stdio.args)],
            # Path joining keeps the str subclass out; cwd templates are rarely secret, and
            # the real path is what a subprocess needs.
            "cwd": os.path.normpath(os.path.join(base_dir, cwd)) if cwd is not None else str(base_dir),
            "env": {key: expand(value, "stdio", "env", key) for key, value in stdio.env.items()},
        }
        if stdio.stderr_noise:  # only when set: digests of sources without it are unchanged
            transport["stderr_noise"] = list(stdio.stderr_noise)
    else:
        kind: Literal["http", "sse"] = "http" if src.http is not None else "sse"
        remote = src.http if src.http is not None else src.sse
        assert remote is not None  # guaranteed by SourceConfig._exactly_one_transport
        url = expand(remote.url, kind, "url")
        if len(problems) == before:
            check_url(url, kind, "url")
        transport = {
            "kind": kind,
            "url": url,
            "headers": {key: expand(value, kind, "headers", key) for key, value in remote.headers.items()},
        }
        if remote.oauth is not None:
            transport["oauth"] = _upstream_oauth(remote.oauth, kind, expand, check_url)
    transport["timeouts"] = {"connect_s": timeouts.connect_s, "call_s": timeouts.call_s}
    if timeouts.startup_s is not None:  # only when set: digests of sources without it are unchanged
        transport["timeouts"]["startup_s"] = timeouts.startup_s
    if src.roots is not None:
        # In the transport, so the spec digest covers it: changed roots reconnect the source.
        transport["roots"] = [r.model_dump(exclude_none=True) for r in src.roots]
    if len(problems) != before:
        return None
    return SourceSpec(
        name=src.name,
        transport=transport,
        prefix=src.prefix,
        prefix_verbatim=src.prefix_verbatim,
        uri_prefix=src.uri_prefix,
        watch=tuple(os.path.normpath(os.path.join(base_dir, pattern)) for pattern in src.watch),
        poll_seconds=src.poll_seconds,
        metadata=(metadata or MetadataSettings()).policy(src.trust, transport["kind"], src.overrides),
    )


def _upstream_oauth(
    oauth: UpstreamOAuthConfig,
    kind: str,
    expand: typing.Callable[..., str],
    check_url: typing.Callable[..., None],
) -> dict[str, Any]:
    """The transport's ``oauth`` entry: plain data for the engine (``reconciler.upstream_auth``),
    secrets interpolated (their ``repr`` stays the template), covered by the spec digest so a
    rotated secret reconnects the source."""
    token_url = expand(oauth.token_url, kind, "oauth", "token_url")
    if "${" in oauth.token_url:
        check_url(token_url, kind, "oauth", "token_url")
    return {
        "token_url": token_url,
        "client_id": expand(oauth.client_id, kind, "oauth", "client_id"),
        "client_secret": expand(oauth.client_secret, kind, "oauth", "client_secret"),
        "scopes": list(oauth.scopes),
        "resource": None if oauth.resource is None else expand(oauth.resource, kind, "oauth", "resource"),
        "audience": oauth.audience,
        "auth_method": oauth.auth_method,
        "refresh_skew_s": oauth.refresh_skew_s,
        "timeout_s": oauth.timeout_s,
    }


def _interpolate_oauth(
    oauth: OAuthConfig | None,
    doc: _Document,
    environ: Mapping[str, str],
    problems: list[ConfigProblem],
    secrets: set[str] | None = None,
) -> OAuthConfig | None:
    """``oauth:`` with ``${VAR}`` expanded in the introspection client credentials (the only
    secrets of the section); problems name variables, never values."""
    if oauth is None:
        return None
    issuers = []
    for index, issuer in enumerate(oauth.issuers):
        intro = issuer.introspection
        if intro is not None:
            values: dict[str, str] = {}
            for key in ("client_id", "client_secret"):
                value, issues = _interpolate(getattr(intro, key), environ)
                loc = ("oauth", "issuers", index, "introspection", key)
                for issue in issues:
                    problems.append(
                        ConfigProblem(doc.file, _locate(doc.root, loc), _field_path(loc), issue.message, issue.hint)
                    )
                values[key] = value
                if secrets is not None and value and value != getattr(intro, key):
                    secrets.add(value)  # the substituted text: redacted by value in logs
            issuer = issuer.model_copy(update={"introspection": intro.model_copy(update=values)})
        issuers.append(issuer)
    return oauth.model_copy(update={"issuers": tuple(issuers)})


def _interpolate_cluster(
    cluster: ClusterConfig | None,
    doc: _Document,
    environ: Mapping[str, str],
    problems: list[ConfigProblem],
    secrets: set[str],
) -> ClusterConfig | None:
    """``cluster:`` with ``${VAR}`` expanded in ``store`` and ``replica_id``; every substituted
    value joins ``secrets`` (a store URL carries a password); problems name variables only."""
    if cluster is None:
        return None
    values: dict[str, Any] = {}
    for key in ("store", "replica_id"):
        template = getattr(cluster, key)
        if template is None:
            continue
        value, issues = _interpolate(template, environ)
        loc = ("cluster", key)
        for issue in issues:
            line = _locate(doc.root, loc)
            problems.append(ConfigProblem(doc.file, line, _field_path(loc), issue.message, issue.hint))
        if value != template:
            secrets.update(v for v in getattr(value, "values", (value,)) if v)
            values[key] = value
    store = values.get("store", cluster.store)
    if store != "memory" and urlsplit(store).scheme not in ("redis", "rediss", "unix"):
        problems.append(
            ConfigProblem(
                doc.file,
                _locate(doc.root, ("cluster", "store")),
                "cluster.store",
                "store must be memory or a redis://, rediss:// or unix:// URL (after interpolation)",
            )
        )
    return cluster.model_copy(update=values)


def _display_for(match: Path, main_abs_dir: Path, main_display: str) -> str:
    try:
        relative = match.relative_to(main_abs_dir)
    except ValueError:
        return str(match)
    return os.path.join(os.path.dirname(main_display), str(relative))


def _expand_includes(patterns: Sequence[str], main_abs: Path) -> list[Path]:
    found: set[str] = set()
    for pattern in patterns:
        for match in strict_glob(pattern):
            if os.path.isfile(match):
                found.add(os.path.abspath(match))
    found.discard(str(main_abs))
    return [Path(p) for p in sorted(found)]


# --------------------------------------------------------------------------------------------
# Entry points


def load_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    max_sources: int | None = None,
) -> LoadedConfig:
    """Read, validate and interpolate the config at ``path`` and its drop-ins.

    Raises :class:`ConfigError` listing every problem found, and
    :class:`~reconciler.freshness.InputsUnreadableError` when a file or directory could not be
    read for lack of resources (that says nothing about the config). ``environ`` defaults to
    ``os.environ``; ``max_sources`` to ``Bounds().sources`` (enforced across all files)."""
    env = os.environ if environ is None else environ
    secrets: set[str] = set()
    token = _TYPED_ENV.set(_TypedEnv(env, secrets))
    try:
        return _load(path, env, secrets, max_sources)
    finally:
        _TYPED_ENV.reset(token)


def _load(
    path: str | os.PathLike[str], env: Mapping[str, str], secrets: set[str], max_sources: int | None
) -> LoadedConfig:
    limit = Bounds().sources if max_sources is None else max_sources
    main_display = os.fspath(path)
    main_abs = Path(os.path.abspath(main_display))
    main_dir = main_abs.parent

    loaded = _read_document(main_abs, main_display)
    if isinstance(loaded, ConfigProblem):
        raise ConfigError([loaded], files=[main_abs])
    main_doc = loaded
    problems: list[ConfigProblem] = []
    if main_doc.root is None:
        raise ConfigError(
            [ConfigProblem(main_display, 1, "", "config file is empty", "write `sources: []` for none")],
            files=[main_abs],
        )
    problems.extend(_duplicate_key_problems(main_doc))
    data = main_doc.data
    raw_sources = data.get("sources") if isinstance(data, Mapping) else None
    # Sources are validated one by one so that one broken entry does not hide the problems
    # (duplicate names, unset variables) of the others.
    per_item = isinstance(raw_sources, list)
    main: _MainFile | None = None
    try:
        main = _MainFile.model_validate({**data, "sources": []} if per_item else data)
    except ValidationError as exc:
        problems.extend(_validation_problems(exc, main_doc, _MainFile, ()))
    declared: list[_Declared] = []
    if isinstance(raw_sources, list):
        for index, raw in enumerate(raw_sources):
            loc: tuple[int | str, ...] = ("sources", index)
            try:
                declared.append(_Declared(SourceConfig.model_validate(raw), main_doc, loc))
            except ValidationError as exc:
                problems.extend(_validation_problems(exc, main_doc, SourceConfig, loc))

    include_globs: list[str] | None
    if main is not None:
        include_globs = [os.path.normpath(os.path.join(main_dir, p)) for p in main.include]
    else:
        include_globs = _raw_includes(data, main_dir)
    drop_in_paths = _expand_includes(include_globs or [], main_abs)
    files = [main_abs, *drop_in_paths]

    for drop_in in drop_in_paths:
        doc_or_problem = _read_document(drop_in, _display_for(drop_in, main_dir, main_display))
        if isinstance(doc_or_problem, ConfigProblem):
            problems.append(doc_or_problem)
            continue
        doc = doc_or_problem
        if doc.root is None:
            problems.append(
                ConfigProblem(doc.file, 1, "", "drop-in file is empty", "a drop-in holds one source mapping")
            )
            continue
        problems.extend(_duplicate_key_problems(doc))
        try:
            declared.append(_Declared(SourceConfig.model_validate(doc.data), doc, ()))
        except ValidationError as exc:
            problems.extend(_validation_problems(exc, doc, SourceConfig, ()))

    first_seen: dict[str, _Declared] = {}
    for item in declared:
        name = item.source.name
        if name in first_seen:
            prior = first_seen[name]
            problems.append(
                ConfigProblem(
                    item.doc.file,
                    _locate(item.doc.root, (*item.loc, "name")),
                    _field_path((*item.loc, "name")),
                    f"duplicate source name {name!r}",
                    f"also declared at {prior.doc.file}:{_locate(prior.doc.root, (*prior.loc, 'name'))}",
                )
            )
        else:
            first_seen[name] = item

    if len(declared) > limit:
        extra = declared[limit]
        problems.append(
            ConfigProblem(
                extra.doc.file,
                _locate(extra.doc.root, extra.loc),
                _field_path(extra.loc),
                f"too many sources: {len(declared)} declared, the limit is {limit}",
                "remove sources or split them across gateways",
            )
        )

    metadata = main.gateway.metadata if main is not None else None
    specs = [_build_spec(item, env, problems, metadata, secrets) for item in declared]
    curation = _build_curation(declared, main, main_doc, problems)
    sessions = _build_sessions(main, main_doc, env, {item.source.name for item in declared}, problems, secrets)
    oauth = _interpolate_oauth(main.oauth, main_doc, env, problems, secrets) if main is not None else None
    cluster = _interpolate_cluster(main.cluster, main_doc, env, problems, secrets) if main is not None else None
    if problems or main is None or include_globs is None:
        # Report in reading order: main file first, then drop-ins, each top to bottom.
        rank = {main_display: 0} | {
            _display_for(f, main_dir, main_display): i for i, f in enumerate(drop_in_paths, start=1)
        }
        problems.sort(key=lambda p: (rank.get(p.file, len(rank)), p.line or 0))
        raise ConfigError(problems, files=files, include_globs=include_globs)
    return LoadedConfig(
        path=main_abs,
        settings=main.gateway,
        specs=tuple(spec for spec in specs if spec is not None),
        files=tuple(files),
        include_globs=tuple(include_globs),
        sessions=sessions,
        oauth=oauth,
        secret_values=frozenset(secrets),
        cluster=cluster,
        curation=curation,
        discovery=main.discovery.policy({v.name: v.discovery for v in main.views}),
    )


def _build_curation(
    declared: Sequence[_Declared], main: _MainFile | None, main_doc: _Document, problems: list[ConfigProblem]
) -> Curation:
    """The engine's curation, after the cross-checks (``curation_config.check_curation``)."""
    sources = [
        CuratedSource(
            name=item.source.name,
            renames={n: o.rename for n, o in item.source.overrides.items() if o.rename is not None},
            filters=filters_of(item.source),
            doc=item.doc,
            loc=item.loc,
        )
        for item in declared
    ]
    views = main.views if main is not None else ()
    raw = main_doc.data.get("sources") if isinstance(main_doc.data, Mapping) else None
    named = (
        [r["name"] for r in raw if isinstance(r, Mapping) and isinstance(r.get("name"), str)]
        if isinstance(raw, list)
        else []
    )
    for doc, loc, message, hint in check_curation(sources, views, main_doc, named):
        problems.append(ConfigProblem(doc.file, _locate(doc.root, loc), _field_path(loc), message, hint))
    return curation_of(sources, views)


def _build_sessions(
    main: _MainFile | None,
    doc: _Document,
    environ: Mapping[str, str],
    source_names: set[str],
    problems: list[ConfigProblem],
    secrets: set[str] | None = None,
) -> tuple[SessionSpec, ...]:
    """The declared sessions with their tokens interpolated, and the cross-checks a single entry
    cannot make: unique names and tokens, tokens long enough, sources that exist (also for
    ``gateway.anonymous``). Problems name fields and variables, never token values; the tokens
    join ``secrets`` (redacted by value in logs)."""
    if main is None:
        return ()

    def problem(loc: tuple[int | str, ...], message: str, hint: str | None = None) -> None:
        problems.append(ConfigProblem(doc.file, _locate(doc.root, loc), _field_path(loc), message, hint))

    def check_sources(names: Sequence[str], loc: tuple[int | str, ...]) -> None:
        for index, name in enumerate(names):
            if name not in source_names:
                close = difflib.get_close_matches(name, sorted(source_names), n=1, cutoff=0.6)
                problem((*loc, index), f"no source named {name!r}", f"did you mean {close[0]!r}?" if close else None)

    anonymous = main.gateway.anonymous
    if anonymous is not None:
        check_sources(anonymous.sources, ("gateway", "anonymous", "sources"))
    out: list[SessionSpec] = []
    first_name: dict[str, int] = {}
    first_token: dict[str, int] = {}
    for index, declared in enumerate(main.sessions):
        loc: tuple[int | str, ...] = ("sessions", index)
        if declared.name in first_name:
            problem((*loc, "name"), f"duplicate session name {declared.name!r}", "each session needs its own name")
        first_name.setdefault(declared.name, index)
        check_sources(declared.sources, (*loc, "sources"))
        if declared.view is not None and declared.view not in {v.name for v in main.views}:
            names = ", ".join(dict.fromkeys(v.name for v in main.views)) or "none"
            problem((*loc, "view"), f"no view named {declared.view!r}", f"declared views: {names}")
        token, issues = _interpolate(declared.token, environ)
        for issue in issues:
            problem((*loc, "token"), issue.message, issue.hint)
        if issues:
            continue
        if len(token) < MIN_TOKEN_CHARS:
            problem(
                (*loc, "token"),
                f"the token must be at least {MIN_TOKEN_CHARS} characters",
                "generate one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'",
            )
            continue
        if token in first_token:
            same = f"the same token as sessions[{first_token[token]}]"
            problem((*loc, "token"), same, "every session needs its own token")
            continue
        first_token[token] = index
        if secrets is not None:
            secrets.add(str(token))  # a literal token in the file is as secret as an interpolated one
        out.append(
            SessionSpec(
                name=declared.name,
                token=token,
                policy=declared.grant_policy,
                names=declared.names,
                sources=declared.sources,
                control_tools=declared.control_tools,
                view=declared.view,
                discovery=declared.discovery,
            )
        )
    return tuple(out)


def check_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    max_sources: int | None = None,
) -> list[ConfigProblem]:
    """Every problem :func:`load_config` would raise, or ``[]`` when the config is valid."""
    try:
        load_config(path, environ=environ, max_sources=max_sources)
    except ConfigError as exc:
        return exc.problems
    return []


def _duplicate_key_problems(doc: _Document) -> list[ConfigProblem]:
    return [
        ConfigProblem(
            doc.file,
            _line(repeated),
            dotted,
            "duplicate key",
            f"first set at line {_line(first)}; YAML would silently keep only the last",
        )
        for first, repeated, dotted in _duplicate_keys(doc.root)
    ]


def _raw_includes(data: Any, main_dir: Path) -> list[str] | None:
    """Include globs from an invalid main file, when they are readable on their own, so that
    the drop-ins keep being watched while the operator fixes the file."""
    if not isinstance(data, Mapping):
        return None
    raw = data.get("include")
    if raw is None:
        return []
    if isinstance(raw, list) and all(isinstance(p, str) and p for p in raw):
        return [os.path.normpath(os.path.join(main_dir, p)) for p in raw]
    return None
