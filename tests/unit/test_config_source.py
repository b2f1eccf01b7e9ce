"""reconciler.config_source: the config file as a DesiredStateSource in watch mode (I11)."""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import mcp_reconciler.reconciler.config
import mcp_reconciler.reconciler.config_source as config_source
from mcp_reconciler.reconciler.config import ConfigError, LoadedConfig
from mcp_reconciler.reconciler.config_source import CONFIG_KEY, ConfigDesiredState
from mcp_reconciler.reconciler.desired import DesiredStateSource

OLD_NS = 1_600_000_000 * 10**9
SECRET = "tok-7d1c0ffee"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    """Deterministic mtimes: every write gets a distinct, old (never racy) timestamp."""

    def __init__(self) -> None:
        self.ns = OLD_NS

    def write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.ns += 1_000_000_000
        os.utime(path, ns=(self.ns, self.ns))
        return path


GOOD = """\
sources:
  - name: notes
    stdio: {command: python, args: [-m, notes_server], env: {TOKEN: "${TOKEN}"}}
    watch: ["data/*.yml"]
  - name: search
    http: {url: "http://127.0.0.1:9000/mcp"}
include: ["sources.d/*.yaml"]
"""


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def setup(tmp_path: Path, clock: Clock) -> Path:
    cfg = clock.write(tmp_path / "gateway.yaml", GOOD)
    clock.write(tmp_path / "sources.d" / "extra.yaml", "name: extra\nsse: {url: 'http://127.0.0.1:9001/sse'}\n")
    clock.write(tmp_path / "data" / "a.yml", "a: 1\n")
    return cfg


def source(cfg: Path, environ: Mapping[str, str] | None = None) -> ConfigDesiredState:
    return ConfigDesiredState(cfg, environ={"TOKEN": SECRET} if environ is None else environ)


def test_implements_the_desired_state_source_protocol(setup: Path) -> None:
    src: DesiredStateSource = source(setup)
    assert callable(src.load)


@pytest.mark.anyio
async def test_load_returns_specs_with_provenance(setup: Path, tmp_path: Path) -> None:
    src = source(setup)
    state = await src.load()
    assert [s.name for s in state.specs] == ["notes", "search", "extra"]
    assert state.reload_mode == "watch"
    assert state.config_error is None
    assert state.tracked_files == 3  # gateway.yaml, extra.yaml, data/a.yml
    assert set(state.inputs_digest) == {"notes"}
    assert state.warnings == ()
    assert state.specs[0].transport["env"]["TOKEN"] == SECRET
    assert src.last_good is not None and src.settings is not None and src.config_error is None


@pytest.mark.anyio
async def test_poll_before_first_load_reports_config(setup: Path) -> None:
    assert await source(setup).poll() == {CONFIG_KEY}


@pytest.mark.anyio
async def test_poll_is_empty_when_nothing_changed(setup: Path) -> None:
    src = source(setup)
    await src.load()
    assert await src.poll() == set()
    assert await src.changed() is False


@pytest.mark.anyio
async def test_poll_reports_config_for_main_file_and_drop_in_changes(setup: Path, tmp_path: Path, clock: Clock) -> None:
    src = source(setup)
    await src.load()

    clock.write(setup, GOOD + "# touched\n")
    assert await src.poll() == {CONFIG_KEY}
    assert await src.changed() is True
    await src.load()
    assert await src.poll() == set()

    clock.write(tmp_path / "sources.d" / "new.yaml", "name: new\nsse: {url: 'http://h/sse'}\n")
    assert await src.poll() == {CONFIG_KEY}
    state = await src.load()
    assert [s.name for s in state.specs] == ["notes", "search", "extra", "new"]
    assert await src.poll() == set()

    (tmp_path / "sources.d" / "extra.yaml").unlink()
    assert await src.poll() == {CONFIG_KEY}
    state = await src.load()
    assert [s.name for s in state.specs] == ["notes", "search", "new"]


@pytest.mark.anyio
async def test_poll_names_the_source_whose_watched_inputs_changed(setup: Path, tmp_path: Path, clock: Clock) -> None:
    src = source(setup)
    first = await src.load()

    clock.write(tmp_path / "data" / "a.yml", "a: 2\n")
    assert await src.poll() == {"notes"}
    second = await src.load()
    assert second.inputs_digest["notes"] != first.inputs_digest["notes"]
    # The spec did not change; only the inputs digest, which is what respawns the source.
    assert second.specs == first.specs
    assert await src.poll() == set()

    clock.write(tmp_path / "data" / "b.yml", "b: 1\n")  # a new glob match
    assert await src.poll() == {"notes"}
    await src.load()
    (tmp_path / "data" / "a.yml").unlink()
    assert await src.poll() == {"notes"}


