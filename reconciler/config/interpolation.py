"""``${VAR}`` interpolation: :class:`InterpolatedStr` (``repr`` shows the template, never the
value), the expansion itself (issues name variables, never values), and the typed interpolation
of number and boolean keys during validation."""

from __future__ import annotations

import contextvars
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Order matters: "$${" (escape) must win over "${" at the same position.
_VAR_TOKEN = re.compile(r"\$\$\{|\$\{(?P<name>[^}]*)\}|\$\{")


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
