"""The tool search index at 10,000 tools (issue 31, ADR 0029).

Run from the repo root:  python bench/bench_search.py [--quick] [--json PATH]

A real merged catalog of 10,000 tools (``tests/support/search_catalog.py``: service x object x
action, three naming styles, parameters with descriptions) in one generation, then:

1. **Build**: ``SearchIndex.build`` over the generation's tools, median and worst of a few
   builds (each a fresh index, as a new generation would build). Target <= 300 ms.
2. **Query**: the labelled natural-language queries (and words from them), each through
   ``Authority.find`` for a ``current`` session in search mode (ranking *and* the authority's
   admission check): p50 / p99. Baseline in the same run: a linear scan that lower-cases every
   served definition and counts query words (what a gateway without an index does per query).
   Target p99 <= 5 ms.
3. **Memory**: ``tracemalloc`` bytes allocated while building one index (what the generation
   holds), against the catalog's own served bytes. Target <= 30 MB.
4. **Sessions**: 1,000 sessions in search mode each run one ``find_tools`` search;
   ``tracemalloc`` bytes still held afterwards beyond the sessions' own found sets, per session
   (target: no index memory per session, i.e. ~0), and the index object is the same one.
5. **Recall@5** on the labelled query set.

Figures are printed, never asserted (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import tracemalloc
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, BENCH_DIR)

from _stats import dump_json, environment, fmt_bytes, json_out_path, median, pct, verdict  # noqa: E402

from mcp_reconciler.reconciler.authority import Authority  # noqa: E402
from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.catalog import make_entry, merge  # noqa: E402
from mcp_reconciler.reconciler.discovery import DiscoveryMode, DiscoveryPolicy  # noqa: E402
from mcp_reconciler.reconciler.generation import Generation  # noqa: E402
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState  # noqa: E402
from mcp_reconciler.reconciler.search_index import SearchIndex, tokens  # noqa: E402
from tests.support.search_catalog import catalog, labelled, recall_at  # noqa: E402

TOOLS = 10_000
SESSIONS = 1_000


def generation(n: int) -> Generation:
    """One published-shaped generation of ``n`` tools, from one source, through the real merge."""
    spec = SourceSpec(name="up", transport={"stdio": {"command": "true"}})
    entries = tuple(
        make_entry(
            spec,
            EntryKind.TOOL,
            t["name"],
            {
                "name": t["name"],
                "description": t["description"],
                "inputSchema": {
                    "type": "object",
                    "properties": {p: {"type": "string", "description": d} for p, d in t["properties"].items()},
                },
            },
        )
        for t in catalog(n)
    )
    state = SourceState(source="up", spec_digest=spec.digest, entries=entries, built_at=0.0)
    return Generation(revision=1, catalog=merge([state], bounds=Bounds(), built_at=0.0), published_at=0.0)


def linear_scan(gen: Generation, query: str, limit: int) -> list[str]:
    """The baseline: score every served definition by query-word occurrences, no index."""
    words = tokens(query)
    scored = []
    for name, entry in gen.tools.items():
        text = entry.raw.decode().lower()
        score = sum(text.count(w) for w in words)
        if score:
            scored.append((-score, name))
    scored.sort()
    return [name for _, name in scored[:limit]]


def main() -> dict[str, Any]:
    quick = "--quick" in sys.argv
    builds = 3 if quick else 7
    rounds = 5 if quick else 25
    gen = generation(TOOLS)
    tools = gen.tools
    served_bytes = sum(len(e.raw) for e in tools.values())
    print(f"catalog: {len(tools)} tools, {fmt_bytes(served_bytes)} of served definitions; loadavg {os.getloadavg()}")

    # 1. build
    build_ms = []
    build_cpu_ms = []  # CPU time of this process: what the build costs, whatever else runs
    for _ in range(builds):
        gc.collect()
        started, cpu = time.perf_counter(), time.process_time()
        SearchIndex.build(tools)
        build_ms.append((time.perf_counter() - started) * 1000)
        build_cpu_ms.append((time.process_time() - cpu) * 1000)

    # 3. memory of one index (what a generation holds)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    index = gen.search_index(None)  # the generation's own, built here
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    index_bytes = sum(s.size_diff for s in after.compare_to(before, "filename"))

    # 2. queries through the authority (ranking + admission)
    auth = Authority(Bounds(names_per_session=20_000))
    auth.set_discovery(DiscoveryPolicy(mode=DiscoveryMode.SEARCH))
    session = auth.create("owner::bench", gen)
    queries = [q for q, _ in labelled()]
    queries += [w for q in queries[:10] for w in q.split()[:2]]  # short one- and two-word queries too
    query_ms: list[float] = []
    query_cpu_ms: list[float] = []
    scan_ms: list[float] = []
    for _ in range(rounds):
        for q in queries:
            started, cpu = time.perf_counter(), time.process_time()
            auth.find(session, gen, q, 5)
            query_ms.append((time.perf_counter() - started) * 1000)
            query_cpu_ms.append((time.process_time() - cpu) * 1000)
    for q in queries[: 10 if quick else len(queries)]:
        started = time.perf_counter()
        linear_scan(gen, q, 5)
        scan_ms.append((time.perf_counter() - started) * 1000)

    # 4. 1,000 sessions in search mode
    sessions = [auth.create("owner::bench", gen) for _ in range(SESSIONS)]
    auth.find(sessions[0], gen, queries[0], 5)  # warm allocator free lists
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i, s in enumerate(sessions[1:]):
        auth.find(s, gen, queries[i % len(queries)], 5)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = after.compare_to(before, "filename")
    index_file = sum(s.size_diff for s in stats if "search_index" in str(s.traceback))
    total = sum(s.size_diff for s in stats)
    found_sets = sum(sys.getsizeof(s.found) for s in sessions[1:])
    shared = gen.search_index(None) is index

    # 5. recall
    recall, misses = recall_at(5, lambda q, k: [h.name.removeprefix("up__") for h in index.search(q, k)])

    b50, bmax = median(build_ms), max(build_ms)
    c50, cmax = median(build_cpu_ms), max(build_cpu_ms)
    q50, q99 = median(query_ms), pct(query_ms, 99)
    s50 = median(scan_ms)
    rows = [
        ("index build (10,000 tools)", f"median {b50:.0f} ms, max {bmax:.0f} ms", "<= 300 ms", verdict(bmax <= 300)),
        ("index build, CPU time", f"median {c50:.0f} ms, max {cmax:.0f} ms", "-", "-"),
        ("find (ranking + authority)", f"p50 {q50:.2f} ms, p99 {q99:.2f} ms", "p99 <= 5 ms", verdict(q99 <= 5)),
        (
            "find, CPU time",
            f"p50 {median(query_cpu_ms):.2f} ms, p99 {pct(query_cpu_ms, 99):.2f} ms",
            "-",
            "-",
        ),
        ("baseline linear scan", f"p50 {s50:.1f} ms ({s50 / q50:.0f}x the index's p50)", "-", "-"),
        (
            "index memory (tracemalloc)",
            f"{fmt_bytes(index_bytes)} ({index_bytes / served_bytes:.2f}x the served definitions)",
            "<= 30 MB",
            verdict(index_bytes <= 30 * 1024 * 1024),
        ),
        ("index size (self-reported)", f"{fmt_bytes(index.size_bytes)}, {index.terms} terms", "-", "-"),
        (
            f"{SESSIONS} search sessions, one find each",
            f"{index_file / (SESSIONS - 1):.1f} B/session in the index module; "
            f"{total / (SESSIONS - 1):.0f} B/session overall (found sets {found_sets / (SESSIONS - 1):.0f} B); "
            f"shared index: {shared}",
            "no per-session index",
            verdict(shared and index_file / (SESSIONS - 1) < 64),
        ),
        ("recall@5 (labelled set)", f"{recall:.2f} ({len(labelled())} queries, {len(misses)} misses)", "-", "-"),
    ]
    width = max(len(r[0]) for r in rows)
    for metric, value, target, ok in rows:
        print(f"{metric:<{width}}  {value}  [{target}] {ok}")
    return {
        "environment": environment(),
        "tools": TOOLS,
        "build_ms": {"median": b50, "max": bmax, "samples": build_ms},
        "build_cpu_ms": {"median": c50, "max": cmax},
        "loadavg": os.getloadavg(),
        "query_ms": {"p50": q50, "p99": q99, "n": len(query_ms)},
        "query_cpu_ms": {"p50": median(query_cpu_ms), "p99": pct(query_cpu_ms, 99)},
        "baseline_scan_ms": {"p50": s50},
        "index_bytes_tracemalloc": index_bytes,
        "index_bytes_self": index.size_bytes,
        "served_bytes": served_bytes,
        "sessions": {
            "n": SESSIONS,
            "index_module_bytes_per_session": index_file / (SESSIONS - 1),
            "total_bytes_per_session": total / (SESSIONS - 1),
            "shared_index": shared,
        },
        "recall_at_5": recall,
        "misses": misses,
    }


if __name__ == "__main__":
    results = main()
    out = json_out_path(sys.argv)
    if out:
        dump_json(out, json.loads(json.dumps(results, default=str)))
