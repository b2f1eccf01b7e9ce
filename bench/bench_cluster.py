"""Cluster store costs: the per-call authority check with the Redis store vs the in-memory one,
and cross-replica propagation of a grant.

Run from the repo root:  python bench/bench_cluster.py [--json PATH]   (needs ``redis-server``)

Setup: a ``redis-server`` on a unix socket without persistence; two in-process replicas
(each its own runtime, authority and ``ClusterSync`` with its own Redis client), one published
generation (one source, 20 tools).

- **per call**: what a forwarded call asks of the authority — ``by_token`` then ``resolve`` —
  for a session on a single replica (no cluster: today's path) and for a shared session on a
  replica whose store is Redis. Rounds are interleaved; ns per check, median and p99 over
  rounds, and the ratio redis / memory (target ≤ 1.05: the hot path reads the replica's cache,
  never the network).
- **propagation**: replica A grants a name and commits it to Redis; the time until replica B's
  authority has installed it (its change listener fired: what turns into ``list_changed``).
  p50 / p99 over the grants (target p99 ≤ 100 ms)."""

from __future__ import annotations

import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anyio  # noqa: E402
from _stats import dump_json, environment, json_out_path, pct, summary, verdict  # noqa: E402

from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, principal_id  # noqa: E402
from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.catalog import make_entry, merge  # noqa: E402
from mcp_reconciler.reconciler.cluster import StoreLedger  # noqa: E402
from mcp_reconciler.reconciler.cluster.redis_store import RedisStore  # noqa: E402
from mcp_reconciler.reconciler.cluster.sync import ClusterSync  # noqa: E402
from mcp_reconciler.reconciler.holds import HoldRegistry  # noqa: E402
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState  # noqa: E402
from mcp_reconciler.reconciler.runtime import Runtime  # noqa: E402

N = 20_000  # checks per round
ROUNDS = 21
GRANTS = 300
TARGET_RATIO = 1.05
TARGET_P99_MS = 100.0


def _catalog():  # type: ignore[no-untyped-def]
    spec = SourceSpec(name="bench")
    entries = tuple(
        make_entry(spec, EntryKind.TOOL, f"tool{j:02d}", {"name": f"tool{j:02d}", "inputSchema": {"type": "object"}})
        for j in range(20)
    )
    state = SourceState(source="bench", spec_digest=spec.digest, entries=entries, built_at=0.0)
    return merge([state], bounds=Bounds(), built_at=0.0)


def _checks(authority: Authority, token: str, generation, n: int) -> float:  # type: ignore[no-untyped-def]
    """ns per by_token + resolve."""
    tool = EntryKind.TOOL
    by_token, resolve = authority.by_token, authority.resolve
    t0 = time.perf_counter_ns()
    for _ in range(n):
        resolve(by_token(token), generation, tool, "bench__tool07")  # type: ignore[arg-type]
    return (time.perf_counter_ns() - t0) / n


async def _replica(name: str, url: str, runtime: Runtime) -> tuple[Authority, ClusterSync]:
    authority = Authority(runtime.bounds)
    store = RedisStore(url)
    sync = ClusterSync(
        store,
        replica_id=name,
        authority=authority,
        holds=HoldRegistry(runtime),
        runtime=runtime,
        refresh=lambda: anyio.sleep(0),  # no engine to refresh here: a no-op coroutine
        ledger=StoreLedger(store, name),
        staleness_s=3.0,
    )
    return authority, sync


async def main(url: str) -> dict[str, object]:
    catalog = _catalog()
    async with Runtime() as rt_a, Runtime() as rt_b, Runtime() as rt_mem:
        for rt in (rt_a, rt_b, rt_mem):
            rt.publish(catalog)
        gen = rt_a.current.generation  # type: ignore[union-attr]
        owner = principal_id("owner", "bench")
        memory = Authority()
        local = memory.create(owner, gen, policy=GrantPolicy.CURRENT)
        auth_a, sync_a = await _replica("A", url, rt_a)
        auth_b, sync_b = await _replica("B", url, rt_b)
        async with sync_a, sync_b:
            shared = auth_a.create(owner, gen, policy=GrantPolicy.CURRENT, shared=True)
            await sync_a.commit(shared.id)
            with anyio.fail_after(10):
                while auth_b.by_token(shared.token) is None:
                    await sync_b.applied.wait()
            # -- per call ---------------------------------------------------------------------
            mem_ns: list[float] = []
            redis_ns: list[float] = []
            gc.disable()
            try:
                for _ in range(ROUNDS):
                    mem_ns.append(_checks(memory, local.token, gen, N))
                    redis_ns.append(_checks(auth_b, shared.token, gen, N))
                    await anyio.sleep(0)  # let the replicas' readers run between rounds
            finally:
                gc.enable()
            # -- propagation ------------------------------------------------------------------
            target = auth_b.get(shared.id)
            assert target is not None
            delays: list[float] = []
            names = [f"bench__tool{j:02d}" for j in range(20)]
            for i in range(GRANTS):
                # Alternate narrowing and widening, so that every commit changes the grants.
                session = auth_a.get(shared.id)
                assert session is not None
                wanted = names[: 1 + i % 19]
                grants = {f"tool:{n}": session.grants.get(f"tool:{n}", "") for n in wanted}
                session.grants = type(session.grants)(grants)
                auth_a.mark_shared(session)
                changed = anyio.Event()
                remover = auth_b.on_changed(changed.set)
                t0 = anyio.current_time()
                await sync_a.commit(shared.id)
                with anyio.fail_after(10):
                    while len(target.grants) != len(wanted):
                        await changed.wait()
                        changed = anyio.Event()
                        remover()
                        remover = auth_b.on_changed(changed.set)
                delays.append((anyio.current_time() - t0) * 1000)
                remover()
    mem, red = summary(mem_ns), summary(redis_ns)
    ratio = red["median"] / mem["median"]
    p50, p99 = pct(delays, 50), pct(delays, 99)
    print("per-call authority check (by_token + resolve), ns:")
    print(f"  memory store (one replica) median {mem['median']:8.0f}  p99 {mem['p99']:8.0f}")
    print(f"  redis store (shared)       median {red['median']:8.0f}  p99 {red['p99']:8.0f}")
    print(f"  ratio redis / memory       {ratio:.3f}  (target <= {TARGET_RATIO})  {verdict(ratio <= TARGET_RATIO)}")
    print(f"cross-replica propagation of a grant ({GRANTS} grants): p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    print(f"  (target p99 <= {TARGET_P99_MS:g} ms)  {verdict(p99 <= TARGET_P99_MS)}")
    return {
        "per_call_ns": {"memory": mem, "redis": red, "ratio": ratio},
        "propagation_ms": {"p50": p50, "p99": p99, "n": len(delays)},
        "environment": environment(),
    }


def run() -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("bench_cluster needs redis-server (apt-get install -y redis-server)")
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    sock_path = os.path.join(workdir, "redis.sock")  # a unix socket of ours: no TCP port to pick (--port 0)
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", sock_path, "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.settimeout(0.2)
                    probe.connect(sock_path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # redis-server (another process) creating its socket; sync, bounded
        result = anyio.run(main, f"unix://{sock_path}?db=0")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, result)


if __name__ == "__main__":
    run()
