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

The package, one concept per module: ``schema`` (the pydantic models: every key and its
description), ``yaml_lines`` (YAML with line tracking, validation errors as ``file:line``
problems), ``interpolation`` (``${VAR}``), ``includes`` (drop-in globs), ``specs`` (building
the engine's values), ``problems`` (``ConfigProblem``/``ConfigError``) and ``loader``
(``load_config``/``check_config``). Import the public names from here.

Nothing here imports an HTTP framework.
"""

from __future__ import annotations

from mcp_reconciler.reconciler.config.interpolation import InterpolatedStr, display_transport
from mcp_reconciler.reconciler.config.loader import LoadedConfig, check_config, load_config
from mcp_reconciler.reconciler.config.problems import ConfigError, ConfigProblem
from mcp_reconciler.reconciler.config.schema import (
    MIN_TOKEN_CHARS,
    RESERVED_SOURCE_NAMES,
    AnonymousSettings,
    AuditConfig,
    BudgetsConfig,
    ClusterConfig,
    GatewaySettings,
    HttpTransportConfig,
    LimitsConfig,
    MetadataSettings,
    OverrideConfig,
    RootConfig,
    SessionConfig,
    SourceConfig,
    SseTransportConfig,
    StdioTransportConfig,
    TelemetryConfig,
    TimeoutsConfig,
)
from mcp_reconciler.reconciler.oauth_config import OAuthConfig, UpstreamOAuthConfig

__all__ = [
    "MIN_TOKEN_CHARS",
    "RESERVED_SOURCE_NAMES",
    "AnonymousSettings",
    "AuditConfig",
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
    "RootConfig",
    "SessionConfig",
    "SourceConfig",
    "SseTransportConfig",
    "StdioTransportConfig",
    "TelemetryConfig",
    "TimeoutsConfig",
    "UpstreamOAuthConfig",
    "check_config",
    "display_transport",
    "load_config",
]
