"""A gateway as its own process (``mcp-reconciler serve``), the way an operator runs it.

:func:`gateway_process` starts ``argv`` (a ``serve`` command line), reads its stdout banner until
it names the MCP endpoint, and yields a :class:`GatewayProcess`; leaving the block stops it with
SIGINT (then SIGKILL after a bound) and reaps it. Its stdout lines keep being collected (a test
can wait for a line, e.g. ``SIGHUP: reload cycle ...``); stderr is collected for failure
messages. :func:`child_pids` and :func:`cmdline` describe the processes the gateway started."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from tests.support.children import child_pids as child_pids
from tests.support.children import cmdline as cmdline

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_ENDPOINT = re.compile(r"MCP endpoint: (http://\S+/mcp)")
_DATA_DIR = re.compile(r"demo data \(watched[^)]*\): (.+)$")


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


@dataclass
class GatewayProcess:
    """A running ``mcp-reconciler serve``: its process, endpoint and output so far."""

    process: anyio.abc.Process
    url: str
    lines: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)
    _eof: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return self.url.removesuffix("/mcp")

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    @property
    def data_dir(self) -> Path | None:
        """The demo's watched data directory, when the banner names one (the bundled demo)."""
        for line in self.lines:
            m = _DATA_DIR.search(line)
            if m:
                return Path(m.group(1).strip())
        return None

    def upstreams(self) -> dict[int, str]:
        """The gateway's live child processes: pid → command line."""
        return {pid: cmdline(pid) for pid in child_pids(self.pid) if alive(pid)}

    def _append(self, line: str) -> None:
        self.lines.append(line)
        self._notify()

    def _end_of_output(self) -> None:
        self._eof = True
        self._notify()

    def _notify(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()

    async def wait_line(self, pattern: str, *, after: int = 0, timeout_s: float = STARTUP_TIMEOUT_S) -> str:
        """The first stdout line at index ``after`` or later that matches ``pattern``."""
        regex = re.compile(pattern)
        try:
            with anyio.fail_after(timeout_s):
                while True:
                    changed = self._changed
                    for line in self.lines[after:]:
                        if regex.search(line):
                            return line
                    if self._eof:  # no line will come: report how it ended
                        await self.process.wait()
                        raise AssertionError(f"gateway exited ({self.process.returncode}): {self.describe()}")
                    await changed.wait()
        except TimeoutError:
            raise AssertionError(f"no stdout line matching {pattern!r}: {self.describe()}") from None

    def describe(self) -> str:
        return "stdout:\n" + "\n".join(self.lines) + "\nstderr:\n" + "\n".join(self.stderr[-40:])


async def _pump(
    stream: anyio.abc.ByteReceiveStream, append: Callable[[str], None], at_end: Callable[[], None] | None = None
) -> None:
    buffered = b""
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in stream:
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            for raw in complete:
                append(raw.decode(errors="replace"))
    if buffered:
        append(buffered.decode(errors="replace"))
    if at_end is not None:
        at_end()


async def stop(process: anyio.abc.Process, sig: int = signal.SIGINT, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """Signal ``process`` and wait (bounded) for its exit code; SIGKILL if the bound passes."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with anyio.move_on_after(timeout_s):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
            raise AssertionError(f"the gateway ignored signal {sig} for {timeout_s} s; killed it")
    return process.returncode


@contextlib.asynccontextmanager
async def gateway_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    ready: str = _ENDPOINT.pattern,
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> AsyncIterator[GatewayProcess]:
    """Run ``argv`` (``... serve --port 0 ...``) until a stdout line matches ``ready`` (default:
    the banner naming the MCP endpoint, which sets ``url``); stop it on exit."""
    process = await anyio.open_process(
        list(argv), cwd=cwd, env=dict(os.environ if env is None else env), stdin=subprocess.DEVNULL
    )
    try:
        async with anyio.create_task_group() as tg:
            gw = GatewayProcess(process, url="")
            assert process.stdout is not None and process.stderr is not None
            tg.start_soon(_pump, process.stdout, gw._append, gw._end_of_output)
            tg.start_soon(_pump, process.stderr, gw.stderr.append)
            await gw.wait_line(ready, timeout_s=startup_timeout_s)
            m = next((m for m in map(_ENDPOINT.search, gw.lines) if m), None)
            gw.url = m.group(1) if m else ""
            try:
                yield gw
            finally:
                with anyio.CancelScope(shield=True):
                    await stop(process)
                # Its output ends at EOF; bounded, in case a leaked upstream still holds stderr.
                tg.cancel_scope.deadline = anyio.current_time() + 5
    finally:
        if process.returncode is None:  # startup failed: do not leave it behind
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
