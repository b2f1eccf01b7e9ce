"""``api/stdio_input.py``: the stdio gateway's stdin, read on the event loop (a real pipe), each
line bounded while it is read (I18)."""

from __future__ import annotations

import os

import anyio
import pytest

from mcp_reconciler.api.stdio_input import LINE_BOUND_KEY, StdinLines
from mcp_reconciler.reconciler.stdio_peer import Refused

pytestmark = pytest.mark.anyio


async def test_lines_split_across_reads_a_last_line_without_newline_and_bad_utf8() -> None:
    read, write = os.pipe()
    try:
        lines = StdinLines(read, 1024)
        os.write(write, b'{"a": 1}\n\n{"b"')
        with anyio.fail_after(5):
            assert await lines.__anext__() == b'{"a": 1}'  # the blank line is dropped
            os.write(write, b": 2}\n\xff tail")
            assert await lines.__anext__() == b'{"b": 2}'
            os.close(write)
            write = -1
            assert await lines.__anext__() == "\ufffd tail".encode()  # replaced, as the SDK's reader does
            with pytest.raises(StopAsyncIteration):
                await lines.__anext__()
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


async def test_a_read_waiting_on_an_open_pipe_is_cancelled_at_once() -> None:
    read, write = os.pipe()  # the writer stays open and silent: a blocking read would never return
    try:
        lines = StdinLines(read, 1024)
        with anyio.fail_after(5):
            with anyio.move_on_after(0.05) as scope:
                await lines.__anext__()
        assert scope.cancelled_caught
    finally:
        os.close(read)
        os.close(write)


async def test_I18_a_line_of_n_bytes_is_read_and_one_of_n_plus_1_is_refused_then_reading_goes_on() -> None:
    n = 2048
    at_bound = b'{"id": 1, "x": "' + b"a" * (n - 18) + b'"}'
    over = b'{"id": 2, "x": "' + b"a" * (n - 17) + b'"}'
    assert (len(at_bound), len(over)) == (n, n + 1)
    read, write = os.pipe()
    try:
        lines = StdinLines(read, n)

        async def feed() -> None:
            for data in (at_bound + b"\n", over[:1000], over[1000:] + b"\n", b'{"id": 3}\n'):
                await anyio.wait_writable(write)
                os.write(write, data)

        got: list[bytes | Refused] = []
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                for _ in range(3):
                    got.append(await lines.__anext__())
        assert got[0] == at_bound
        refused = got[1]
        assert isinstance(refused, Refused)
        assert (refused.bound, refused.limit, refused.size) == (LINE_BOUND_KEY, n, n + 1)
        assert refused.prefix.startswith(b'{"id": 2')  # its id, to answer the request
        assert got[2] == b'{"id": 3}'  # the rest of the long line was skipped, not taken as a line
    finally:
        os.close(read)
        os.close(write)


async def test_a_regular_file_is_read_to_its_end() -> None:
    """epoll refuses regular files: they are read directly (a read never blocks)."""
    import tempfile

    with tempfile.TemporaryFile() as f:
        f.write(b'{"a": 1}\n{"b": 2}')
        f.flush()
        f.seek(0)
        lines = StdinLines(f.fileno(), 1024)
        with anyio.fail_after(5):
            assert [line async for line in lines] == [b'{"a": 1}', b'{"b": 2}']
