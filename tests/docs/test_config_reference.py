"""The config reference (issue 28): ``docs/config.schema.json`` and ``docs/config.md`` are what
the config models generate now, every key has a description, and the configs we ship validate
against the schema the README tells editors to use."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mcp_reconciler.reconciler import config_reference as ref
from mcp_reconciler.reconciler.config import ConfigError, load_config
from tests.support.readme import README, REPO_ROOT, block

DOCS = REPO_ROOT / "docs"
SCHEMA_PATH = DOCS / ref.SCHEMA_FILE
MARKDOWN_PATH = DOCS / ref.MARKDOWN_FILE
_SCHEMA_LINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(instance: Any, validator: jsonschema.Draft202012Validator | None = None) -> list[str]:
    return [e.message for e in (validator or _validator()).iter_errors(instance)]


@pytest.mark.parametrize("path", [SCHEMA_PATH, MARKDOWN_PATH], ids=lambda p: p.name)
def test_committed_reference_is_current(path: Path) -> None:
    render = ref.render_schema if path == SCHEMA_PATH else ref.render_markdown
    assert path.exists(), f"{path.relative_to(REPO_ROOT)} is missing: run `{ref.REGENERATE}`"
    assert path.read_text(encoding="utf-8") == render(), (
        f"{path.relative_to(REPO_ROOT)} is not what the config models generate: run `{ref.REGENERATE}` "
        "and commit the result"
    )


def test_generator_command_writes_both_files(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_reconciler.reconciler.config_reference", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ref.SCHEMA_FILE).read_text(encoding="utf-8") == SCHEMA_PATH.read_text(encoding="utf-8")
    assert (tmp_path / ref.MARKDOWN_FILE).read_text(encoding="utf-8") == MARKDOWN_PATH.read_text(encoding="utf-8")
    recipe = subprocess.run(["make", "-n", "config-reference"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert recipe.returncode == 0 and "mcp_reconciler.reconciler.config_reference" in recipe.stdout, recipe.stderr


def test_every_key_has_a_description() -> None:
    missing = ref.undescribed_keys()
    assert not missing, f"add Field(description=...) to: {', '.join(missing)} (then run `{ref.REGENERATE}`)"
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    for name, definition in [("(main file)", schema), *schema["$defs"].items()]:
        for key, prop in definition.get("properties", {}).items():
            assert prop.get("description", "").strip(), f"{name}.{key} has no description in the schema"


def test_every_model_and_key_is_in_the_reference_page() -> None:
    text = MARKDOWN_PATH.read_text(encoding="utf-8")
    sections = ref.model_sections()
    assert len(sections) >= 20  # the walk reaches the nested models (oauth, limits, filters, ...)
    for model, paths in sections:
        assert f'<a id="{model.__name__.lower().lstrip("_")}"></a>' in text, model.__name__
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in text, f"{paths[0]}.{name}"
    for setting in ("CONFIG", "HOST", "PORT", "LOG_LEVEL", "LOG_FORMAT"):
        assert f"`MCP_RECONCILER_{setting}`" in text
    assert "`$${`" in text and "## `${VAR}` interpolation" in text


def test_key_without_description_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a key whose description is removed is named."""
    from mcp_reconciler.reconciler.config import TimeoutsConfig

    field = TimeoutsConfig.model_fields["call_s"]
    monkeypatch.setattr(field, "description", None)
    assert ref.undescribed_keys() == ["TimeoutsConfig.call_s"]
    assert ref.main(["--out", "/nonexistent/never-written"]) == 1


def test_shipped_configs_validate_against_the_schema() -> None:
    validator = _validator()
    for path in (REPO_ROOT / "examples" / "demo" / "gateway.yaml", REPO_ROOT / "examples" / "cluster" / "gateway.yaml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert _errors(data, validator) == [], path
    # A drop-in holds one source mapping: the schema's SourceConfig.
    source_schema = {"$ref": "#/$defs/SourceConfig", "$defs": validator.schema["$defs"]}
    for drop_in in sorted((REPO_ROOT / "examples" / "demo" / "sources.d").glob("*.yaml")):
        data = yaml.safe_load(drop_in.read_text(encoding="utf-8"))
        assert list(jsonschema.Draft202012Validator(source_schema).iter_errors(data)) == [], drop_in


def test_schema_refuses_what_the_loader_refuses_and_accepts_env_numbers(tmp_path: Path) -> None:
    validator = _validator()
    assert _errors({"gateway": {"port": "${GW_PORT}", "expose_control_tools": "${CTL}"}}, validator) == []
    assert _errors({"gateway": {"port": 8765, "cooldown_s": 0.5}, "sources": []}, validator) == []
    bad = {"gateway": {"prot": 8765}}
    assert any("prot" in m for m in _errors(bad, validator))
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError):
        load_config(cfg)
    assert _errors({"gateway": {"port": "eighty"}}, validator)
    assert _errors({"sources": [{"name": "x", "stdio": {"command": "python"}, "trust": "maybe"}]}, validator)
    assert _errors({"sources": [{"stdio": {"command": "python"}}]}, validator)  # name is required


def test_readme_schema_line_points_at_the_schema(tmp_path: Path) -> None:
    """The README's editor line, as the demo config's first line, names docs/config.schema.json."""
    text = block("schema-line").text
    first = text.splitlines()[0]
    m = _SCHEMA_LINE.match(first)
    assert m, first
    demo = REPO_ROOT / "examples" / "demo" / "gateway.yaml"
    assert demo.read_text(encoding="utf-8").splitlines()[0] == first
    assert (demo.parent / m.group(1)).resolve() == SCHEMA_PATH.resolve()
    assert _errors(yaml.safe_load(text)) == []
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(text)
    assert load_config(cfg).settings.port == 8765
    readme = README.read_text(encoding="utf-8")
    assert "](docs/config.md)" in readme and "](docs/config.schema.json)" in readme
