"""Input fingerprints: what the tracked files looked like at one instant (docs/DESIGN.md, "Freshness").

A fingerprint is a stat sweep, never a content hash: every tracked path is stamped with
(exists, mtime_ns, size), absent paths included, and every glob with the exact, sorted set it
matched. Two sweeps of unchanged inputs produce equal digests; any create, delete, modify or new
glob match changes the digest.

Guarantees (I11):

* Absent files and globs that match nothing are reported as warnings, never silently zero.
* Stamps too recent to trust are reported as *racy*: a rewrite of the same size within the
  filesystem's timestamp granularity (a few ms on ext4, 1-2 s on some network and FAT
  filesystems) would leave mtime and size unchanged. A baseline with racy stamps therefore
  counts as changed on the next check, which costs one extra (no-op) reload and never a missed
  edit -- the same trade git makes for its index.
* Results are sorted, so digests do not depend on directory order or argument order.
* **Running out of resources is not a change.** ``glob.glob`` silently matches nothing in a
  directory it cannot list, so under descriptor exhaustion (``EMFILE``/``ENFILE``) a watched
  glob or an include glob looked emptied: sources were respawned or dropped and revisions
  published because the gateway had run out of descriptors. :func:`strict_glob` has glob's
  semantics but raises :class:`InputsUnreadableError` instead; callers keep their last good
  state and try again later.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.config import LoadedConfig

__all__ = [
    "CONFIG_KEY",
    "DEFAULT_RACY_WINDOW_NS",
    "EXHAUSTION_ERRNOS",
    "LARGE_SWEEP_WARNING",
    "FileStamp",
    "Fingerprint",
    "GlobStamp",
    "InputsUnreadableError",
    "Tracker",
    "strict_glob",
    "take_fingerprint",
]

CONFIG_KEY = "config"
"""Dirty key for "the config file, a drop-in, or an include-glob match changed"."""

DEFAULT_RACY_WINDOW_NS = 2_000_000_000
"""Stamps whose mtime is within this distance of the sweep are racy (covers 1 s and 2 s
timestamp granularity; a far-future mtime from clock skew is not racy, so it cannot keep a
source dirty forever)."""

LARGE_SWEEP_WARNING = 10_000
"""Above this many tracked paths a sweep is no longer "cheap"; say so instead of truncating."""


EXHAUSTION_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""errnos that say "this process or system ran out of something", not "the file changed"."""


class InputsUnreadableError(OSError):
    """Inputs could not be read for lack of resources (descriptors, memory): nothing can be
    concluded about them. Never a change, never a removal; retry later."""


def raise_if_exhausted(exc: OSError, what: str) -> None:
    """Re-raise ``exc`` as :class:`InputsUnreadableError` if it is resource exhaustion."""
    if exc.errno in EXHAUSTION_ERRNOS:
        raise InputsUnreadableError(exc.errno, f"cannot read {what}: {exc.strerror}") from exc


_MAGIC = re.compile(r"[*?[]")


def _names(directory: str, dirs_only: bool) -> list[str]:
    """Entry names of ``directory`` ('' is the working directory); an unlistable directory has
    none, unless it is unlistable for lack of resources."""
    try:
        with os.scandir(directory or os.curdir) as it:
            if not dirs_only:
                return [entry.name for entry in it]
            out = []
            for entry in it:
                try:
                    if entry.is_dir():
                        out.append(entry.name)
                except OSError as exc:
                    raise_if_exhausted(exc, entry.path)
            return out
    except OSError as exc:
        raise_if_exhausted(exc, directory or os.curdir)
        return []


def _descend(directory: str, dirs_only: bool) -> Iterator[str]:
    """``**``: every non-hidden path below ``directory``, relative to it, parents first."""
    for name in _names(directory, dirs_only):
        if name.startswith("."):
            continue
        yield name
        for below in _descend(os.path.join(directory, name) if directory else name, dirs_only):
            yield os.path.join(name, below)


