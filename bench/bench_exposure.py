"""What an outsider can make a served gateway hold (issue 10: RSS and descriptors, before/after).

Run from the repo root:  python bench/bench_exposure.py [--quick] [--json PATH]

Every scenario starts its own ``mcp-reconciler serve`` subprocess with this interpreter (so the
same script measures any checkout: run it with another checkout's interpreter to compare) on a
config that uses no setting newer than the oldest gateway measured, and reads the gateway's RSS
and open descriptors from /proc:

1. **Idle transport sessions** (item 6): N legacy (2025-11-25) ``initialize`` requests, each
   opening a streamable-HTTP session that then stays idle; RSS per idle session. Requests carry
   session tokens (one per 200 sessions, created with ``POST /v1/sessions``).
2. **Idle connections** (item 5): 20,000 TCP connections that send nothing (two attacker
   processes), against a gateway whose RLIMIT_NOFILE is 1,024; ``/healthz`` probed on fresh
   connections throughout (answered / failed, max latency), log bytes, descriptors, RSS.
3. **Big body** (item 7): a chunked body to ``/v1/refresh`` until the gateway answers (up to
   1 GiB); bytes sent before the answer, RSS peak.
4. **Big header** (item 7): one header value streamed until the gateway answers (up to 100 MB).

Figures are printed, never asserted (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx2

REPO_ROOT = Path(__file__).resolve().parents[1]
OPERATOR = "bench-operator-token-0123456789"
ENDPOINT = re.compile(r"MCP endpoint: (http://127\.0\.0\.1:(\d+)/mcp)")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}},
}
MIB = 2**20


class Gateway:
    def __init__(self, tmp: Path, *, nofile: int | None = None) -> None:
        cfg = tmp / "gateway.yaml"
        source = {
            "name": "up",
            "stdio": {"command": "python", "args": ["-m", "tests.support.upstream_server", "--tools", "echo"]},
        }
        source["stdio"]["cwd"] = str(REPO_ROOT)  # type: ignore[index]
        cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": [source]}))
        self.out, self.err = tmp / "out", tmp / "err"
        env = {**os.environ, "MCP_RECONCILER_OPERATOR_TOKENS": OPERATOR}

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                preexec_fn=limit,
            )
        deadline = time.monotonic() + 60
        while True:
            m = ENDPOINT.search(self.out.read_text(errors="replace"))
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start: {self.err.read_text()[-2000:]}")
            time.sleep(0.05)  # the gateway (another process) starting, from sync code: bounded by deadline
        self.base = self.url.removesuffix("/mcp")

    def rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_bytes(self) -> int:
        return self.err.stat().st_size

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PeakRss:
    """Sample a process's RSS every 20 ms in a thread; ``peak`` is the highest seen."""

    def __init__(self, gw: Gateway) -> None:
        self.gw, self.peak, self._stop = gw, gw.rss(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.gw.rss())
            except OSError:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


# -- 1. idle transport sessions ---------------------------------------------------------------------


async def idle_sessions(tmp: Path, n: int) -> dict[str, Any]:
    gw = Gateway(tmp)
    try:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=30, limits=httpx2.Limits(max_connections=32)) as http:
            tokens = []
            for _ in range((n + 199) // 200):
                r = await http.post(f"{gw.base}/v1/sessions", headers={"authorization": f"Bearer {OPERATOR}"}, json={})
                r.raise_for_status()
                tokens.append(r.json()["token"])
            await asyncio.sleep(0.5)  # a settle before the RSS/fd baseline (the measure), not a wait
            rss0, fds0 = gw.rss(), gw.fds()
            sem = asyncio.Semaphore(16)
            statuses: dict[int, int] = {}

            async def one(i: int) -> None:
                async with sem:
                    r = await http.post(
                        gw.url, json=INITIALIZE, headers={**headers, "authorization": f"Bearer {tokens[i // 200]}"}
                    )
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

            t0 = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(n)))
            elapsed = time.monotonic() - t0
            await asyncio.sleep(1.0)  # a settle before the RSS/fd reading (the measure), not a wait
            rss1, fds1 = gw.rss(), gw.fds()
        opened = statuses.get(200, 0)
        return {
            "sessions_requested": n,
            "statuses": statuses,
            "seconds": round(elapsed, 1),
            "rss_before_mib": round(rss0 / MIB, 1),
            "rss_after_mib": round(rss1 / MIB, 1),
            "rss_per_idle_session_kib": round((rss1 - rss0) / max(opened, 1) / 1024, 1),
            "fds_before": fds0,
            "fds_after": fds1,
        }
    finally:
        gw.close()


# -- 2. idle connections ------------------------------------------------------------------------------


