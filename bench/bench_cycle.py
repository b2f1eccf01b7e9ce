"""Reconcile-cycle cost at catalog scale (100 sources x 100 tools), upstream I/O excluded.

Run from the repo root:  python bench/bench_cycle.py [--json PATH]

A fake in-memory SourceReader stands in for MCP listing: each ``read`` builds the source's
100 tool entries with ``reconciler.catalog.make_entry`` (name, ~200-char description, an
inputSchema with 3 properties) and returns a ``SourceState``. Every read bumps the source's
version string inside each description, so every cycle's candidate really differs and really
publishes (I3 would otherwise discard it). The reader reuses the source's connection, as the
SourceReader contract asks for a healthy unchanged source. Validation of raw upstream pages
(``reconciler.listing.validate_entry``: pydantic + JSON-Schema check) is NOT in the cycle
figures; its per-entry cost is printed separately for context.

Measured (Bounds(cooldown_s=0) so the cooldown does not dominate), each ``refresh`` call timed
with perf_counter_ns, rounds of the two cases interleaved:
  (a) one source dirty: ``await reconciler.refresh(["src042"])``
  (b) all dirty:        ``await reconciler.refresh(["all"])``
Targets: one-dirty <= 20 ms, and >= 10x cheaper than all-dirty.

Memory per extra generation when one source changed: tracemalloc snapshots around a
one-dirty publication while a pin keeps the previous generation alive (it is then retiring,
not closed), averaged over a few generations; compared with the tracemalloc size of building
all 10,000 entries. A reachability breakdown (objects reachable from the new generation and not
from the old one, by sys.getsizeof) splits it into routing table vs entries vs the rest.

Metadata projection (I20, adr/0010): the figures above use sources whose trust is decided by
transport (the fake "stdio" specs: trusted, served verbatim with a provenance ``_meta``). A
second phase builds two engines side by side — every source trusted vs every source untrusted
(every definition projected) — and interleaves one-dirty refreshes between them (order
alternating per round), so both see the same load; target: untrusted within 10 % of trusted,
judged on the thread CPU time of each cycle (wall time on a shared box moves with others' load;
both are printed).
"""

from __future__ import annotations

import cProfile
import gc
import io
import os
import pstats
import sys
import time
import tracemalloc
from types import MappingProxyType

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anyio  # noqa: E402
from _stats import dump_json, environment, fmt_bytes, json_out_path, summary, verdict  # noqa: E402

from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.catalog import make_entry, merge  # noqa: E402
from mcp_reconciler.reconciler.desired import StaticDesiredState  # noqa: E402
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState  # noqa: E402
from mcp_reconciler.reconciler.projection import MetadataPolicy, Trust  # noqa: E402
from mcp_reconciler.reconciler.reconcile import Reconciler  # noqa: E402

N_SOURCES = 100
N_TOOLS = 100
DIRTY = "src042"
ROUNDS = 10  # interleaved rounds
ONE_PER_ROUND = 20  # one-dirty cycles per round  -> 200 samples
ALL_PER_ROUND = 3  # all-dirty cycles per round   -> 30 samples
STEADY_CYCLES = 300  # one-dirty-only phase (full-GC tail without all-dirty churn)
MEM_GENERATIONS = 3  # one-dirty generations kept alive by pins for the memory figure (<= retiring_max)
TARGET_ONE_MS = 20.0
TARGET_RATIO = 10.0
TRUST_ROUNDS = 30  # projection phase: interleaved rounds ...
TRUST_PER_ROUND = 10  # ... of one-dirty cycles per engine -> 300 samples each
TARGET_PROJECTION_OVERHEAD = 1.10


# -- the fake upstream ---------------------------------------------------------------------------


class FakeConnection:
    """Stands in for an upstream connection; the runtime closes it once when unreferenced."""

    __slots__ = ("__weakref__", "closed", "connection_id")

    def __init__(self, cid: str) -> None:
        self.connection_id = cid
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


