"""Docs that run: every fenced block in README.md is executed, or compared with the file it shows.

Each block is named by a ``<!-- readme-test: NAME -->`` line before it (``tests/support/readme.py``
lists who checks which). Shell blocks run as written, through bash, with documented
substitutions only: ``.venv/bin/`` is this suite's interpreter directory, port ``8765`` is the
port the test's gateway got, and the working directory is a temporary copy of ``examples/`` (the
operator workflow writes into the demo's watched data dir). Python blocks are the example files
verbatim (checked equal) and those files are run. ``make`` targets are dry-run (``make -n``):
CI itself runs ``make test``, and ``make run``'s command is the ``serve`` these tests run.

Engine-facing snippets: ``examples/embedded_engine.py`` uses ``UpstreamReader``, ``Reconciler``,
``StaticDesiredState``, ``reader.on_dirty``, ``rec.refresh``, ``rec.runtime.current`` and
``live.operation()``; when those change, the example must change with them (this test fails)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.support.gateway_process import gateway_process, stop
from tests.support.readme import CHECKED, README, REPO_ROOT, block, blocks

pytestmark = pytest.mark.anyio

BIN = Path(sys.executable).parent  # what the README calls .venv/bin
DEMO_TOKEN = "demo-operator-token"
TIMEOUT_S = 60.0
DIGEST = re.compile(r"digest [0-9a-f]{12}")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    return env | extra


def _examples_copy(tmp: Path) -> Path:
    shutil.copytree(REPO_ROOT / "examples", tmp / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def _substitute(line: str, port: int | None = None) -> str:
    line = line.replace(".venv/bin/", f"{BIN}/")
    return line.replace("127.0.0.1:8765", f"127.0.0.1:{port}") if port is not None else line


@dataclass
class Step:
    line: str
    code: int
    out: list[str]


async def run_steps(lines: Sequence[str], *, cwd: Path, env: dict[str, str]) -> tuple[list[Step], str]:
    """Run ``lines`` in one bash process (so ``export`` carries over), each step's output and
    exit code recorded apart; returns the steps and bash's stderr."""
    script = "".join(
        f"echo '@@step {i}'\n{line}\nrc=$?; printf '\\n@@exit {i} %s\\n' \"$rc\"\n" for i, line in enumerate(lines)
    )
    with anyio.fail_after(TIMEOUT_S * 2):
        proc = await anyio.run_process(["bash", "-c", script], cwd=cwd, env=env, check=False)
    steps: list[Step] = []
    current: list[str] = []
    for raw in proc.stdout.decode().splitlines():
        if raw.startswith("@@step "):
            current = []
        elif raw.startswith("@@exit "):
            _, index, code = raw.split()
            steps.append(Step(lines[int(index)], int(code), [x for x in current if x]))
        else:
            current.append(raw)
    assert [s.line for s in steps] == list(lines), proc.stdout.decode()
    return steps, proc.stderr.decode()


def test_every_block_is_named_and_checked() -> None:
    found = blocks()
    unnamed = [f"README.md:{b.line}" for b in found if b.name is None]
    assert not unnamed, f"fenced blocks without a <!-- readme-test: NAME --> line: {unnamed}"
    names = [b.name for b in found]
    assert sorted(names) == sorted(CHECKED), "a README block was added or removed: check it in a test and in CHECKED"  # type: ignore[type-var]


