"""The config reference, generated from the config models (issue 28): ``docs/config.schema.json``
(a JSON Schema editors use through ``# yaml-language-server: $schema=...``) and ``docs/config.md``
(every key with its type, default and description, the environment settings and the ``${VAR}``
rules). Both are written by ``make config-reference``
(``python -m mcp_reconciler.reconciler.config_reference``); ``tests/docs/test_config_reference.py``
fails when the committed files differ from what the models generate now, or when a key has no
description.

The models are the one source of truth: a key added without ``Field(description=...)`` fails the
test, so the reference cannot fall behind the code.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mcp_reconciler.reconciler.config.interpolation import _numeric_or_bool
from mcp_reconciler.reconciler.config.schema import _MainFile

__all__ = [
    "ROOT_MODEL",
    "SCHEMA_ID",
    "main",
    "model_sections",
    "render_markdown",
    "render_schema",
    "undescribed_keys",
]

#: The top-level model: what one main config file holds.
ROOT_MODEL: type[BaseModel] = _MainFile
SCHEMA_ID = "urn:mcp-reconciler:config.schema.json"
SCHEMA_FILE = "config.schema.json"
MARKDOWN_FILE = "config.md"
REGENERATE = "make config-reference"
#: A string standing for a number or boolean: expanded from the environment before validation.
_ENV_STRING = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"}


# --------------------------------------------------------------------------------------------
# Walking the models


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(annotation, False)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _nested_models(arg)


def _key_suffix(annotation: Any) -> str:
    """How a nested model's path continues: ``[]`` in a list, ``.<name>`` in a mapping."""
    inner, _ = _unwrap_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is tuple:
        return "[]"
    if origin is dict:
        return ".<name>"
    return ""


def model_sections() -> list[tuple[type[BaseModel], list[str]]]:
    """Every model reachable from :data:`ROOT_MODEL`, in document order (depth first), with the
    key paths it appears at (``sources[].stdio``, ...); the root's path is ``""``."""
    order: list[type[BaseModel]] = []
    paths: dict[type[BaseModel], list[str]] = {}

    def visit(model: type[BaseModel], path: str) -> None:
        if model in paths:
            paths[model].append(path)
            return
        paths[model] = [path]
        order.append(model)
        for name, info in model.model_fields.items():
            key = info.alias or name
            for nested in _nested_models(info.annotation):
                visit(nested, f"{path}.{key}{_key_suffix(info.annotation)}".lstrip("."))

    visit(ROOT_MODEL, "")
    return [(m, paths[m]) for m in order]


def undescribed_keys() -> list[str]:
    """Keys (``Model.key``) without a description: each must say what it does."""
    return [
        f"{model.__name__}.{info.alias or name}"
        for model, _paths in model_sections()
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]


# --------------------------------------------------------------------------------------------
# JSON Schema