_WORDS = (
    "Query the build index for artifacts matching a filter and return a paginated list of results "
    "with their status, owner, timestamps and a stable identifier suitable for follow-up calls."
)


def tool_definition(source: str, j: int, version: int) -> dict:
    """A realistic MCP tool definition: ~200-char description, inputSchema with 3 properties."""
    name = f"tool_{j:03d}"
    return {
        "name": name,
        "title": f"{source} tool {j}",
        "description": f"[{source} v{version}] {_WORDS}"[:200],
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Filter expression, e.g. 'status:failed owner:ci'."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
                "include_archived": {"type": "boolean", "default": False},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    }


def build_entries(spec: SourceSpec, version: int) -> tuple:
    return tuple(
        make_entry(spec, EntryKind.TOOL, f"tool_{j:03d}", tool_definition(spec.name, j, version))
        for j in range(N_TOOLS)
    )


class FakeReader:
    """In-memory SourceReader (no MCP I/O). Each read bumps the source's version."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self.conns: dict[str, FakeConnection] = {}
        self.reads = 0
        self.read_ns = 0

    async def read(self, spec: SourceSpec, previous: SourceState | None, *, inputs_digest: str) -> SourceState:
        t0 = time.perf_counter_ns()
        v = self.versions.get(spec.name, 0) + 1
        self.versions[spec.name] = v
        if previous is not None and previous.connection is not None:
            conn = previous.connection  # healthy, same spec and inputs: reuse (SourceReader contract)
        else:
            conn = self.conns.setdefault(spec.name, FakeConnection(f"{spec.name}#1"))
        state = SourceState(
            source=spec.name,
            spec_digest=spec.digest,
            entries=build_entries(spec, v),
            built_at=time.time(),
            connection=conn,
            inputs_digest=inputs_digest,
        )
        self.reads += 1
        self.read_ns += time.perf_counter_ns() - t0
        return state


def specs(trust: Trust | None = None) -> list[SourceSpec]:
    metadata = None if trust is None else MetadataPolicy(trust=trust)
    return [
        SourceSpec(name=f"src{i:03d}", transport={"type": "stdio", "command": "fake"}, metadata=metadata)
        for i in range(N_SOURCES)
    ]


async def _projection_phase() -> dict:
    """One-dirty cycles, every source trusted vs every source untrusted, interleaved."""
    out: dict = {}
    async with (
        Reconciler(StaticDesiredState(specs(Trust.TRUSTED)), FakeReader(), bounds=Bounds(cooldown_s=0)) as trusted,
        Reconciler(StaticDesiredState(specs(Trust.UNTRUSTED)), FakeReader(), bounds=Bounds(cooldown_s=0)) as untrusted,
    ):
        engines = {"trusted": trusted, "untrusted": untrusted}
        for rec in engines.values():
            assert (await rec.refresh(["all"])).status == "published"
            for _ in range(5):
                await time_refresh(rec, [DIRTY], 1)
        samples: dict[str, list[float]] = {name: [] for name in engines}
        cpu: dict[str, list[float]] = {name: [] for name in engines}
        not_published = 0
        gc.collect()
        for r in range(TRUST_ROUNDS):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                for _ in range(TRUST_PER_ROUND):
                    c0 = time.thread_time_ns()
                    dt, ok, _full = await time_refresh(engines[name], [DIRTY], 1)
                    cpu[name].append((time.thread_time_ns() - c0) / 1e6)
                    samples[name].append(dt)
                    not_published += not ok
        # the untrusted catalog really is projected and carries provenance
        entry = untrusted.runtime.current.generation.tools[f"{DIRTY}__tool_000"]
        assert entry.provenance is not None and entry.provenance.trust is Trust.UNTRUSTED
        assert b"io.mcp-reconciler/provenance" in entry.raw and b'"trust":"untrusted"' in entry.raw
        out = {name: summary(xs) for name, xs in samples.items()}
        out["cpu"] = {name: summary(xs) for name, xs in cpu.items()}
        out["not_published"] = not_published
        out["overhead_median"] = out["untrusted"]["median"] / out["trusted"]["median"]
        out["overhead_mean"] = out["untrusted"]["mean"] / out["trusted"]["mean"]
        out["cpu_overhead_median"] = out["cpu"]["untrusted"]["median"] / out["cpu"]["trusted"]["median"]
    return out


# -- reachability breakdown ----------------------------------------------------------------------

_SKIP = (type, type(sys), type(len), type(lambda: 0), FakeConnection)


def reachable(root: object) -> dict[int, object]:
    """Objects reachable from ``root`` through gc referents (stops at types, modules, functions,
    connections and enum members, which are shared process state)."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        oid = id(obj)
        if oid in seen or isinstance(obj, (_SKIP, EntryKind)):
            continue
        seen[oid] = obj
        stack.extend(gc.get_referents(obj))
    return seen