@pytest.mark.anyio
async def test_I11_absent_and_zero_match_inputs_are_warnings(tmp_path: Path, clock: Clock) -> None:
    cfg = clock.write(
        tmp_path / "g.yaml",
        "sources: [{name: a, sse: {url: 'http://h/sse'}, watch: [missing.txt, 'none/*.yml']}]\ninclude: ['d/*.yaml']\n",
    )
    state = await ConfigDesiredState(cfg).load()
    assert state.tracked_files == 1
    assert state.warnings == (
        f"config: glob {str(tmp_path / 'd' / '*.yaml')!r} matched no files",
        f"source 'a': glob {str(tmp_path / 'missing.txt')!r} matched no files",
        f"source 'a': glob {str(tmp_path / 'none' / '*.yml')!r} matched no files",
    )


@pytest.mark.anyio
async def test_I11_invalid_edit_keeps_last_good_specs_with_config_error_then_fix_recovers(
    setup: Path, clock: Clock
) -> None:
    src = source(setup)
    good = await src.load()

    clock.write(setup, GOOD.replace('http: {url: "http://127.0.0.1:9000/mcp"}', "http: {}"))
    assert await src.poll() == {CONFIG_KEY}
    broken = await src.load()
    assert broken.specs == good.specs  # the last good config keeps serving
    assert broken.config_error == f"{setup}:6: sources[1].http.url: field required (give the server's MCP endpoint URL)"
    assert any("is invalid" in w and "still serving the last good config" in w for w in broken.warnings)
    assert broken.inputs_digest == good.inputs_digest
    error = src.config_error
    assert isinstance(error, ConfigError) and len(error.problems) == 1
    # The failed load is the new baseline: no reload loop on an unchanged broken file.
    assert await src.poll() == set()

    fixed_text = GOOD.replace("9000", "9100")
    clock.write(setup, fixed_text)
    assert await src.poll() == {CONFIG_KEY}
    fixed = await src.load()
    assert fixed.config_error is None and src.config_error is None
    assert fixed.specs[1].transport["url"] == "http://127.0.0.1:9100/mcp"
    assert not any("invalid" in w for w in fixed.warnings)


@pytest.mark.anyio
async def test_I11_broken_drop_in_keeps_last_good_and_its_fix_is_noticed(
    setup: Path, tmp_path: Path, clock: Clock
) -> None:
    src = source(setup)
    good = await src.load()
    bad = clock.write(tmp_path / "sources.d" / "zz.yaml", "name: zz\nhttp: {url: [\n")
    assert await src.poll() == {CONFIG_KEY}
    broken = await src.load()
    assert broken.specs == good.specs and broken.config_error is not None
    assert broken.config_error.startswith(f"{bad}:3: YAML syntax:")
    assert await src.poll() == set()
    clock.write(bad, "name: zz\nhttp: {url: 'http://h/mcp'}\n")
    assert await src.poll() == {CONFIG_KEY}
    assert [s.name for s in (await src.load()).specs][-1] == "zz"


@pytest.mark.anyio
async def test_I11_broken_main_file_still_watches_the_old_drop_ins(setup: Path, tmp_path: Path, clock: Clock) -> None:
    src = source(setup)
    await src.load()
    clock.write(setup, "sources: [\n")  # unparseable: include globs unknown
    await src.load()
    clock.write(tmp_path / "sources.d" / "extra.yaml", "name: extra2\nsse: {url: 'http://h/sse'}\n")
    assert await src.poll() == {CONFIG_KEY}


@pytest.mark.anyio
async def test_I11_watched_inputs_still_tracked_while_config_is_invalid(
    setup: Path, tmp_path: Path, clock: Clock
) -> None:
    src = source(setup)
    good = await src.load()
    clock.write(setup, "sources: 7\n")
    await src.load()
    clock.write(tmp_path / "data" / "a.yml", "a: 3\n")
    assert await src.poll() == {"notes"}
    state = await src.load()
    assert state.config_error is not None and state.specs == good.specs
    assert state.inputs_digest["notes"] != good.inputs_digest["notes"]


@pytest.mark.anyio
async def test_I11_never_valid_config_raises_and_its_fix_is_noticed(tmp_path: Path, clock: Clock) -> None:
    cfg = clock.write(tmp_path / "g.yaml", "sources: [{name: a}]\n")
    src = ConfigDesiredState(cfg)
    with pytest.raises(ConfigError) as info:
        await src.load()
    assert str(info.value).startswith(f"{cfg}:1: sources[0]: exactly one of stdio, http, sse")
    assert src.last_good is None
    assert await src.poll() == set()
    clock.write(cfg, "sources: [{name: a, sse: {url: 'http://h/sse'}}]\n")
    assert await src.poll() == {CONFIG_KEY}
    assert [s.name for s in (await src.load()).specs] == ["a"]


@pytest.mark.anyio
async def test_I11_missing_config_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        await ConfigDesiredState(tmp_path / "absent.yaml").load()


