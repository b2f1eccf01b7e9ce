"""I11 under a config storm: the gateway config is rewritten 1,000 times in ~10 s — valid
variants that add or remove a source, rename one or change a prefix, truncated (partial) writes,
invalid YAML, schema errors and empty files — while the watcher sweeps every 20 ms.

Invalid states are never served: every published generation and every status answer
corresponds to one of the VALID variants written; a status answer that does not say the inputs
changed since its build is consistent with the file on disk at that instant (the invalid file
is reported as ``config_error``, never old numbers presented as current). After the storm, one
final valid config is served exactly."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.config import ConfigError, load_config
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import SourceStatus
from tests.chaos.conftest import WAIT, RevisionLog
from tests.e2e.conftest import all_tools
from tests.integration.conftest import HttpUpstreams
from tests.support.upstream_server import CONTROL_TOOLS
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WRITES = 1_000  # full scale, as specified
STORM_S = 10.0
SAMPLE_EVERY_S = 0.02
# Freshness stamps are "racy" for 2 s after a write (reconciler/freshness.py
# DEFAULT_RACY_WINDOW_NS), so during the storm every status honestly says "inputs changed". Two
# quiet periods (after writes 333 and 666, +2 x 3 s) let answers be checked against the disk.
QUIET_AFTER = [333, 666]
QUIET_S = 3.0
GATEWAY = {"cooldown_s": 0.1, "anonymous": {"grant_policy": "current"}}  # clients need no token here
UPSTREAM_TOOLS = {"p0": ["t1", "t2"], "p1": ["u1"], "p2": ["w1", "w2", "w3"]}

# (source name, upstream, prefix) per source; prefix None = "<name>__", "" = none, "p" = "p__".
VALID: list[tuple[tuple[str, str, str | None], ...]] = [
    (("a", "p0", None),),
    (("a", "p0", None), ("b", "p1", None)),
    (("a", "p0", "x_"), ("b", "p1", None)),  # prefix change
    (("b", "p1", None),),  # a removed
    (("a", "p0", None), ("b", "p1", "y_"), ("c", "p2", None)),  # c added
    (("c", "p2", ""),),  # no prefix
    (("a2", "p0", None), ("b", "p1", None)),  # a renamed
    (),  # an explicit `sources: []` is valid: zero sources on purpose
]
FINAL = (("a", "p0", "fin_"), ("b", "p1", None), ("c", "p2", "z."))

INVALID_TEXTS = [
    "",  # empty file (an editor's truncate-then-write)
    "\n\n",
    "# nothing but a comment\n",
    "sources: [\n",  # invalid YAML
    "sources:\n  - name: a\n   http: {url: http://127.0.0.1:1/mcp}\n",
    "\tsources: []\n",
    "{{{",
    "sources: [{name: 'bad name!', http: {url: 'http://127.0.0.1:1/mcp'}}]\n",  # schema errors
    "sources: [{name: all, http: {url: 'http://127.0.0.1:1/mcp'}}]\n",
    "sources: [{name: a, http: {url: 'http://127.0.0.1:1/mcp'}, stdio: {command: x}}]\n",
    "sourcez: []\n",
    "sources: [{name: a}]\n",
    "gateway: {cooldown_s: -1}\nsources: []\n",
]


@dataclass(frozen=True)
class Variant:
    key: tuple[tuple[str, str, str | None], ...]
    json_text: str
    yaml_text: str
    tools: dict[str, frozenset[str]]  # source -> exposed tool names when READY

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.tools)


def _variant(key: tuple[tuple[str, str, str | None], ...], ports: dict[str, int]) -> Variant:
    sources: list[dict[str, Any]] = []
    tools: dict[str, frozenset[str]] = {}
    for name, up, prefix in key:
        src: dict[str, Any] = {"name": name, "http": {"url": f"http://127.0.0.1:{ports[up]}/mcp"}}
        if prefix is not None:
            src["prefix"] = prefix
        sources.append(src)
        eff = f"{name}__" if prefix is None else f"{prefix}__" if prefix else ""  # the separator (ADR 0026)
        tools[name] = frozenset(eff + t for t in [*UPSTREAM_TOOLS[up], *CONTROL_TOOLS])
    doc = {"gateway": GATEWAY, "sources": sources}
    return Variant(key, json.dumps(doc), yaml.safe_dump(doc, sort_keys=False), tools)


def _loads(tmp: Path, text: str) -> bool:
    probe = tmp / "probe.yaml"
    probe.write_text(text)
    try:
        load_config(probe)
    except ConfigError:
        return False
    return True


def _matches(variant: Variant, sources: dict[str, tuple[SourceStatus, frozenset[str]]]) -> bool:
    """A generation's sources are this variant's: the same names, and each source's entries are
    either the variant's exposed names for it (listed) or nothing (failed/throttled)."""
    if set(sources) != variant.names:
        return False
    return all(entries == variant.tools[name] or not entries for name, (_st, entries) in sources.items())