def size_of(objs) -> int:
    return sum(sys.getsizeof(o) for o in objs)


# -- measurements --------------------------------------------------------------------------------


class GcWatch:
    """Counts full (generation 2) collections and their pause, via gc.callbacks."""

    def __init__(self) -> None:
        self.full = 0
        self.pauses_ms: list[float] = []
        self._t0 = 0

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.full += 1
            self.pauses_ms.append((time.perf_counter_ns() - self._t0) / 1e6)


GC = GcWatch()


async def time_refresh(rec: Reconciler, keys: list[str], expect_reads: int) -> tuple[float, bool, bool]:
    full0 = GC.full
    t0 = time.perf_counter_ns()
    out = await rec.refresh(keys)
    dt_ms = (time.perf_counter_ns() - t0) / 1e6
    ok = out.status == "published" and len(out.sources_read) == expect_reads
    return dt_ms, ok, GC.full != full0


async def _measure() -> dict:
    reader = FakeReader()
    desired = StaticDesiredState(specs())
    res: dict = {}
    async with Reconciler(desired, reader, bounds=Bounds(cooldown_s=0)) as rec:
        first = await rec.refresh(["all"])
        assert first.status == "published", first
        gen = rec.runtime.current.generation
        res["entries_per_generation"] = gen.catalog.entry_count
        # warm-up
        for _ in range(5):
            await time_refresh(rec, [DIRTY], 1)
        await time_refresh(rec, ["all"], N_SOURCES)

        one: list[float] = []
        alld: list[float] = []
        one_full_gc: list[bool] = []
        not_published = 0
        gc.collect()
        gc.callbacks.append(GC)
        reads_before, read_ns_before = reader.reads, reader.read_ns
        one_reader_ns = 0
        for _ in range(ROUNDS):
            for _ in range(ONE_PER_ROUND):
                r0 = reader.read_ns
                dt, ok, full = await time_refresh(rec, [DIRTY], 1)
                one_reader_ns += reader.read_ns - r0
                one.append(dt)
                one_full_gc.append(full)
                not_published += not ok
            for _ in range(ALL_PER_ROUND):
                dt, ok, _full = await time_refresh(rec, ["all"], N_SOURCES)
                alld.append(dt)
                not_published += not ok
        res["gc_full_collections_interleaved"] = GC.full
        # steady state: one-dirty cycles only (no all-dirty churn), to see the full-GC tail alone
        gc.collect()
        full0, pauses0 = GC.full, len(GC.pauses_ms)
        steady: list[float] = []
        for _ in range(STEADY_CYCLES):
            dt, ok, _full = await time_refresh(rec, [DIRTY], 1)
            steady.append(dt)
            not_published += not ok
        res["steady_one_ms"] = steady
        res["steady_full_gc"] = GC.full - full0
        res["steady_full_gc_pause_ms"] = GC.pauses_ms[pauses0:]
        gc.callbacks.remove(GC)
        res["one_ms"] = one
        res["one_full_gc"] = one_full_gc
        res["gc_full_collections"] = GC.full
        res["gc_full_pause_ms"] = GC.pauses_ms
        res["gc_tracked_objects"] = len(gc.get_objects())
        res["all_ms"] = alld
        res["not_published"] = not_published
        res["reader_ms_per_one_dirty_cycle"] = one_reader_ns / 1e6 / len(one)
        all_reads_ns = reader.read_ns - read_ns_before - one_reader_ns
        res["reader_ms_per_all_dirty_cycle"] = all_reads_ns / 1e6 / len(alld)
        res["reads_total"] = reader.reads - reads_before
        res["retiring_after_timing"] = len(rec.runtime.retiring)

        # -- component costs, measured directly (same states as the live generation) --------
        states = list(rec.runtime.current.generation.sources)
        bounds = rec.bounds
        merge_ms = []
        for _ in range(30):
            t0 = time.perf_counter_ns()
            merge(states, bounds=bounds, built_at=0.0)
            merge_ms.append((time.perf_counter_ns() - t0) / 1e6)
        spec42 = next(s for s in desired._state.specs if s.name == DIRTY)
        build_ms = []
        for v in range(30):
            t0 = time.perf_counter_ns()
            build_entries(spec42, 10_000 + v)
            build_ms.append((time.perf_counter_ns() - t0) / 1e6)
        res["merge_ms"] = merge_ms
        res["build_one_source_ms"] = build_ms

        # -- profile of one-dirty cycles ------------------------------------------------------
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(40):
            await rec.refresh([DIRTY])
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        res["profile_one_dirty_top"] = s.getvalue()
        prof_tot = pstats.Stats(prof)
        res["profile_one_dirty_calls"] = _profile_breakdown(prof_tot, 40)

        # -- memory per extra generation (one source changed) -------------------------------
        res["memory"] = await _memory(rec, reader, desired)
    return res


