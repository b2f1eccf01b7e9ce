"""``mcp-reconciler reconcile --config FILE``: run the engine headless on a config file and
print each publication and status change until interrupted (SIGINT/SIGTERM stop it cleanly)."""

from __future__ import annotations

import json
import signal
import sys

import anyio

from mcp_reconciler.api.views import status_json
from mcp_reconciler.reconciler.config import ConfigError
from mcp_reconciler.reconciler.gateway import Gateway
from mcp_reconciler.reconciler.generation import Generation


async def _run(path: str, once: bool) -> int:
    stdout_closed = anyio.CancelScope()  # whoever read our stdout is gone (`reconcile | head`)

    def on_publish(new: Generation, old: Generation | None) -> None:
        tools = sorted(new.tools)
        try:
            print(f"published revision {new.revision}: {len(tools)} tools, digest {new.digest[:12]}", flush=True)
        except BrokenPipeError:
            stdout_closed.cancel()

    try:
        async with Gateway(path) as gw:
            engine = gw.engine
            engine.add_listener(on_publish)
            cur = engine.current
            if cur is not None:
                on_publish(cur.generation, None)
            print(json.dumps(status_json(await engine.status()), indent=2), flush=True)
            if once:
                return 0
            with stdout_closed, anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                print("SIGHUP reloads the config; Ctrl-C stops.", flush=True)  # scripts may signal from here on
                async for sig in signals:
                    if sig == signal.SIGHUP:
                        out = await engine.refresh(["config"])
                        print(f"SIGHUP: reload cycle {out.status}, revision {out.revision}", flush=True)
                        continue
                    break
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if stdout_closed.cancel_called:
        raise BrokenPipeError("stdout closed")  # the CLI exits 0 quietly on a closed pipe
    return 0


def run(path: str, once: bool = False) -> int:
    """``mcp-reconciler reconcile``: run the engine on the config at ``path`` and print its
    publications until SIGINT/SIGTERM (SIGHUP reloads); ``once`` stops after the first status.
    Returns 0, or 1 for an invalid config."""
    return anyio.run(_run, path, once)
