"""Real descriptor exhaustion in the test process, for a bounded block.

:func:`descriptors_exhausted` lowers the soft ``RLIMIT_NOFILE`` to a little above what is open,
then opens ``/dev/null`` until ``open`` fails with ``EMFILE``: inside the block every new
descriptor (a file, a directory listing, a socket, a pipe) fails exactly as it does in a
gateway that 20,000 idle connections ran out of descriptors. Leaving the block closes what it
opened and restores the limit. Keep the block short and free of anything that needs a new
descriptor to report a failure (pytest's captures are already open)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Iterator


@contextlib.contextmanager
def descriptors_exhausted(headroom: int = 16) -> Iterator[int]:
    """Exhaust this process's descriptors for the block; yields how many were held."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, in_use + headroom), hard))
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE, exc
                break
        yield len(held)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