def _profile_breakdown(stats: pstats.Stats, cycles: int) -> dict[str, float]:
    """Cumulative ms per cycle for the functions that make up a cycle."""
    want = {
        ("catalog.py", "merge"): "merge (catalog.py)",
        ("catalog.py", "make_entry"): "make_entry x100 (catalog.py)",
        ("bench_cycle.py", "read"): "FakeReader.read (incl. make_entry, SourceState digest)",
        ("model.py", "__post_init__"): "SourceState/SourceSpec __post_init__ digest (model.py)",
        ("runtime.py", "publish"): "Runtime.publish (runtime.py)",
        ("reconcile.py", "_build_and_publish"): "_build_and_publish (reconcile.py)",
        ("reconcile.py", "_cycle"): "_cycle (reconcile.py)",
        ("catalog.py", "<genexpr>"): "merge: sum(e.size ...) generators (catalog.py)",
        ("enum.py", "__hash__"): "Enum.__hash__ (tables[entry.kind] in merge)",
    }
    out: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        base = os.path.basename(filename)
        label = want.get((base, func))
        if label is not None:
            out[label] = out.get(label, 0.0) + ct * 1000 / cycles
    return out


async def _memory(rec: Reconciler, reader: FakeReader, desired: StaticDesiredState) -> dict:
    runtime = rec.runtime
    gc.collect()
    tracemalloc.start(1)
    try:
        pins = []
        per_gen = []
        per_gen_peak = []
        by_file: dict[str, int] = {}
        top_lines: dict[str, int] = {}
        old_gen = new_gen = None
        for _ in range(MEM_GENERATIONS):
            old_gen = runtime.current.generation
            pins.append(runtime.current.pin())  # keep the old generation alive (retiring)
            gc.collect()
            before = tracemalloc.take_snapshot()
            cur0, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            out = await rec.refresh([DIRTY])
            assert out.status == "published", out
            _, peak = tracemalloc.get_traced_memory()
            gc.collect()
            after = tracemalloc.take_snapshot()
            new_gen = runtime.current.generation
            diff = after.compare_to(before, "lineno")
            per_gen.append(sum(d.size_diff for d in diff))
            per_gen_peak.append(peak - cur0)
            for d in diff:
                frame = d.traceback[0]
                fname = os.path.basename(frame.filename)
                by_file[fname] = by_file.get(fname, 0) + d.size_diff
                key = f"{fname}:{frame.lineno}"
                top_lines[key] = top_lines.get(key, 0) + d.size_diff
        retiring = len(runtime.retiring)
        # reachability breakdown for the last (old -> new) pair
        assert old_gen is not None and new_gen is not None
        old_ids = reachable(old_gen)
        new_objs = reachable(new_gen)
        fresh = {i: o for i, o in new_objs.items() if i not in old_ids}
        routes = new_gen.catalog.routes
        route_containers = [routes, *routes.values()]
        route_containers += [gc.get_referents(p)[0] for p in route_containers if isinstance(p, MappingProxyType)]
        route_ids = {id(o) for o in route_containers}
        state42 = new_gen.source_state(DIRTY)
        state_ids = set(reachable(state42)) & set(fresh)
        entries_ids = set()
        for e in state42.entries:
            entries_ids |= set(reachable(e))
        entries_ids &= set(fresh)
        breakdown = {
            "routing tables (4 dicts + proxies)": size_of(fresh[i] for i in route_ids if i in fresh),
            f"{DIRTY} entries (100 CatalogEntry + frozen definitions + strings)": size_of(
                fresh[i] for i in entries_ids
            ),
            f"{DIRTY} SourceState + entries tuple": size_of(fresh[i] for i in state_ids - entries_ids),
            "sources tuple + Catalog + Generation + rest": 0,
        }
        rest_ids = set(fresh) - route_ids - state_ids
        breakdown["sources tuple + Catalog + Generation + rest"] = size_of(fresh[i] for i in rest_ids)
        new_only_total = size_of(fresh.values())
        whole_gen_reach = size_of(new_objs.values())
        shared = len(set(new_objs) & set(old_ids))
        for p in pins:
            p.release()

        # whole catalog: tracemalloc of building all 10,000 entries (100 source states)
        gc.collect()
        before = tracemalloc.take_snapshot()
        states = []
        for spec in desired._state.specs:
            states.append(await reader.read(spec, None, inputs_digest=""))
        gc.collect()
        mid = tracemalloc.take_snapshot()
        catalog = merge(states, bounds=rec.bounds, built_at=0.0)
        gc.collect()
        after = tracemalloc.take_snapshot()
        whole_entries = sum(d.size_diff for d in mid.compare_to(before, "lineno"))
        whole_merge = sum(d.size_diff for d in after.compare_to(mid, "lineno"))
        del catalog, states
    finally:
        tracemalloc.stop()
    top = sorted(top_lines.items(), key=lambda kv: -kv[1])[:8]
    return {
        "generations_measured": MEM_GENERATIONS,
        "retiring_while_measured": retiring,
        "per_generation_retained_bytes": per_gen,
        "per_generation_peak_alloc_bytes": per_gen_peak,
        "retained_by_file_avg": {k: v / MEM_GENERATIONS for k, v in sorted(by_file.items(), key=lambda kv: -kv[1])},
        "retained_top_lines_avg": {k: v / MEM_GENERATIONS for k, v in top},
        "reachability_new_only_bytes": new_only_total,
        "reachability_breakdown": breakdown,
        "reachability_whole_generation_bytes": whole_gen_reach,
        "reachability_objects_shared_with_previous": shared,
        "reachability_objects_new": len(fresh),
        "whole_catalog_entries_bytes": whole_entries,
        "whole_catalog_merge_bytes": whole_merge,
    }