def _walk(pattern: str, dirs_only: bool) -> Iterator[str]:
    head, tail = os.path.split(pattern)
    if not _MAGIC.search(pattern):
        if not tail:  # "dir/": directories only
            found = os.path.isdir(head)
        else:
            found = os.path.isdir(pattern) if dirs_only else os.path.lexists(pattern)
        if found:
            yield pattern
        return
    parents = _walk(head, True) if head and head != pattern and _MAGIC.search(head) else [head]
    for parent in parents:
        if tail == "**":
            yield os.path.join(parent, "")
            for below in _descend(parent, dirs_only):
                yield os.path.join(parent, below)
        elif _MAGIC.search(tail):
            names = _names(parent, dirs_only)
            if not tail.startswith("."):
                names = [n for n in names if not n.startswith(".")]
            for name in fnmatch.filter(names, tail):
                yield os.path.join(parent, name)
        elif tail:
            path = os.path.join(parent, tail)
            if os.path.isdir(path) if dirs_only else os.path.lexists(path):
                yield path
        elif os.path.isdir(parent):
            yield os.path.join(parent, "")


def strict_glob(pattern: str) -> list[str]:
    """``glob.glob(pattern, recursive=True)`` (hidden names are matched only by a pattern
    component that starts with ``.``; ``**`` is zero or more directories), except that a
    directory that cannot be listed for lack of resources raises
    :class:`InputsUnreadableError` instead of silently matching nothing."""
    found = list(_walk(pattern, False))
    return found[1:] if pattern == "**" else found  # not the working directory itself ('')


@dataclass(frozen=True, slots=True)
class FileStamp:
    """One tracked path at sweep time. Absent (or unstat-able) paths have ``exists=False`` and
    zero ``mtime_ns``/``size``."""

    path: str
    exists: bool
    mtime_ns: int = 0
    size: int = 0


