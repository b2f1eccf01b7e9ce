"""The bundled demo, found as package data wherever the package is installed.

The demo lives once, in the repository's ``examples/`` folder: ``demo/gateway.yaml`` with its
drop-in (``demo/sources.d/``) and watched data (``demo/data/``), and ``upstreams/``, the example
MCP servers it spawns (the config names them by relative path, ``../upstreams/...``). The wheel
installs that folder as ``mcp_reconciler.examples`` (pyproject's ``package-dir``), and
:func:`bundled_demo` finds it with :mod:`importlib.resources`: the clone's folder in an editable
install, ``site-packages/mcp_reconciler/examples`` from a wheel, whatever the working directory.

The data directory is watched: a ``*.yml`` file added or changed there respawns the notes server
into a new revision, which is the point of the demo. A package installed for another user (a
system ``site-packages``) is read-only, so there the demo is served from a private copy of
``demo/`` and ``upstreams/`` in a temporary directory, removed when the block ends. The startup
banner prints the watched directory in both cases. Writing into one's own installation (a venv,
the clone) is allowed: that is the README's "add a note" step; ``pip uninstall`` leaves files it
did not install behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

#: The package that carries the demo (the repository's ``examples/`` folder).
PACKAGE = "mcp_reconciler.examples"
#: What the demo needs, relative to :data:`PACKAGE`: the config tree and the servers it spawns.
PARTS = ("demo", "upstreams")


@dataclass(frozen=True)
class BundledDemo:
    """Where the demo is served from. ``config`` is the gateway YAML; ``data_dir`` the directory
    its notes source watches; ``copied`` is true when both are in a private temporary copy
    (the installed package was not writable) that disappears when the block ends."""

    config: Path
    data_dir: Path
    copied: bool


def _copy_tree(src: Traversable, dst: Path) -> None:
    """Copy a resource tree to ``dst`` (works for any :class:`Traversable`, zipped or not)."""
    dst.mkdir(parents=True, exist_ok=True)
    for child in src.iterdir():
        if child.name == "__pycache__":
            continue
        if child.is_dir():
            _copy_tree(child, dst / child.name)
        else:
            (dst / child.name).write_bytes(child.read_bytes())


@contextlib.contextmanager
def bundled_demo(*, copy: bool | None = None) -> Iterator[BundledDemo]:
    """The demo for the duration of the block. ``copy=None`` serves the installed files in place
    when they are a directory this process may write to (so edits to the data are seen), and a
    temporary copy otherwise; ``True``/``False`` force either. The copy is removed on exit."""
    root = files(PACKAGE)
    in_place = isinstance(root, Path) and os.access(root / "demo" / "data", os.W_OK)
    if copy is False and not isinstance(root, Path):
        raise RuntimeError(f"{PACKAGE} is not installed as plain files; the demo must be copied")
    if copy is False or (copy is None and in_place):
        base = Path(str(root))
        yield BundledDemo(base / "demo" / "gateway.yaml", base / "demo" / "data", copied=False)
        return
    tmp = Path(tempfile.mkdtemp(prefix="mcp-reconciler-demo-"))
    try:
        for part in PARTS:
            _copy_tree(root / part, tmp / part)
        yield BundledDemo(tmp / "demo" / "gateway.yaml", tmp / "demo" / "data", copied=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def describe(demo: BundledDemo) -> str:
    """One banner line that says which directory the demo watches."""
    where = f"  demo data (watched; add or edit *.yml to respawn the notes server): {demo.data_dir}"
    if demo.copied:
        where += "\n    (a temporary copy: the installed package is read-only here; removed at exit)"
    return where