def render_schema() -> str:
    """``docs/config.schema.json``: the validation schema of a main config file."""
    schema = ROOT_MODEL.model_json_schema(mode="validation")
    by_title = {model.__name__: model for model, _ in model_sections()}
    for name, definition in [(ROOT_MODEL.__name__, schema), *schema.get("$defs", {}).items()]:
        model = by_title.get(name)
        if model is not None:
            _adjust_properties(model, definition)
    schema.pop("title", None)
    schema.pop("description", None)
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mcp-reconciler gateway config",
        "description": (
            "The main config file of mcp-reconciler (a drop-in named by `include` holds one source "
            f"mapping, #/$defs/SourceConfig). Generated from the config models by `{REGENERATE}`; "
            "reference: docs/config.md."
        ),
        **schema,
    }
    return json.dumps(out, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _adjust_properties(model: type[BaseModel], definition: dict[str, Any]) -> None:
    """Drop pydantic's generated property titles ("Connect S"), and let a number or boolean key
    be a ``${VAR}`` string, as the loader allows (``port: ${GW_PORT}``)."""
    for name, info in model.model_fields.items():
        prop = definition.get("properties", {}).get(info.alias or name)
        if prop is None:
            continue
        prop.pop("title", None)
        if _numeric_or_bool(info.annotation):
            meta = {k: prop.pop(k) for k in ("description", "default") if k in prop}
            alternatives = prop.pop("anyOf") if "anyOf" in prop else [dict(prop)]
            prop.clear()
            prop["anyOf"] = [*alternatives, dict(_ENV_STRING)]
            prop.update(meta)


# --------------------------------------------------------------------------------------------
# Markdown


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower().lstrip("_")


def _type_text(annotation: Any) -> str:
    inner, optional = _unwrap_optional(annotation)
    text = _plain_type(inner)
    return f"{text} or null" if optional else text


def _plain_type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return " | ".join(f'`"{v}"`' for v in typing.get_args(annotation))
    if origin is tuple:
        return f"list of {_plain_type(typing.get_args(annotation)[0])}"
    if origin is dict:
        return f"mapping of string to {_plain_type(typing.get_args(annotation)[1])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_plain_type(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _constraints(info: FieldInfo) -> str:
    parts: list[str] = []
    for m in info.metadata:
        if isinstance(m, annotated_types.Ge):
            parts.append(f">= {m.ge}")
        elif isinstance(m, annotated_types.Gt):
            parts.append(f"> {m.gt}")
        elif isinstance(m, annotated_types.Le):
            parts.append(f"<= {m.le}")
        elif isinstance(m, annotated_types.Lt):
            parts.append(f"< {m.lt}")
        elif isinstance(m, annotated_types.MinLen):
            parts.append(f"length >= {m.min_length}")
        elif isinstance(m, annotated_types.MaxLen):
            parts.append(f"length <= {m.max_length}")
    return ", ".join(parts)


def _default_text(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "**required**"
    value = info.default if info.default_factory is None else info.default_factory()  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _doc(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    # Sphinx roles and double backticks read badly in markdown.
    for role in (":class:", ":func:", ":data:"):
        doc = doc.replace(role, "")
    return " ".join(doc.replace("``", "`").split())


def render_markdown() -> str:
    """``docs/config.md``: the readable reference."""
    out: list[str] = [_PREAMBLE.format(regenerate=REGENERATE, schema_id=SCHEMA_ID)]
    for model, paths in model_sections():
        title = "The main file" if paths == [""] else f"`{paths[0]}` ({model.__name__})"
        out.append(f'<a id="{_anchor(model)}"></a>\n\n### {title}\n')
        if len(paths) > 1:
            out.append("Also at " + ", ".join(f"`{p}`" for p in paths[1:]) + ".\n")
        doc = _doc(model)
        if doc and model is not ROOT_MODEL:
            out.append(doc + "\n")
        out.append("| Key | Type | Default | Description |\n|---|---|---|---|")
        for name, info in model.model_fields.items():
            typ = _type_text(info.annotation)
            bounds = _constraints(info)
            if bounds:
                typ += f" ({bounds})"
            if _numeric_or_bool(info.annotation):
                typ += " or `${VAR}`"
            out.append(
                f"| `{info.alias or name}` | {_cell(typ)} | {_cell(_default_text(info))} "
                f"| {_cell(info.description or '')} |"
            )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


_PREAMBLE = """\
# Config reference

<!-- Generated from the config models by `{regenerate}`; do not edit by hand.
     tests/docs/test_config_reference.py fails when this file is not current. -->

The gateway reads one YAML file (`--config`, `MCP_RECONCILER_CONFIG`, or the bundled demo
config) and the drop-in files its `include` globs name. Every key is listed below with its
type, default and meaning; unknown keys are errors, reported as `file:line: key: message`.
`mcp-reconciler check-config FILE` validates a file without serving it.

## Editor support

[`config.schema.json`](config.schema.json) is the JSON Schema of the main file (`$id`
`{schema_id}`). Editors using the YAML language server (VS Code's YAML extension,
Neovim, Helix, ...) validate and complete a config whose first line names it:

```yaml
# yaml-language-server: $schema=../../docs/config.schema.json
sources: []
```

The path is relative to the config file (this one is `examples/demo/gateway.yaml`'s) or a URL
of your copy of the schema. A drop-in holds one source mapping: the keys of
[`sources[]`](#sourceconfig).

## Environment settings

The gateway reads five settings from the environment. Flags win over the environment, the
environment over the config file (whose `gateway` host and port apply only when both are unset).

| Variable | Flag | Meaning |
|---|---|---|
| `MCP_RECONCILER_CONFIG` | `--config`; `check-config FILE` | The config file (see below). |
| `MCP_RECONCILER_HOST` | `serve --host` | Listen address, over the file's `gateway.host` (default `127.0.0.1`). |
| `MCP_RECONCILER_PORT` | `serve --port` | Listen port (0-65535), over the file's `gateway.port` (default `8765`). |
| `MCP_RECONCILER_LOG_LEVEL` | `--log-level` | Operator log level: `DEBUG` ... `CRITICAL` (default `WARNING`). |
| `MCP_RECONCILER_LOG_FORMAT` | `--log-format` | Operator log format: `text` (default) or `json`. |

`MCP_RECONCILER_CONFIG` stands for `--config` of `serve`, `stdio` and `reconcile` and for
`check-config`'s `FILE`. Without either, `serve` and `stdio` use the bundled demo config;
`reconcile` and `check-config` need one. A bad value is a usage error naming the variable
(exit 2).

Credentials never come from the file: `MCP_RECONCILER_OPERATOR_TOKENS` and
`MCP_RECONCILER_OWNER_TOKENS` (comma-separated) are the control API's bearer tokens.

## `${{VAR}}` interpolation

- `${{VAR}}` is replaced by the environment variable `VAR` (letters, digits and `_`, not starting
  with a digit). `$${{` is a literal `${{`.
- It works in string values that reach an upstream or a store: `stdio` `command`, `args`, `cwd`
  and `env` values; `http` / `sse` `url` and `headers` values; their `oauth` `token_url`,
  `client_id`, `client_secret` and `resource`; `oauth.issuers[].introspection` `client_id` and
  `client_secret`; `sessions[].token`; `cluster.store` and `cluster.replica_id`.
- It works in every number and boolean key too (`gateway: {{port: ${{GW_PORT}}}}`, a timeout,
  `expose_control_tools`): the value is expanded, then validated as the key's type; a value that
  is not a number says so without quoting it. A bare `${{VAR}}` may stand inside a flow mapping.
- An unset variable, an unterminated `${{` or an invalid name is an error naming the file, line,
  key and variable. An invalid edit keeps the last good config serving (status `state: error`).
- Substituted values are secrets: they never appear in errors, `repr`, status or `/v1`, and
  are redacted from logs (raw or URL-encoded).

## Keys
"""


# --------------------------------------------------------------------------------------------
# Command line


def _default_docs_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "docs"


def main(argv: list[str] | None = None) -> int:
    """Write both files (``--out``: another directory); 1 if a key lacks a description."""
    parser = argparse.ArgumentParser(
        prog="python -m mcp_reconciler.reconciler.config_reference",
        description="Write docs/config.schema.json and docs/config.md from the config models.",
    )
    parser.add_argument("--out", type=Path, default=None, help="directory to write to (default: the repo's docs/)")
    args = parser.parse_args(argv)
    missing = undescribed_keys()
    if missing:
        print("keys without a description (add Field(description=...)): " + ", ".join(missing), file=sys.stderr)
        return 1
    out_dir: Path = args.out or _default_docs_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SCHEMA_FILE).write_text(render_schema(), encoding="utf-8")
    (out_dir / MARKDOWN_FILE).write_text(render_markdown(), encoding="utf-8")
    print(f"wrote {out_dir / SCHEMA_FILE} and {out_dir / MARKDOWN_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