@dataclass(frozen=True, slots=True)
class GlobStamp:
    """A glob pattern and the exact, sorted set of paths it matched."""

    pattern: str
    matches: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The stamps of one sweep: ``files`` sorted by path (explicit paths plus every glob match,
    each once), ``globs`` sorted by pattern, and ``digest`` over both.

    ``warnings`` lists absent paths and globs that matched nothing; ``racy`` lists paths whose
    mtime was too close to ``taken_at_ns`` to vouch for (see the module docstring). Neither is
    part of the digest."""

    files: tuple[FileStamp, ...]
    globs: tuple[GlobStamp, ...]
    digest: str
    warnings: tuple[str, ...] = ()
    racy: tuple[str, ...] = ()
    taken_at_ns: int = 0

    @property
    def paths(self) -> tuple[str, ...]:
        """Every tracked path of this sweep (explicit paths and glob matches), sorted, each once."""
        return tuple(stamp.path for stamp in self.files)

    def changed_paths(self, other: Fingerprint) -> tuple[str, ...]:
        """Sorted paths whose stamp differs between the two sweeps, including paths tracked by
        only one of them (created, deleted, newly matched or no longer matched)."""
        mine = {stamp.path: stamp for stamp in self.files}
        theirs = {stamp.path: stamp for stamp in other.files}
        return tuple(sorted(path for path in mine.keys() | theirs.keys() if mine.get(path) != theirs.get(path)))

    def is_stale(self, current: Fingerprint) -> bool:
        """Whether inputs read at this (baseline) sweep may differ from ``current``: the digests
        differ, or this baseline had racy stamps it cannot vouch for."""
        return bool(self.racy) or self.digest != current.digest


def take_fingerprint(
    paths: Iterable[str | os.PathLike[str]],
    globs: Iterable[str],
    *,
    now_ns: int | None = None,
    racy_window_ns: int = DEFAULT_RACY_WINDOW_NS,
) -> Fingerprint:
    """Stat-sweep ``paths`` and every match of ``globs`` (:func:`strict_glob`). Raises
    :class:`InputsUnreadableError` when resources ran out during the sweep (never a stamp).

    Relative paths and patterns resolve against the process's working directory; callers that
    care (the config tracker) pass absolute ones. Only ``os.stat`` and directory listing are
    used -- never file contents -- so the cost is one stat per tracked path plus the glob walks.
    ``now_ns`` (default: the wall clock) only affects the racy classification."""
    warnings: list[str] = []
    glob_stamps: list[GlobStamp] = []
    targets = {os.fspath(path) for path in paths}
    for pattern in sorted(set(globs)):
        matches = tuple(sorted(strict_glob(pattern)))
        if not matches:
            warnings.append(f"glob {pattern!r} matched no files")
        glob_stamps.append(GlobStamp(pattern, matches))
        targets.update(matches)

    now = time.time_ns() if now_ns is None else now_ns
    stat = os.stat
    stamps: list[FileStamp] = []
    racy: list[str] = []
    # Records are NUL-separated: a path cannot contain NUL and the other fields are numbers, so
    # distinct sweeps cannot collide by concatenation.
    chunks: list[str] = []
    for path in sorted(targets):
        try:
            st = stat(path)
        except (FileNotFoundError, NotADirectoryError):
            warnings.append(f"tracked file {path!r} does not exist")
            stamps.append(FileStamp(path, False))
            chunks.append(f"F\0{path}\0-\0")
            continue
        except OSError as exc:
            raise_if_exhausted(exc, path)
            warnings.append(f"tracked file {path!r} cannot be checked: {exc.strerror or type(exc).__name__}")
            stamps.append(FileStamp(path, False))
            chunks.append(f"F\0{path}\0-\0")
            continue
        mtime_ns, size = st.st_mtime_ns, st.st_size
        if -racy_window_ns < now - mtime_ns < racy_window_ns:
            racy.append(path)
        stamps.append(FileStamp(path, True, mtime_ns, size))
        chunks.append(f"F\0{path}\0{mtime_ns}\0{size}\0")
    for stamp in glob_stamps:
        chunks.append(f"G\0{stamp.pattern}\0{len(stamp.matches)}\0")
        chunks.extend(f"{match}\0" for match in stamp.matches)
    if len(stamps) > LARGE_SWEEP_WARNING:
        warnings.append(f"tracking {len(stamps)} paths; freshness checks may be slow")
    return Fingerprint(
        files=tuple(stamps),
        globs=tuple(glob_stamps),
        digest=hashlib.sha256("".join(chunks).encode("utf-8", "surrogateescape")).hexdigest(),
        warnings=tuple(warnings),
        racy=tuple(racy),
        taken_at_ns=now,
    )


class Tracker:
    """Fingerprints of every input one :class:`~reconciler.config.LoadedConfig` depends on: one
    for the config files plus include globs, one per source with ``watch`` globs.

    A tracker is a baseline and never changes after construction; :meth:`dirty_keys` sweeps
    again and compares, so it is safe to call from any thread while a newer tracker is being
    built."""

    def __init__(
        self,
        config: LoadedConfig,
        *,
        config_fingerprint: Fingerprint | None = None,
        now_ns: int | None = None,
        racy_window_ns: int = DEFAULT_RACY_WINDOW_NS,
    ) -> None:
        """``config_fingerprint`` lets a caller supply a sweep taken *before* it read the config
        (so an edit racing the read is still seen as a change); by default one is taken now."""
        self.config = config
        self._racy_window_ns = racy_window_ns
        self._config_inputs = (tuple(config.files), tuple(config.include_globs))
        if config_fingerprint is None:
            config_fingerprint = take_fingerprint(*self._config_inputs, now_ns=now_ns, racy_window_ns=racy_window_ns)
        self.config_fingerprint = config_fingerprint
        self._watches = {spec.name: tuple(spec.watch) for spec in config.specs if spec.watch}
        self.source_fingerprints: Mapping[str, Fingerprint] = MappingProxyType(
            {
                name: take_fingerprint((), patterns, now_ns=now_ns, racy_window_ns=racy_window_ns)
                for name, patterns in self._watches.items()
            }
        )

    def per_source_digest(self) -> dict[str, str]:
        """Source name → digest of its watched inputs (sources without ``watch`` are absent)."""
        return {name: fp.digest for name, fp in self.source_fingerprints.items()}

    @property
    def tracked_count(self) -> int:
        """Distinct paths stamped across the config and every source's watch globs."""
        paths = set(self.config_fingerprint.paths)
        for fp in self.source_fingerprints.values():
            paths.update(fp.paths)
        return len(paths)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Config warnings, then each source's, prefixed with the source's name."""
        out = [f"config: {w}" for w in self.config_fingerprint.warnings]
        for name, fp in self.source_fingerprints.items():
            out.extend(f"source {name!r}: {w}" for w in fp.warnings)
        return tuple(out)

    def dirty_keys(self, *, now_ns: int | None = None) -> set[str]:
        """Sweep again: :data:`CONFIG_KEY` if a config file or include match changed, and the
        name of each source whose watched inputs changed. Empty when nothing did."""
        dirty: set[str] = set()
        current = take_fingerprint(*self._config_inputs, now_ns=now_ns, racy_window_ns=self._racy_window_ns)
        if self.config_fingerprint.is_stale(current):
            dirty.add(CONFIG_KEY)
        for name, patterns in self._watches.items():
            current = take_fingerprint((), patterns, now_ns=now_ns, racy_window_ns=self._racy_window_ns)
            if self.source_fingerprints[name].is_stale(current):
                dirty.add(name)
        return dirty
