"""YAML with line tracking: documents parsed with their nodes, so every problem (pydantic's
validation errors, duplicate keys) names the file and line of the key it is about."""

from __future__ import annotations

import contextlib
import difflib
import re
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from mcp_reconciler.reconciler.config.problems import ConfigProblem
from mcp_reconciler.reconciler.config.schema import SourceConfig
from mcp_reconciler.reconciler.freshness import raise_if_exhausted

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
