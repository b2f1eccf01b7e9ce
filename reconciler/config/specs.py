"""Building the engine's values from validated models: ``SourceSpec`` (strings interpolated where
they are used, paths resolved against the declaring file), sessions, curation, and the
interpolated ``oauth`` / ``cluster`` sections."""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp_reconciler.reconciler.config.interpolation import InterpolatedStr, _interpolate
from mcp_reconciler.reconciler.config.problems import ConfigProblem
from mcp_reconciler.reconciler.config.schema import (
    MIN_TOKEN_CHARS,
    ClusterConfig,
    MetadataSettings,
    SourceConfig,
    TimeoutsConfig,
    _MainFile,
)
from mcp_reconciler.reconciler.config.yaml_lines import _Document, _field_path, _locate
from mcp_reconciler.reconciler.curation import Curation
from mcp_reconciler.reconciler.curation_config import (
    CuratedSource,
    check_curation,
    curation_of,
    filters_of,
)
from mcp_reconciler.reconciler.model import SessionSpec, SourceSpec
from mcp_reconciler.reconciler.oauth_config import OAuthConfig, UpstreamOAuthConfig

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
