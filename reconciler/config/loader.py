"""The entry points: :func:`load_config` (one valid reading of the main file and its drop-ins, or
every problem found) and :func:`check_config`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from mcp_reconciler.reconciler.approvals import DEFAULT_POLICY as NO_APPROVALS
from mcp_reconciler.reconciler.approvals import ApprovalPolicy
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.config.includes import _display_for, _expand_includes, _raw_includes
from mcp_reconciler.reconciler.config.interpolation import _TYPED_ENV, _TypedEnv
from mcp_reconciler.reconciler.config.problems import ConfigError, ConfigProblem
from mcp_reconciler.reconciler.config.schema import (
    ClusterConfig,
    GatewaySettings,
    SourceConfig,
    TelemetryConfig,
    _MainFile,
)
from mcp_reconciler.reconciler.config.specs import (
    _build_curation,
    _build_sessions,
    _build_spec,
    _Declared,
    _interpolate_cluster,
    _interpolate_oauth,
)
from mcp_reconciler.reconciler.config.yaml_lines import (
    _duplicate_key_problems,
    _field_path,
    _locate,
    _read_document,
    _validation_problems,
)
from mcp_reconciler.reconciler.curation import NO_CURATION, Curation
from mcp_reconciler.reconciler.discovery import DEFAULT_POLICY, DiscoveryPolicy
from mcp_reconciler.reconciler.model import SessionSpec, SourceSpec
from mcp_reconciler.reconciler.oauth_config import OAuthConfig
from mcp_reconciler.reconciler.rate_limits import NO_LIMITS, LimitPolicy

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
    #: Which tools need an approval, and the parked-call bounds (ADR 0034).
    approvals: ApprovalPolicy = NO_APPROVALS
    #: Rate and concurrency limits (ADR 0033).
    limits: LimitPolicy = NO_LIMITS
    #: Metrics, OTLP export and the audit trail (ADR 0031).
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)


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
        approvals=main.approvals.policy(),
        limits=main.rate_limits.policy(),
        telemetry=main.telemetry,
    )


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