@pytest.mark.anyio
async def test_I11_edit_landing_after_the_read_is_still_seen(
    setup: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inputs are stamped before they are read: an edit that lands after the read (but before
    a stamp-after-read would have been taken) must show up on the next poll, never be folded
    into a baseline whose content was not read."""
    src = source(setup)
    await src.load()
    real = mcp_reconciler.reconciler.config.load_config

    def racing_load(*args: Any, **kwargs: Any) -> LoadedConfig:
        loaded = real(*args, **kwargs)
        clock.write(setup, GOOD.replace("9000", "9999"))  # lands right after the read
        return loaded

    clock.write(setup, GOOD + "# first edit\n")
    monkeypatch.setattr(config_source, "load_config", racing_load)
    state = await src.load()
    monkeypatch.setattr(config_source, "load_config", real)
    assert state.specs[1].transport["url"] == "http://127.0.0.1:9000/mcp"  # the content read
    assert await src.poll() == {CONFIG_KEY}
    assert (await src.load()).specs[1].transport["url"] == "http://127.0.0.1:9999/mcp"


@pytest.mark.anyio
async def test_I11_racy_fresh_write_counts_as_changed_until_it_ages(tmp_path: Path) -> None:
    """A config written within the racy window cannot be vouched for by its stamp."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text("sources: []\n")  # mtime: now
    # A wide window keeps the test deterministic on a stalled box; OLD_NS is far outside it.
    src = ConfigDesiredState(cfg, racy_window_ns=600 * 10**9)
    await src.load()
    assert await src.poll() == {CONFIG_KEY}
    os.utime(cfg, ns=(OLD_NS, OLD_NS))  # aged (and a change, so one more reload)
    await src.load()
    assert await src.poll() == set()


@pytest.mark.anyio
async def test_rotated_secret_changes_the_spec_digest(setup: Path) -> None:
    one = await source(setup, {"TOKEN": "one"}).load()
    two = await source(setup, {"TOKEN": "two"}).load()
    assert one.specs[0].digest != two.specs[0].digest


@pytest.mark.anyio
async def test_secrets_stay_out_of_the_desired_state_repr_and_config_error(setup: Path, clock: Clock) -> None:
    src = source(setup)
    state = await src.load()
    assert SECRET not in repr(state)
    clock.write(setup, GOOD + "  - name: broken\n    sse: {url: 'ftp://${TOKEN}/x'}\n")
    broken = await src.load()
    assert broken.config_error is not None and SECRET not in broken.config_error
    assert SECRET not in repr(broken)


def test_engine_modules_import_no_http_framework() -> None:
    """docs/DESIGN.md layering: reconciler/ has no HTTP framework imports (checked on the source)."""
    forbidden = {"starlette", "fastapi", "aiohttp", "uvicorn", "httpx", "mcp", "flask", "django"}
    root = Path(config_source.__file__).parent
    config_package = sorted(f"config/{p.name}" for p in (root / "config").glob("*.py"))
    assert "config/schema.py" in config_package  # the package, not an empty glob
    for name in (*config_package, "config_reference.py", "freshness.py", "config_source.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            assert not {m.split(".")[0] for m in modules} & forbidden, (name, modules)


@pytest.mark.anyio
async def test_an_unchanged_invalid_config_is_logged_once(
    setup: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    src = source(setup)
    await src.load()
    clock.write(setup, "sources: 7\n")
    with caplog.at_level("WARNING", logger="reconciler.config_source"):
        for _ in range(3):
            await src.load()
    assert len([r for r in caplog.records if "is invalid" in r.getMessage()]) == 1


# -- out of descriptors is not an edit (issue 10, item 5) --------------------------------------


@pytest.mark.anyio
async def test_out_of_descriptors_is_neither_a_change_nor_a_removal(setup: Path, tmp_path: Path) -> None:
    """With every descriptor in use, the include glob and the watch glob cannot be listed and
    the files cannot be opened. Before the fix, glob matched nothing (drop-in "removed", watched
    inputs "changed") and the read became a config error; now a poll sees no change and a load
    fails the cycle, keeping the last good config, baseline and error untouched."""
    from tests.support.exhaustion import descriptors_exhausted

    src = source(setup)
    first = await src.load()
    with descriptors_exhausted():
        polled = await src.poll()
        try:
            await src.load()
        except Exception as exc:  # inspected below, outside the exhausted block
            loaded: object = exc
        else:
            loaded = "loaded"
    assert polled == set()
    assert isinstance(loaded, config_source.CycleFailedError), loaded
    assert "could not be read" in str(loaded)
    assert src.config_error is None
    assert src.last_good is not None and [s.name for s in src.last_good.specs] == ["notes", "search", "extra"]
    # Descriptors back: nothing changed on disk, so nothing is dirty, and a load is the same.
    assert await src.poll() == set()
    again = await src.load()
    assert again.specs == first.specs and again.inputs_digest == first.inputs_digest
    assert again.config_error is None
