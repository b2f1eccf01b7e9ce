"""``api/stdio_input.py``: the stdio gateway's stdin, read on the event loop (a real pipe)."""

from __future__ import annotations

import os

import anyio
import pytest

from mcp_reconciler.api.stdio_input import StdinLines

pytestmark = pytest.mark.anyio


async def test_lines_split_across_reads_a_last_line_without_newline_and_bad_utf8() -> None:
    read, write = os.pipe()
    try:
        lines = StdinLines(read)
        os.write(write, b'{"a": 1}\n{"b"')
        with anyio.fail_after(5):
            assert await lines.__anext__() == '{"a": 1}\n'
            os.write(write, b': 2}\n\xff tail')
            assert await lines.__anext__() == '{"b": 2}\n'
            os.close(write)
            write = -1
            assert await lines.__anext__() == "\ufffd tail"  # replaced, as the SDK's reader does
            with pytest.raises(StopAsyncIteration):
                await lines.__anext__()
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


async def test_a_read_waiting_on_an_open_pipe_is_cancelled_at_once() -> None:
    read, write = os.pipe()  # the writer stays open and silent: a blocking read would never return
    try:
        lines = StdinLines(read)
        with anyio.fail_after(5):
            with anyio.move_on_after(0.05) as scope:
                await lines.__anext__()
        assert scope.cancelled_caught
    finally:
        os.close(read)
        os.close(write)
