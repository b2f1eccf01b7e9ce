"""``mcp-reconciler import FILE``: a desktop MCP client's server list as gateway sources (issue 28).

Reads a Claude Desktop (``claude_desktop_config.json``: ``mcpServers``), Cursor (``mcp.json``:
``mcpServers``) or VS Code (``.vscode/mcp.json``: ``servers``, or ``settings.json``: ``mcp.servers``)
file — JSON with comments and trailing commas, as those editors write it — and prints the
gateway's ``sources:`` YAML, or writes it with ``--output``.

- A ``command`` entry becomes a ``stdio`` source (``args``, ``env``, ``cwd``); a ``url`` entry an
  ``http`` source (``sse`` when its ``type`` says so) with its ``headers``.
- Anything that looks like a secret — an env or header value under a key naming a token, key,
  secret, password or authorization, or a value shaped like a credential (``ghp_…``, ``sk-…``,
  ``Bearer …``, a long random string) — becomes ``${VAR}``; VS Code's ``${input:x}`` and
  ``${env:X}`` become ``${X}``. The variables to export are listed in the YAML's header comment.
  The secret values themselves are never printed.
- Server names become valid source names (``A-Z a-z 0-9 _ . -``, at most 64, unique).

The result is a config ``check-config`` accepts once the listed variables are set."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: A desktop config larger than this is not one (bounded read).
MAX_BYTES = 1 << 20

_SECRET_KEY = re.compile(
    r"(?i)(token|secret|passw|api[_-]?key|apikey|auth|credential|private[_-]?key|\bpat\b|_pat$|cookie|session)"
)
_SECRET_SHAPE = re.compile(
    r"^(gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[\w-]{10,}|glpat-[\w-]{16,}"
    r"|AKIA[0-9A-Z]{16}|AIza[\w-]{30,}|ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)$"
)
_VSCODE_VAR = re.compile(r"\$\{(input|env):([^}]+)\}")
_PLAIN_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RESERVED = frozenset({"all", "config"})


class ImportError_(ValueError):
    """The file is not a desktop MCP config this command understands; the message says why."""


@dataclass
class Imported:
    """The sources built, the variables they need (name → where it came from), and notes."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def strip_jsonc(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments (outside strings) and trailing commas."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _var_name(*parts: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", "_".join(p for p in parts if p)).strip("_").upper()
    return name if name and not name[0].isdigit() else f"V_{name}"


def looks_secret(key: str, value: str) -> bool:
    """Whether an env or header ``value`` under ``key`` should come from the environment."""
    if not value or "${" in value:
        return False
    if _SECRET_KEY.search(key) or value.lower().startswith(("bearer ", "basic ", "token ")):
        return True
    if _SECRET_SHAPE.match(value):
        return True
    # A long random-looking string: letters and digits mixed, no spaces or path separators.
    return (
        len(value) >= 24
        and not re.search(r"[\s/\\:]", value)
        and bool(re.search(r"[A-Za-z]", value))
        and bool(re.search(r"[0-9]", value))
    )


class _Builder:
    def __init__(self) -> None:
        self.out = Imported()

    def template(self, value: str, *, var: str, origin: str, secret: bool) -> str:
        """``value`` with VS Code references turned into ``${VAR}``; the whole value (or a
        header's credential after its scheme) as ``${var}`` when it is secret."""

        def vscode(m: re.Match[str]) -> str:
            name = _var_name(m.group(2))
            self.out.variables.setdefault(name, f"{origin} (VS Code ${{{m.group(1)}:{m.group(2)}}})")
            return "${" + name + "}"

        if _VSCODE_VAR.search(value):
            return _VSCODE_VAR.sub(vscode, value)
        if not secret:
            refs = _PLAIN_VAR.findall(value)
            for ref in refs:  # already ${VAR}: the gateway will read it from its environment
                self.out.variables.setdefault(ref, origin)
            return value if refs or "${" not in value else value.replace("${", "$${")
        self.out.variables.setdefault(var, origin)
        scheme = re.match(r"(?i)(bearer|basic|token)\s+", value)
        return (scheme.group(0) if scheme else "") + "${" + var + "}"

    def source(self, raw_name: str, entry: Mapping[str, Any], taken: set[str]) -> None:
        name = _source_name(raw_name, taken)
        if name != raw_name:
            self.out.notes.append(f"server {raw_name!r} is source {name!r} (source names are A-Z a-z 0-9 _ . -)")
        kind = str(entry.get("type", "") or "").lower()
        if entry.get("disabled") is True:
            self.out.notes.append(f"server {raw_name!r} is disabled there; imported anyway (remove it if unwanted)")
        if "command" in entry and kind not in ("http", "sse", "streamable-http", "streamablehttp"):
            stdio: dict[str, Any] = {"command": str(entry["command"])}
            args = entry.get("args") or []
            if not isinstance(args, list):
                raise ImportError_(f"server {raw_name!r}: args must be a list")
            if args:
                stdio["args"] = [
                    self.template(str(a), var=_var_name(name, "arg", str(i)), origin=f"{name} arg {i}", secret=False)
                    for i, a in enumerate(args)
                ]
            env = entry.get("env") or {}
            if env:
                stdio["env"] = {
                    str(k): self.template(
                        str(v), var=_var_name(str(k)), origin=f"{name} env {k}", secret=looks_secret(str(k), str(v))
                    )
                    for k, v in env.items()
                }
            if entry.get("cwd"):
                stdio["cwd"] = str(entry["cwd"])
            if entry.get("envFile"):
                self.out.notes.append(f"server {raw_name!r}: envFile is not imported; set those variables in env")
            self.out.sources.append({"name": name, "stdio": stdio})
        elif "url" in entry or "serverUrl" in entry:
            url = str(entry.get("url") or entry.get("serverUrl"))
            transport = "sse" if kind == "sse" or (not kind and url.rstrip("/").endswith("/sse")) else "http"
            remote: dict[str, Any] = {
                "url": self.template(url, var=_var_name(name, "url"), origin=f"{name} url", secret=False)
            }
            headers = entry.get("headers") or {}
            if headers:
                remote["headers"] = {
                    str(k): self.template(
                        str(v),
                        var=_var_name(name, "token" if str(k).lower() == "authorization" else str(k)),
                        origin=f"{name} header {k}",
                        secret=looks_secret(str(k), str(v)),
                    )
                    for k, v in headers.items()
                }
            self.out.sources.append({"name": name, transport: remote})
        else:
            raise ImportError_(f"server {raw_name!r} has neither a command nor a url")


def _source_name(raw: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-")[:64] or "server"
    if name in _RESERVED:
        name = f"{name}-server"
    base, n = name, 2
    while name in taken:
        suffix = f"-{n}"
        name = base[: 64 - len(suffix)] + suffix
        n += 1
    taken.add(name)
    return name


def servers_of(data: Any) -> Mapping[str, Any]:
    """The server table of a Claude Desktop / Cursor (``mcpServers``) or VS Code (``servers``,
    or ``mcp.servers`` in settings.json) document."""
    if not isinstance(data, Mapping):
        raise ImportError_("the file is not a JSON object")
    for table in (data.get("mcpServers"), data.get("servers"), (data.get("mcp") or {}).get("servers")):
        if isinstance(table, Mapping):
            return table
    raise ImportError_("no mcpServers (Claude Desktop, Cursor) or servers (VS Code) table found")


def import_servers(data: Any) -> Imported:
    """Build gateway sources from a parsed desktop config."""
    builder = _Builder()
    taken: set[str] = set()
    for raw_name, entry in servers_of(data).items():
        if not isinstance(entry, Mapping):
            raise ImportError_(f"server {raw_name!r} is not an object")
        builder.source(str(raw_name), entry, taken)
    return builder.out


def render(imported: Imported, origin: str) -> str:
    """The YAML document: a header naming the variables to export, then ``sources:``."""
    lines = [f"# Imported from {origin} by `mcp-reconciler import`."]
    if imported.variables:
        lines.append("# Set these in the gateway's environment before serving (values were not copied):")
        lines.extend(f"#   {name}  ({why})" for name, why in sorted(imported.variables.items()))
    lines.extend(f"# note: {note}" for note in imported.notes)
    body = yaml.safe_dump({"sources": imported.sources}, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(lines) + "\n" + body


def load(path: Path) -> Any:
    """The parsed (JSON with comments) document at ``path``, bounded."""
    with path.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ImportError_(f"{path} is larger than {MAX_BYTES} bytes; not a desktop MCP config")
    try:
        return json.loads(strip_jsonc(raw.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ImportError_(f"{path} is not JSON{where}") from None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``import`` on the CLI's subparsers."""
    p = sub.add_parser("import", help="turn a Claude Desktop / VS Code / Cursor MCP config into gateway sources (YAML)")
    p.add_argument("file", help="claude_desktop_config.json, .vscode/mcp.json, ~/.cursor/mcp.json ...")
    p.add_argument("-o", "--output", help="write the YAML here instead of printing it")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 done · 1 the file cannot be imported (or --output exists) · 2 usage."""
    path = Path(args.file)
    try:
        rendered = render(import_servers(load(path)), path.name)
    except FileNotFoundError:
        print(f"mcp-reconciler import: {path}: file not found", file=sys.stderr)
        return 1
    except ImportError_ as exc:
        print(f"mcp-reconciler import: {exc}", file=sys.stderr)
        return 1
    if not args.output:
        sys.stdout.write(rendered)
        return 0
    out = Path(args.output)
    if out.exists() and not args.force:
        print(f"mcp-reconciler import: {out} exists; pass --force to overwrite it", file=sys.stderr)
        return 1
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(rendered)
    os.replace(tmp, out)  # atomic: a watching gateway never reads half of it
    print(f"wrote {len(rendered.splitlines())} lines to {out}", file=sys.stderr)
    return 0