def test_make_targets() -> None:
    import subprocess

    recipes: dict[str, str] = {}
    for line in block("make-targets").lines():
        m = re.match(r"make (\S+)\s", line)
        assert m, line
        proc = subprocess.run(["make", "-n", m.group(1)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        recipes[m.group(1)] = proc.stdout
    assert set(recipes) == {"run", "test", "check"}
    assert "mcp-reconciler serve" in recipes["run"] and DEMO_TOKEN in recipes["run"]
    for target in ("test", "check"):
        assert all(tool in recipes[target] for tool in ("ruff check", "mypy", "pytest")), recipes[target]
    assert '-m "not slow" tests/unit tests/property' in recipes["check"]


def _refreshed_revision(out: list[str]) -> int:
    m = re.match(
        r"cycle \d+: \w+ — revision (\d+) \((new revision|no change; already current since \S+ ago: .+)\)$", out[0]
    )
    assert m, out
    return int(m.group(1))


async def test_operator_workflow_and_sdk_example(tmp_path: Path) -> None:
    cwd = _examples_copy(tmp_path)
    serve = [str(BIN / "mcp-reconciler"), "serve", "--config", "examples/demo/gateway.yaml", "--port", "0"]
    async with gateway_process(serve, cwd=cwd, env=_env(MCP_RECONCILER_OPERATOR_TOKENS=DEMO_TOKEN)) as gw:
        lines = [_substitute(line, gw.port) for line in block("operator-workflow").lines()]
        steps, stderr = await run_steps(lines, cwd=cwd, env=_env())
        assert "Traceback" not in stderr, stderr
        revisions: list[int] = []

        def status(out: list[str]) -> None:
            assert out[0] == "state       ready", out

        def third_note(out: list[str]) -> None:
            assert (cwd / "examples" / "demo" / "data" / "third.yml").read_text() == "title: third\n"

        def curl(out: list[str]) -> None:
            body = json.loads("".join(out))
            assert body["state"] == "ready" and body["revision"] == revisions[-1], body

        checks: list[tuple[str, Callable[[list[str]], None]]] = [
            (r"^export MCP_RECONCILER_URL=\S+ MCP_RECONCILER_TOKEN=demo-operator-token$", lambda out: None),
            (r"mcp-reconciler status\b", status),
            (r"mcp-reconciler refresh\b", lambda out: revisions.append(_refreshed_revision(out))),
            (r"mcp-reconciler sources\b", lambda out: out[0].startswith("SOURCE  STATE")),
            (r"mcp-reconciler generations\b", lambda out: out[0].startswith("REVISION  STATE")),
            (r"^echo .* > examples/demo/data/third.yml", third_note),
            (r"^curl ", curl),
        ]
        for step in steps:
            assert step.code == 0, f"{step.line!r} exited {step.code}: {step.out}\n{stderr}"
            matching = [check for pattern, check in checks if re.search(pattern, step.line.split("#")[0].strip())]
            assert matching, f"a README step without a check in this test: {step.line!r}"
            matching[0](step.out)
        assert len(revisions) == 2 and revisions[1] > revisions[0], "the data change made no new revision"

        # The SDK example is the file, verbatim, and runs against the same gateway.
        example = REPO_ROOT / "examples" / "sdk_pinned_run.py"
        assert block("sdk-example").text == example.read_text()
        operator = _env(MCP_RECONCILER_URL=gw.base_url, MCP_RECONCILER_TOKEN=DEMO_TOKEN)
        with anyio.fail_after(TIMEOUT_S):
            proc = await anyio.run_process([sys.executable, str(example)], cwd=REPO_ROOT, env=operator, check=False)
        out = proc.stdout.decode().splitlines()
        assert proc.returncode == 0, proc.stderr.decode()
        assert re.fullmatch(rf"pinned to revision {revisions[-1]}: \['clock__now', .*'notes__get_note'\]", out[0]), out
        assert json.loads(out[1].removeprefix("notes__count_notes -> "))["notes"] == 3, out
        assert out[2] == "hold released: True", out


async def test_embedded_engine_example() -> None:
    example = REPO_ROOT / "examples" / "embedded_engine.py"
    assert block("embedded-engine").text == example.read_text()
    with anyio.fail_after(TIMEOUT_S):
        proc = await anyio.run_process([sys.executable, str(example)], cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0 and proc.stderr.decode() == "", proc.stderr.decode()
    out = proc.stdout.decode().splitlines()
    assert out == ["revision 1: ['notes__count']", "pinned to revision 1"]
    assert all(f"`{line}`" in README.read_text() for line in out)  # what the prose says it prints


async def test_demo_output() -> None:
    with anyio.fail_after(TIMEOUT_S):
        proc = await anyio.run_process([str(BIN / "mcp-reconciler"), "demo"], cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert DIGEST.sub("digest …", proc.stdout.decode()) == DIGEST.sub("digest …", block("demo-output").text)


async def test_config_commands(tmp_path: Path) -> None:
    cwd = _examples_copy(tmp_path)
    lines = [_substitute(line) for line in block("config-commands").lines()]

    def kind(line: str) -> str:
        if " check-config " in line:
            return "check"
        if " reconcile " in line:
            return "once" if "--once" in line else "forever"
        return line

    kinds = [kind(line) for line in lines]
    assert kinds == ["check", "once", "forever"], f"a README step without a check in this test: {lines}"
    for line, kind in zip(lines, kinds, strict=True):
        argv = shlex.split(line, comments=True)
        if kind != "forever":
            with anyio.fail_after(TIMEOUT_S):
                proc = await anyio.run_process(argv, cwd=cwd, env=_env(), check=False)
            assert proc.returncode == 0, proc.stderr.decode()
            if kind == "once":
                assert proc.stdout.decode().startswith("published revision 1: 4 tools"), proc.stdout.decode()
            continue
        # "keep reconciling; SIGHUP reloads, Ctrl-C stops"
        async with gateway_process(argv, cwd=cwd, env=_env(), ready=r"^SIGHUP reloads the config") as rc:
            assert rc.lines[0].startswith("published revision 1: 4 tools"), rc.describe()
            rc.process.send_signal(signal.SIGHUP)
            await rc.wait_line(r"^SIGHUP: reload cycle \w+, revision \d+$")
            assert await stop(rc.process, signal.SIGINT) == 0, rc.describe()
            assert not any("Traceback" in line for line in rc.stderr), rc.describe()


async def test_config_example(tmp_path: Path) -> None:
    cwd = _examples_copy(tmp_path)
    config = cwd / "examples" / "demo" / "gateway.yaml"  # its relative paths are the demo's
    config.write_text(block("config-example").text)
    check = [str(BIN / "mcp-reconciler"), "check-config", str(config)]
    with anyio.fail_after(TIMEOUT_S):
        proc = await anyio.run_process(check, cwd=cwd, env=_env(SEARCH_TOKEN="s3cr3t-value"), check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "3 source(s): notes, search, clock" in proc.stdout.decode()
    with anyio.fail_after(TIMEOUT_S):  # ${VAR} from the environment, never its value in errors
        unset = await anyio.run_process(check, cwd=cwd, env=_env(), check=False)
    assert unset.returncode == 1 and "SEARCH_TOKEN is not set" in unset.stderr.decode()


def test_limits_defaults() -> None:
    """The README's "Limits and shutdown" block is the config's real defaults, and it loads."""
    import yaml

    from mcp_reconciler.reconciler.config import GatewaySettings

    shown = yaml.safe_load(block("limits-defaults").text)["gateway"]
    defaults = GatewaySettings()
    assert shown["shutdown_grace_s"] == defaults.shutdown_grace_s
    assert shown["limits"] == defaults.limits.model_dump(), "README limits differ from LimitsConfig's defaults"
    assert GatewaySettings.model_validate(shown) == defaults


def test_quota_blocks() -> None:
    """The quota refusal the README shows is the one the session quota raises at its default
    per-principal bound (ADR 0032), and the session JSON fields it shows exist."""
    from mcp_reconciler.reconciler.authority import Authority
    from mcp_reconciler.reconciler.bounds import Bounds
    from mcp_reconciler.reconciler.errors import SessionLimitError
    from mcp_reconciler.sdk.wire import SessionOut, error

    authority = Authority(Bounds())
    for _ in range(Bounds().sessions_per_principal):
        authority.create("owner::alice", None, operator=False)
    with pytest.raises(SessionLimitError) as refused:
        authority.create("owner::alice", None, operator=False)
    exc = refused.value
    assert json.loads(block("quota-refusal").text) == error(exc.code, str(exc), bound=exc.bound, limit=exc.limit)
    shown = json.loads(block("session-expiry").text)
    assert set(shown) <= set(SessionOut.model_fields)
    assert shown["expires_at"] == shown["last_active_at"] + Bounds().api_session_idle_s


def test_security_blocks(tmp_path: Path) -> None:
    """The Security section's config fragments are valid configs, and the warning it quotes is
    the one ``serve`` prints (``tests/api/test_cli.py::test_serve_warns_when_anonymous_access_is_on``
    runs ``serve`` itself)."""
    from mcp_reconciler.api.server import ANONYMOUS_WARNING
    from mcp_reconciler.reconciler.config import load_config

    source = "sources:\n  - name: notes\n    stdio: {command: python}\n"
    anonymous = tmp_path / "anonymous.yaml"
    anonymous.write_text(block("anonymous-config").text + source)
    settings = load_config(anonymous).settings.anonymous
    assert settings is not None and settings.grant_policy == "follow"
    (warning,) = block("anonymous-warning").lines()
    assert warning == "  " + ANONYMOUS_WARNING.format(policy="follow", url="http://127.0.0.1:8765/mcp")
    sessions = tmp_path / "sessions.yaml"
    sessions.write_text(block("sessions-config").text + source + "views:\n  - name: assistant\n")
    (declared,) = load_config(sessions, environ={"MY_AGENT_TOKEN": "a-long-enough-token-123"}).sessions
    assert (declared.name, declared.policy, declared.control_tools) == ("my-agent", "follow", False)
    assert declared.view == "assistant"