def _validate_cost() -> dict | None:
    """Context only: per-entry cost of the real ingestion validation (not in cycle figures)."""
    try:
        from mcp_reconciler.reconciler.listing import KINDS, validate_entry
    except Exception as exc:  # pragma: no cover - optional
        return {"error": f"{type(exc).__name__}: {exc}"}
    spec = SourceSpec(name=DIRTY)
    ks = KINDS[0]
    defs = [tool_definition(DIRTY, j, 1) for j in range(N_TOOLS)]
    for d in defs[:10]:
        validate_entry(ks, d, spec, Bounds())
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for d in defs:
            e, diag = validate_entry(ks, d, spec, Bounds())
            assert e is not None and diag is None, diag
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return {"validate_100_tools_ms": summary(samples)}


def run() -> dict:
    gc.collect()
    t_start = time.perf_counter()
    raw = anyio.run(_measure)
    projection = anyio.run(_projection_phase)
    validate = _validate_cost()
    wall = time.perf_counter() - t_start

    one = summary(raw["one_ms"])
    alld = summary(raw["all_ms"])
    ratio_median = alld["median"] / one["median"]
    ratio_p99 = alld["p99"] / one["p99"]
    mem = raw["memory"]
    per_gen_avg = sum(mem["per_generation_retained_bytes"]) / len(mem["per_generation_retained_bytes"])
    whole = mem["whole_catalog_entries_bytes"]
    one_source_share = whole / N_SOURCES
    out = {
        "bench": "cycle",
        "env": environment(),
        "config": {
            "sources": N_SOURCES,
            "tools_per_source": N_TOOLS,
            "entries_per_generation": raw["entries_per_generation"],
            "bounds": "Bounds(cooldown_s=0), defaults otherwise",
            "one_dirty_samples": len(raw["one_ms"]),
            "all_dirty_samples": len(raw["all_ms"]),
            "upstream_io": "excluded (in-memory fake reader; make_entry included, listing validation excluded)",
        },
        "one_dirty_ms": one,
        "all_dirty_ms": alld,
        "ratio_all_over_one": {"median": ratio_median, "p99": ratio_p99},
        "cycles_not_published": raw["not_published"],
        "gc": _gc_summary(raw),
        "components_ms": {
            "reader_per_one_dirty_cycle": raw["reader_ms_per_one_dirty_cycle"],
            "reader_per_all_dirty_cycle": raw["reader_ms_per_all_dirty_cycle"],
            "merge_100x100_median": summary(raw["merge_ms"])["median"],
            "build_one_source_100_entries_median": summary(raw["build_one_source_ms"])["median"],
        },
        "profile_one_dirty_ms_per_cycle": raw["profile_one_dirty_calls"],
        "memory": {
            **mem,
            "per_generation_retained_avg_bytes": per_gen_avg,
            "one_source_share_of_catalog_bytes": one_source_share,
            "per_generation_over_whole_catalog": per_gen_avg / whole,
            "per_generation_over_one_source_share": per_gen_avg / one_source_share,
        },
        "validation_context": validate,
        "projection": projection,
        "targets": {
            "one_dirty_median_ms<=20": {"value": one["median"], "met": one["median"] <= TARGET_ONE_MS},
            "one_dirty_p99_ms<=20": {"value": one["p99"], "met": one["p99"] <= TARGET_ONE_MS},
            "one_dirty_steady_max_ms<=20 (info: GC tail)": {
                "value": summary(raw["steady_one_ms"])["max"],
                "met": summary(raw["steady_one_ms"])["max"] <= TARGET_ONE_MS,
            },
            "all/one_ratio(median)>=10": {"value": ratio_median, "met": ratio_median >= TARGET_RATIO},
            "extra_generation<=~1 source+routes (<10% of catalog)": {
                "value": per_gen_avg / whole,
                "met": per_gen_avg / whole < 0.10,
            },
            "one_dirty untrusted/trusted, thread CPU (median)<=1.10": {
                "value": projection["cpu_overhead_median"],
                "met": projection["cpu_overhead_median"] <= TARGET_PROJECTION_OVERHEAD,
            },
        },
        "wall_s": wall,
    }
    _print(out, raw["profile_one_dirty_top"])
    return out


