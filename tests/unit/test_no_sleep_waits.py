"""House rule: tests wait on events and conditions, never ``sleep()`` to wait.

Every ``sleep(...)`` call under tests/ and bench/ must say on its own line (a ``#`` comment)
why time itself is what it needs — a load's pace, a sampling period, a time-based bound whose
passage is the subject, another process's file with nothing to wait on. A wait for a condition
goes through ``tests/support/waits.py`` (``until``, ``file_text``, ``exited``), whose one poll is
commented there. A new bare ``sleep`` fails here with its file and line."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("tests", "bench")


def _sleep_calls(tree: ast.AST) -> list[ast.Call]:
    def is_sleep(func: ast.expr) -> bool:
        return (isinstance(func, ast.Attribute) and func.attr == "sleep") or (
            isinstance(func, ast.Name) and func.id == "sleep"
        )

    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and is_sleep(node.func)]


def _commented_lines(source: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def bare_sleeps(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line`` (relative to ``root``) of every ``sleep(...)`` call in ``path`` with no
    comment on its lines."""
    source = path.read_text()
    commented = _commented_lines(source)
    out = []
    for call in _sleep_calls(ast.parse(source)):
        if not commented & set(range(call.lineno, (call.end_lineno or call.lineno) + 1)):
            out.append(f"{path.relative_to(root)}:{call.lineno}")
    return out


def test_every_sleep_in_tests_and_bench_says_why() -> None:
    files = [p for tree in TREES for p in sorted((ROOT / tree).rglob("*.py"))]
    assert len(files) > 100  # the walk found the trees
    bare = [where for path in files for where in bare_sleeps(path)]
    assert not bare, "sleep() without a reason (wait on the condition: tests/support/waits.py):\n" + "\n".join(bare)


def test_a_bare_sleep_is_found_and_a_commented_one_is_not(tmp_path: Path) -> None:
    """The check itself can fail: a polling loop is caught, a sleep that is the subject is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import anyio\n\n\n"
        "async def poll(ready):\n"
        "    while not ready():\n"
        "        await anyio.sleep(0.01)\n\n\n"
        "async def pace():\n"
        "    await anyio.sleep(0.1)  # the load's pace\n"
    )
    assert bare_sleeps(probe, tmp_path) == ["probe.py:6"]
