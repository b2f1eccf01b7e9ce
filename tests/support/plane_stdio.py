"""A stdio gateway on the new data plane (``api/plane/stdio.py``, issue 26) for tests: the engine
on ``--config`` and :class:`~mcp_reconciler.api.plane.stdio.StdioPlane` on this process's stdin
and stdout, until stdin ends. Tests only: ``mcp-reconciler stdio`` still runs the SDK-based plane.

    python -m tests.support.plane_stdio --config gw.yaml"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator

import anyio

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane.stdio import StdioPlane
from mcp_reconciler.api.stdio_input import stdin_lines
from mcp_reconciler.reconciler.gateway import Gateway


async def amain(config: str) -> None:
    async with Gateway(config) as gw:
        front = FrontDoor(gw.engine, gw.engine.sessions)
        out = anyio.wrap_file(sys.stdout.buffer)

        async def write(data: bytes) -> None:
            await out.write(data)
            await out.flush()

        with stdin_lines() as lines:
            assert lines is not None, "stdin must be a pipe"

            async def raw() -> AsyncIterator[bytes]:
                async for line in lines:
                    yield line.encode()

            async with anyio.create_task_group() as tg:
                await tg.start(front.run)
                await StdioPlane(front).serve(raw(), write)
                tg.cancel_scope.cancel()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    anyio.run(amain, p.parse_args().config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