def _gen_sources(gen: Generation) -> dict[str, tuple[SourceStatus, frozenset[str]]]:
    return {s.source: (s.status, frozenset(e.exposed_name for e in s.entries)) for s in gen.sources}


async def test_I11_config_rewritten_1000_times(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    ports: dict[str, int] = {}
    for up, tools in UPSTREAM_TOOLS.items():
        _proc, ports[up] = await http_upstreams.start("--tools", ",".join(tools))
    variants = [_variant(k, ports) for k in VALID]
    final = _variant(FINAL, ports)
    # Self-check of the test's own vocabulary: valid variants load, invalid texts don't.
    for v in [*variants, final]:
        assert _loads(tmp_path, v.json_text) and _loads(tmp_path, v.yaml_text), v.key
    for text in INVALID_TEXTS:
        assert not _loads(tmp_path, text), text
    rng = random.Random(1234)
    truncated: list[str] = []
    for v in variants:  # partial writes: a JSON document cut anywhere is never valid YAML
        body = v.json_text
        for cut in sorted(rng.sample(range(len(body) - 1), 8)):
            truncated.append(body[:cut])
    for text in truncated:
        assert not _loads(tmp_path, text), text

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(variants[1].json_text)
    on_disk: Variant | None = variants[1]  # None while the file on disk is invalid
    lock = anyio.Lock()  # a status sample sees one stable file on disk
    violations: list[str] = []
    samples = {"total": 0, "strict": 0, "config_error": 0, "changed": 0}
    writes = {"valid": 0, "truncated": 0, "invalid": 0, "empty": 0}

    allowed = list(variants)  # what may be served; the final config joins when it is written

    def gen_ok(gen: Generation) -> str | None:
        sources = _gen_sources(gen)
        if any(_matches(v, sources) for v in allowed):
            return None
        return f"revision {gen.revision} serves a config never written as valid: {sources}"

    async with serve_http(cfg, port=0, watch_interval_s=0.02) as served:
        gw = served.gateway
        runtime = gw.rec.runtime
        reader = gw.reader
        assert reader is not None
        log = RevisionLog(served, gen_ok)
        cycles0 = gw.rec.cycles
        storm_over = anyio.Event()

        def write(text: str, *, atomic: bool) -> None:
            if atomic:
                tmp = cfg.with_name(f".{cfg.name}.tmp")
                tmp.write_text(text)
                os.replace(tmp, cfg)
            else:
                cfg.write_text(text)  # truncate, then write: a reader may see it half done

        async def writer() -> None:
            nonlocal on_disk
            t0 = time.monotonic()
            for i in range(WRITES):
                roll = rng.random()
                async with lock:
                    if roll < 0.45:
                        v = rng.choice(variants)
                        # YAML block style only atomically: a prefix of a block document can
                        # be valid YAML naming fewer sources, which no reader could tell from an
                        # intended edit. JSON torn mid-write is always invalid.
                        if rng.random() < 0.5:
                            write(v.json_text, atomic=rng.random() < 0.5)
                        else:
                            write(v.yaml_text, atomic=True)
                        on_disk = v
                        writes["valid"] += 1
                    elif roll < 0.7:
                        write(rng.choice(truncated), atomic=rng.random() < 0.5)
                        on_disk = None
                        writes["truncated"] += 1
                    elif roll < 0.9:
                        write(rng.choice(INVALID_TEXTS[3:]), atomic=rng.random() < 0.5)
                        on_disk = None
                        writes["invalid"] += 1
                    else:
                        write(rng.choice(INVALID_TEXTS[:3]), atomic=False)
                        on_disk = None
                        writes["empty"] += 1
                if i in QUIET_AFTER:
                    # A quiet moment (one valid, one invalid file): once the racy window has
                    # passed, status answers no longer say "inputs changed" and must then match
                    # the file on disk exactly.
                    async with lock:
                        if QUIET_AFTER.index(i) == 0:
                            write(variants[4].json_text, atomic=False)
                            on_disk = variants[4]
                        else:
                            write(INVALID_TEXTS[3], atomic=False)
                            on_disk = None
                    await anyio.sleep(QUIET_S)  # the storm's shape: a quiet spell the watcher must notice
                    t0 += QUIET_S
                # Paced to ~10 s of writing; when behind schedule, still yield once.
                await anyio.sleep(max(0.0, t0 + (i + 1) * STORM_S / WRITES - time.monotonic()))  # the writes' pace
            storm_over.set()

        async def sampler() -> None:
            for _ in range(5_000):  # bounded; ends with the storm
                if storm_over.is_set():
                    return
                async with lock:
                    disk = on_disk
                    st = await gw.engine.status()
                    live = runtime.current
                samples["total"] += 1
                names = frozenset(s.name for s in st.sources)
                if not any(names == v.names for v in variants):
                    violations.append(f"status names sources {sorted(names)}: never a valid config")
                if live is not None and (problem := gen_ok(live.generation)):
                    violations.append(problem)
                if st.config_error is not None:
                    samples["config_error"] += 1
                    if st.state != "error":
                        violations.append(f"config_error reported with state {st.state!r}")
                if st.inputs_changed_since_build is not None:
                    samples["changed"] += 1
                    if not st.reconciling:
                        violations.append("inputs changed but the status does not say it is reconciling")
                else:
                    # No change since the last load: the answer must match the file on disk.
                    samples["strict"] += 1
                    if disk is None and st.config_error is None:
                        violations.append("the file on disk is invalid but status reports no config_error")
                    if disk is not None and (st.config_error is not None or names != disk.names):
                        violations.append(
                            f"status {sorted(names)} / config_error={st.config_error is not None} "
                            f"for a valid file naming {sorted(disk.names)}"
                        )
                await anyio.sleep(SAMPLE_EVERY_S)  # the sampler's period during the storm (the subject)

        t0 = time.monotonic()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                tg.start_soon(sampler)
        storm_s = time.monotonic() - t0
        storm_cycles = gw.rec.cycles - cycles0
        storm_revisions = len(log.published) - 1

        # The final valid config is served exactly (sources throttled by reconnect backoff
        # during the storm recover on their own; refresh until every one is listed).
        allowed.append(final)
        write(final.json_text, atomic=False)

        statuses: list[str] = []

        async def converged() -> bool:  # each look is a refresh: the upstreams are other processes
            statuses.append((await gw.engine.refresh(timeout_s=WAIT)).status)
            live = runtime.current
            assert live is not None
            sources = _gen_sources(live.generation)
            return set(sources) == final.names and all(st is SourceStatus.READY for st, _ in sources.values())

        await until(converged, what="the final file's sources, all ready", timeout_s=30, every_s=0.1)
        assert statuses[-1] in ("published", "unchanged"), statuses
        live = runtime.current
        assert live is not None
        sources = _gen_sources(live.generation)
        assert {name: entries for name, (_st, entries) in sources.items()} == final.tools
        assert set(live.generation.tools) == set().union(*final.tools.values())
        st = await gw.engine.status()
        assert st.config_error is None and st.state == "ready", st.state
        assert {s.name for s in st.sources} == final.names
        assert st.revision == live.revision
        # What a new session sees is exactly the final file's names.
        async with Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as client:
            listed, rev = await all_tools(client)
        assert rev == live.revision
        assert {t.name for t in listed} == set().union(*final.tools.values())
        # No connection outlives the storm: one per final source (closes run in the background).
        await until(
            lambda: reader.open_connections() == len(final.names),
            what="one open connection per final source",
            timeout_s=WAIT,
        )
        assert len(runtime.connection_refs()) == len(final.names)
        log.remove()

    assert not log.violations, log.violations[:5]
    assert not violations, violations[:5]
    assert sum(writes.values()) == WRITES
    assert samples["config_error"] > 0, "the storm never surfaced a config_error"
    assert samples["strict"] >= 10, "no status answer was checked against the file on disk"
    assert reader.open_connections() == 0
    print(
        f"\n{WRITES} writes {writes} in {storm_s:.1f} s: {storm_cycles} cycles, {storm_revisions} revisions, "
        f"{reader.opened} upstream connections opened; {samples['total']} status samples "
        f"({samples['config_error']} with config_error, {samples['changed']} 'inputs changed', "
        f"{samples['strict']} checked against the file on disk)"
    )