def _gc_summary(raw: dict) -> dict:
    with_gc = [t for t, f in zip(raw["one_ms"], raw["one_full_gc"], strict=False) if f]
    without = [t for t, f in zip(raw["one_ms"], raw["one_full_gc"], strict=False) if not f]
    return {
        "steady_one_dirty_ms": summary(raw["steady_one_ms"]),
        "steady_full_collections": raw["steady_full_gc"],
        "steady_full_collection_pause_ms": raw["steady_full_gc_pause_ms"],
        "full_collections_during_interleaved_timing": raw["gc_full_collections_interleaved"],
        "full_collections_during_timing": raw["gc_full_collections"],
        "full_collection_pause_ms": summary(raw["gc_full_pause_ms"]) if raw["gc_full_pause_ms"] else None,
        "gc_tracked_objects": raw["gc_tracked_objects"],
        "one_dirty_cycles_with_full_gc": len(with_gc),
        "one_dirty_ms_with_full_gc": summary(with_gc) if with_gc else None,
        "one_dirty_ms_without_full_gc": summary(without) if without else None,
    }


def _print(out: dict, profile_text: str) -> None:
    cfg = out["config"]
    env = out["env"]
    print("== bench_cycle: reconcile cycle at 100 sources x 100 tools (upstream I/O excluded) ==")
    print(f"python {env['python']} on {env['machine']}, {env['cpus']} CPUs")
    print(
        f"{cfg['sources']} sources x {cfg['tools_per_source']} tools = {cfg['entries_per_generation']:,} entries; "
        f"{cfg['bounds']}; {cfg['upstream_io']}"
    )
    print()
    hdr = f"{'refresh() cycle':<32} {'n':>4} {'median ms':>10} {'p99 ms':>9} {'min ms':>8} {'max ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for label, key in (('(a) one dirty ["src042"]', "one_dirty_ms"), ('(b) all dirty ["all"]', "all_dirty_ms")):
        s = out[key]
        print(f"{label:<32} {s['n']:>4} {s['median']:>10.2f} {s['p99']:>9.2f} {s['min']:>8.2f} {s['max']:>8.2f}")
    r = out["ratio_all_over_one"]
    print(f"ratio all/one: {r['median']:.1f}x (median), {r['p99']:.1f}x (p99)")
    print(f"cycles that did not publish exactly as expected: {out['cycles_not_published']}")
    g = out["gc"]
    pause = g["full_collection_pause_ms"]
    print(
        f"full (gen-2) GC during all timing: {g['full_collections_during_timing']} collections"
        + (f", pause median {pause['median']:.1f} ms, max {pause['max']:.1f} ms" if pause else "")
        + f"; {g['gc_tracked_objects']:,} gc-tracked objects in the process"
    )
    if g["one_dirty_ms_with_full_gc"]:
        w, wo = g["one_dirty_ms_with_full_gc"], g["one_dirty_ms_without_full_gc"]
        print(
            f"  one-dirty cycles hit by a full GC: {g['one_dirty_cycles_with_full_gc']} "
            f"(median {w['median']:.2f} ms, max {w['max']:.2f} ms); without: median {wo['median']:.2f} ms, "
            f"p99 {wo['p99']:.2f} ms"
        )
    st = g["steady_one_dirty_ms"]
    print(
        f"(a') one dirty only, steady state: n={st['n']}, median {st['median']:.2f} ms, p99 {st['p99']:.2f} ms, "
        f"max {st['max']:.2f} ms; full GCs: {g['steady_full_collections']} "
        f"({', '.join(f'{x:.1f}' for x in g['steady_full_collection_pause_ms'])} ms)"
    )
    print()
    c = out["components_ms"]
    print("components (ms):")
    print(f"  fake reader time inside a one-dirty cycle       {c['reader_per_one_dirty_cycle']:8.2f}")
    print(f"  fake reader time inside an all-dirty cycle      {c['reader_per_all_dirty_cycle']:8.2f}")
    print(f"  merge() of 100 states x 100 entries (direct)    {c['merge_100x100_median']:8.2f}")
    print(f"  build 100 entries via make_entry (direct)       {c['build_one_source_100_entries_median']:8.2f}")
    print("cProfile, one-dirty cycles, cumulative ms per cycle (profiler overhead inflates):")
    for k, v in sorted(out["profile_one_dirty_ms_per_cycle"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:<58} {v:8.2f}")
    print("cProfile top by own time (40 one-dirty cycles):")
    lines = [ln for ln in profile_text.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    for ln in lines[start : start + 13]:
        print("  " + ln.rstrip())
    print()
    m = out["memory"]
    print(
        f"memory per extra generation (one source changed; previous generation pinned, "
        f"{m['retiring_while_measured']} retiring; avg of {m['generations_measured']}):"
    )
    print(
        "  retained (tracemalloc diff) per generation: "
        + ", ".join(fmt_bytes(b) for b in m["per_generation_retained_bytes"])
        + f"  -> avg {fmt_bytes(m['per_generation_retained_avg_bytes'])}"
    )
    print(
        "  transient peak allocated during the cycle:  "
        + ", ".join(fmt_bytes(b) for b in m["per_generation_peak_alloc_bytes"])
    )
    print(f"  whole catalog (tracemalloc, build 10,000 entries): {fmt_bytes(m['whole_catalog_entries_bytes'])}")
    print(f"  + merge of the whole catalog (routing tables etc.): {fmt_bytes(m['whole_catalog_merge_bytes'])}")
    print(f"  one source's share of the catalog (1/100):        {fmt_bytes(m['one_source_share_of_catalog_bytes'])}")
    print(
        f"  extra generation = {100 * m['per_generation_over_whole_catalog']:.2f}% of the whole catalog = "
        f"{m['per_generation_over_one_source_share']:.2f}x one source's share"
    )
    print("  retained by file (tracemalloc, avg per generation):")
    for k, v in list(m["retained_by_file_avg"].items())[:8]:
        print(f"    {k:<40} {fmt_bytes(v):>12}")
    print("  retained by line (top 8, avg per generation):")
    for k, v in m["retained_top_lines_avg"].items():
        print(f"    {k:<40} {fmt_bytes(v):>12}")
    print(
        f"  reachability (sys.getsizeof; objects reachable from new gen, not from previous): "
        f"{m['reachability_objects_new']:,} new objects, {m['reachability_objects_shared_with_previous']:,} shared"
    )
    for k, v in m["reachability_breakdown"].items():
        print(f"    {k:<66} {fmt_bytes(v):>12}")
    print(f"    {'total new-only':<66} {fmt_bytes(m['reachability_new_only_bytes']):>12}")
    print(
        f"    {'(whole generation reachable, for scale)':<66} {fmt_bytes(m['reachability_whole_generation_bytes']):>12}"
    )
    v = out["validation_context"]
    if v and "validate_100_tools_ms" in v:
        s = v["validate_100_tools_ms"]
        print(
            f"context, not in the cycle figures: listing.validate_entry for 100 tools = {s['median']:.2f} ms median "
            f"({1000 * s['median'] / N_TOOLS:.0f} us/tool)"
        )
    elif v:
        print(f"context: listing.validate_entry unavailable ({v.get('error')})")
    pr = out["projection"]
    print()
    print(
        f"metadata projection (I20): one-dirty cycles, {TRUST_ROUNDS} interleaved rounds x {TRUST_PER_ROUND} per engine"
    )
    for name in ("trusted", "untrusted"):
        x, c = pr[name], pr["cpu"][name]
        print(
            f"  all sources {name:<10} n={x['n']:>4}  wall median {x['median']:6.2f} ms  mean {x['mean']:6.2f} ms  "
            f"p99 {x['p99']:6.2f} ms | thread CPU median {c['median']:6.2f} ms"
        )
    print(
        f"  untrusted / trusted: wall {pr['overhead_median']:.3f} (median), {pr['overhead_mean']:.3f} (mean); "
        f"thread CPU {pr['cpu_overhead_median']:.3f} (median); cycles not published as expected: "
        f"{pr['not_published']}"
    )
    print()
    for name, t in out["targets"].items():
        print(f"target {name:<54} {t['value']:>10.3f}  {verdict(t['met'])}")
    print(f"wall time {out['wall_s']:.1f} s")


if __name__ == "__main__":
    res = run()
    path = json_out_path(sys.argv[1:])
    if path:
        dump_json(path, res)
