"""README "Observe it" and "Observability" name only what the code exports.

* Every ``mcp_reconciler_*`` series in the dashboard table is the Prometheus name
  (:func:`~mcp_reconciler.reconciler.prometheus.prom_name`) of an instrument the code creates
  (``create_counter("…")`` and its kin, or a state gauge of ``reconciler/telemetry.py``).
* Every span and instrument the "Observability" paragraph names is created by the code.
* The invariant range the README's first paragraph cites is the one docs/DESIGN.md defines.

The instruments are read from the source (as ``tests/unit/test_design_doc.py`` reads module
names): a counter only appears in a scrape once something counted, so a scrape cannot list them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from mcp_reconciler.reconciler.prometheus import prom_name
from mcp_reconciler.reconciler.telemetry import STATE_COUNTERS, STATE_GAUGES
from tests.support.readme import README, REPO_ROOT

CREATE = re.compile(r"\bcreate_(counter|up_down_counter|histogram|gauge|observable_\w+)\(\s*\"([a-z0-9_.]+)\"")
SPAN = re.compile(r"\bstart_(?:as_current_)?span\(\s*\"([a-z0-9_.]+)\"")
UNIT = re.compile(r"\bunit=\"([^\"]*)\"")


class Instrument(NamedTuple):
    name: str
    unit: str
    counter: bool


def _call_args(text: str, start: int) -> str:
    """The argument text of the call whose ``(`` is the first one at or after ``start``."""
    open_at = text.index("(", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    raise AssertionError(f"unbalanced call at {start}")


def _sources() -> list[Path]:
    return [p for package in ("reconciler", "api") for p in sorted((REPO_ROOT / package).rglob("*.py"))]


def instruments() -> list[Instrument]:
    found: list[Instrument] = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for m in CREATE.finditer(text):
            unit = UNIT.search(_call_args(text, m.start()))
            counter = m.group(1) in ("counter", "observable_counter")
            found.append(Instrument(m.group(2), unit.group(1) if unit else "", counter))
    for name, (unit, _description) in STATE_GAUGES.items():
        found.append(Instrument(name, unit, name in STATE_COUNTERS))
    return found


def spans() -> set[str]:
    return {m.group(1) for path in _sources() for m in SPAN.finditer(path.read_text(encoding="utf-8"))}


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_readme_metrics_table_names_exported_series() -> None:
    exported = {prom_name(i.name, i.unit, counter=i.counter) for i in instruments()}
    lines = _section(README.read_text(), "Observe it").splitlines()
    table = [line for line in lines if line.startswith("| `mcp_reconciler_")]
    named = {name for line in table for name in re.findall(r"`(mcp_reconciler_[a-z0-9_]+)`", line.split("|")[1])}
    assert len(named) >= 20, table
    assert named <= exported, f"in README's table but exported by no instrument: {sorted(named - exported)}"


def test_the_observability_paragraph_names_real_spans_and_instruments() -> None:
    text = _section(README.read_text(), "Observability")
    head = text.split("Logs:", 1)[0]
    spans_named = set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", head.split("Instruments", 1)[0]))
    instruments_named = set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", head.split("Instruments", 1)[1]))
    assert spans_named and instruments_named
    assert spans_named <= spans(), f"spans the README names that no code starts: {sorted(spans_named - spans())}"
    created = {i.name for i in instruments()}
    missing = instruments_named - created
    assert not missing, f"instruments the README names that no code creates: {sorted(missing)}"


def test_the_readme_cites_the_invariants_design_defines() -> None:
    design = (REPO_ROOT / "docs" / "DESIGN.md").read_text()
    defined = {int(n) for n in re.findall(r"^###\s+I(\d{1,2})\b", design, re.MULTILINE)}
    cited = re.search(r"its invariants \(I1\u2013I(\d+)\)", README.read_text())
    assert cited is not None
    assert int(cited.group(1)) == max(defined) and defined == set(range(1, max(defined) + 1))
