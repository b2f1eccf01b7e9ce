"""Open many TCP connections to one loopback port and send nothing on them.

    python -m tests.support.idle_flood --port P --count N --progress FILE [--hold-until FILE]

Connects ``N`` sockets (non-blocking, so connects that wait on a full accept queue overlap),
writes how many were opened (and how many the peer has closed so far) to ``--progress`` as
``opened closed`` after every thousand, and holds them open until ``--hold-until`` exists (or
for at most 120 s), then closes everything and exits 0. A descriptor limit of its own bounds
``N`` (this process raises its soft limit to the hard one first)."""

from __future__ import annotations

import argparse
import errno
import os
import resource
import socket
import time
from pathlib import Path


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--progress", required=True)
    p.add_argument("--hold-until")
    args = p.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    progress = Path(args.progress)
    socks: list[socket.socket] = []
    failed = 0
    for i in range(args.count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", args.port))
        if rc not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
        else:
            socks.append(s)
        if (i + 1) % 1000 == 0:
            _write(progress, f"{len(socks)} 0 {failed}")
    _write(progress, f"{len(socks)} 0 {failed} done")
    hold = Path(args.hold_until) if args.hold_until else None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (hold is not None and hold.exists()):
        time.sleep(0.2)  # the hold file comes from the test (another process); bounded by the deadline
    closed = 0
    for s in socks:  # how many did the gateway close (or answer and close) on us?
        try:
            s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            closed += 1  # EOF, or a farewell (408/503) before the close
        except BlockingIOError:
            pass  # still open, nothing received
        except OSError:
            closed += 1  # reset, or never connected
        s.close()
    _write(progress, f"{len(socks)} {closed} {failed} exited")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