async def idle_connections(tmp: Path, per_attacker: int, attackers: int = 2) -> dict[str, Any]:
    gw = Gateway(tmp, nofile=1024)
    procs: list[subprocess.Popen[bytes]] = []
    hold = tmp / "release"
    try:
        rss0, fds0, log0 = gw.rss(), gw.fds(), gw.log_bytes()
        progress = [tmp / f"attacker-{i}" for i in range(attackers)]
        for p in progress:
            argv = [sys.executable, "-m", "tests.support.idle_flood", "--port", str(gw.port)]
            argv += ["--count", str(per_attacker), "--progress", str(p), "--hold-until", str(hold)]
            # Started once each, owned and reaped below.
            procs.append(subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL))  # noqa: ASYNC220
        latencies: list[float] = []
        failures = 0
        peak_fds = fds0
        peak = PeakRss(gw)
        settled: float | None = None
        t0 = time.monotonic()
        while (settled is None or time.monotonic() - settled < 5) and time.monotonic() - t0 < 120 and gw.alive():
            t = time.monotonic()
            try:
                async with httpx2.AsyncClient(timeout=10) as http:
                    ok = (await http.get(f"{gw.base}/healthz")).status_code == 200
            except httpx2.HTTPError:
                ok = False
            if ok:
                latencies.append(time.monotonic() - t)
            else:
                failures += 1
            try:
                peak_fds = max(peak_fds, gw.fds())
            except OSError:
                break
            if settled is None and all(p.exists() and p.read_text().endswith("done") for p in progress):
                settled = time.monotonic()
            await asyncio.sleep(0.1)  # the fd/RSS sampling period during the flood (the measure)
        rss_peak = peak.stop()
        held_fds = gw.fds() if gw.alive() else -1
        hold.touch()
        for p in procs:
            p.wait(timeout=60)
        return {
            "connections": attackers * per_attacker,
            "gateway_nofile": 1024,
            "healthz_answered": len(latencies),
            "healthz_failed": failures,
            "healthz_max_ms": round(max(latencies) * 1000) if latencies else None,
            "fds_before": fds0,
            "fds_peak": peak_fds,
            "fds_while_held": held_fds,
            "rss_before_mib": round(rss0 / MIB, 1),
            "rss_peak_mib": round(rss_peak / MIB, 1),
            "log_bytes": gw.log_bytes() - log0,
            "gateway_alive": gw.alive(),
        }
    finally:
        hold.touch()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        gw.close()


# -- 3 and 4. big body, big header ----------------------------------------------------------------


def _stream_until_answered(gw: Gateway, head: bytes, chunk: bytes, limit: int, *, chunked: bool) -> dict[str, Any]:
    rss0 = gw.rss()
    peak = PeakRss(gw)
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(head)
    s.setblocking(False)
    sent, answer, t0 = 0, b"", time.monotonic()
    frame = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk
    unsent = b""  # a frame is written whole (non-blocking sends may take part of it)
    try:
        while sent < limit or unsent:
            try:
                answer += s.recv(4096)
                if answer:
                    break
            except BlockingIOError:
                pass
            if not unsent:
                unsent, sent = frame, sent + len(chunk)
            try:
                unsent = unsent[s.send(unsent) :]
            except BlockingIOError:
                time.sleep(0.001)  # the attacker's send buffer is full: back off (the attack's pace)
        s.setblocking(True)
        s.settimeout(300)
        while b"\r\n" not in answer:
            more = s.recv(4096)
            if not more:
                break
            answer += more
    except OSError:
        pass
    finally:
        s.close()
    elapsed = time.monotonic() - t0
    rss_peak = peak.stop()
    time.sleep(1.0)  # a settle before the final reading (the measure), not a wait
    return {
        "answer": answer.split(b"\r\n", 1)[0].decode(errors="replace") or "(connection closed)",
        "sent_mib_before_answer": round(sent / MIB, 1),
        "seconds": round(elapsed, 2),
        "rss_before_mib": round(rss0 / MIB, 1),
        "rss_peak_mib": round(rss_peak / MIB, 1),
        "rss_after_mib": round(gw.rss() / MIB, 1),
    }


def big_body(tmp: Path, limit: int) -> dict[str, Any]:
    gw = Gateway(tmp)
    try:
        head = (
            "POST /v1/refresh HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {OPERATOR}\r\ntransfer-encoding: chunked\r\n\r\n"
        ).encode()
        return _stream_until_answered(gw, head, b" " * 65536, limit, chunked=True)
    finally:
        gw.close()


def big_header(tmp: Path, limit: int) -> dict[str, Any]:
    gw = Gateway(tmp)
    try:
        head = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-huge: "
        return _stream_until_answered(gw, head, b"h" * 65536, limit, chunked=False)
    finally:
        gw.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--only", default="sessions,connections,body,header")
    args = parser.parse_args()
    only = set(args.only.split(","))
    out: dict[str, Any] = {"python": sys.executable}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in ("sessions", "connections", "body", "header"):
            if name not in only:
                continue
            where = tmp / name
            where.mkdir()
            print(f"-- {name} ...", file=sys.stderr, flush=True)
            if name == "sessions":
                out[name] = asyncio.run(idle_sessions(where, 500 if args.quick else 2000))
            elif name == "connections":
                out[name] = asyncio.run(idle_connections(where, 2_500 if args.quick else 10_000))
            elif name == "body":
                out[name] = big_body(where, (128 if args.quick else 1024) * MIB)
            else:
                out[name] = big_header(where, (20 if args.quick else 100) * MIB)
            print(f"{name}: {json.dumps(out[name])}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
