"""``mcp-reconciler serve`` on uvloop's event loop, for ``bench_dataplane.py --loops=asyncio,uvloop``.

uvloop is not a dependency (ADR 0041: measured, not adopted); install it to measure it again
(``pip install uvloop``). Everything after the script name is ``mcp-reconciler``'s own command
line. The policy is set before the command runs, so ``anyio.run`` (which makes its loop from the
policy) and uvicorn inside it run on uvloop; nothing else differs from ``serve``."""

from __future__ import annotations

import asyncio
import sys

import uvloop

from mcp_reconciler.api.cli import main

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    raise SystemExit(main(sys.argv[1:]))
