"""The config file as a :class:`~reconciler.desired.DesiredStateSource` with watch-mode freshness.

Guarantees:

* **I11, last good keeps serving.** An invalid config never replaces a valid one: ``load``
  returns the last good specs with ``config_error`` set (and a warning). Only when no config
  was ever valid does ``load`` raise the :class:`~reconciler.config.ConfigError`.
* **No edit is lost to a race with the read.** The config inputs are stamped *before* they are
  read, and the read is repeated while the set of files it depends on is still moving, so an
  edit landing during a load shows up as a change on the next :meth:`ConfigDesiredState.poll`.
  Watch globs are stamped during ``load``, i.e. before the engine (re)spawns the source that
  reads them.
* Blocking file I/O runs in a worker thread; the event loop only swaps references.
* **Out of resources is not an edit.** When the inputs cannot be read for lack of descriptors
  or memory (:class:`~reconciler.freshness.InputsUnreadableError`), ``load`` changes nothing
  -- last good config, baseline and error stay as they were -- and raises
  :class:`~reconciler.errors.CycleFailedError`, so the cycle fails without publishing and keeps
  its dirty keys (retried with backoff); ``poll`` reports no change and the next sweep retries.

No HTTP framework is imported here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from mcp_reconciler.reconciler.config import ConfigError, GatewaySettings, LoadedConfig, load_config
from mcp_reconciler.reconciler.desired import DesiredState, TrackedInput
from mcp_reconciler.reconciler.errors import CycleFailedError
from mcp_reconciler.reconciler.freshness import (
    CONFIG_KEY,
    DEFAULT_RACY_WINDOW_NS,
    Fingerprint,
    InputsUnreadableError,
    Tracker,
    take_fingerprint,
)
from mcp_reconciler.reconciler.redaction import SECRETS

__all__ = ["CONFIG_KEY", "ConfigDesiredState"]

log = logging.getLogger(__name__)

_MAX_READS = 3
"""Reads per load while the set of config files keeps changing under us; after that the
baseline is deliberately inconsistent, so the next poll reports "config" and we try again."""

_CONFIG_ERROR_MAX_CHARS = 8 * 1024


@dataclass(frozen=True, slots=True)
class _Outcome:
    tracker: Tracker
    loaded: LoadedConfig | None
    error: ConfigError | None


#: At most this many tracked files are listed in status (the count, ``tracked_files``, is exact).
MAX_LISTED_INPUTS = 200


def tracked_inputs(tracker: Tracker) -> tuple[TrackedInput, ...]:
    """``tracker``'s files as of its sweep: config files first, then each source's watched files
    (at most :data:`MAX_LISTED_INPUTS`)."""
    out = [
        TrackedInput(f.path, None, f.exists, f.mtime_ns / 1e9 if f.exists else None)
        for f in tracker.config_fingerprint.files
    ]
    for name, fp in tracker.source_fingerprints.items():
        out.extend(TrackedInput(f.path, name, f.exists, f.mtime_ns / 1e9 if f.exists else None) for f in fp.files)
    return tuple(out[:MAX_LISTED_INPUTS])


class ConfigDesiredState:
    """Desired state read from a YAML config file and its drop-ins (``reload_mode="watch"``).

    ``load`` re-reads everything and fingerprints every input; ``poll`` is the cheap stat sweep
    a watcher runs between loads to learn which dirty keys to mark."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        environ: Mapping[str, str] | None = None,
        max_sources: int | None = None,
        racy_window_ns: int = DEFAULT_RACY_WINDOW_NS,
    ) -> None:
        self._path = os.fspath(path)
        self._abs = Path(os.path.abspath(self._path))
        self._environ = environ
        self._max_sources = max_sources
        self._racy_window_ns = racy_window_ns
        self._lock = anyio.Lock()
        self._good: LoadedConfig | None = None
        self._good_at: float | None = None
        self._error: ConfigError | None = None
        self._tracker: Tracker | None = None
        self._logged_error: str | None = None
        self._unreadable = False

    @property
    def last_good(self) -> LoadedConfig | None:
        """The newest valid config, or ``None`` if none has been loaded yet."""
        return self._good

    @property
    def settings(self) -> GatewaySettings | None:
        """The gateway settings of the newest valid config, or None if none has been loaded yet."""
        return None if self._good is None else self._good.settings

    @property
    def config_error(self) -> ConfigError | None:
        """The error of the newest load, ``None`` when the newest config on disk is valid."""
        return self._error

    async def load(self) -> DesiredState:
        """Read the config and fingerprint its inputs.

        Raises :class:`ConfigError` only when no valid config was ever loaded."""
        async with self._lock:
            try:
                outcome = await anyio.to_thread.run_sync(self._load_sync, self._tracker, self._good)
            except InputsUnreadableError as exc:
                if self._good is None:
                    raise
                self._note_unreadable(exc)
                raise CycleFailedError(
                    "the config could not be read (out of file descriptors or memory); "
                    "still serving the last good config; retrying"
                ) from None
            self._unreadable = False
            # State changes happen here, on the event loop, after the thread finished: a
            # cancelled load leaves the previous baseline in place (so the change stays visible).
            self._tracker = outcome.tracker
            self._error = outcome.error
            tracker = outcome.tracker
            if outcome.loaded is not None:
                SECRETS.add(outcome.loaded.secret_values)  # before anything can log them
                self._logged_error = None
                self._good = outcome.loaded
                self._good_at = time.time()
                return DesiredState(
                    specs=outcome.loaded.specs,
                    reload_mode="watch",
                    tracked_files=tracker.tracked_count,
                    warnings=tracker.warnings,
                    inputs_digest=tracker.per_source_digest(),
                    config_error=None,
                    sessions=outcome.loaded.sessions,
                    inputs=tracked_inputs(tracker),
                    curation=outcome.loaded.curation,
                    discovery=outcome.loaded.discovery,
                    approvals=outcome.loaded.approvals,
                    limits=outcome.loaded.limits,
                )
            assert outcome.error is not None
            rendered = str(outcome.error)
            # Failed cycles are retried; say it once per distinct error, not once per retry.
            if rendered != self._logged_error:
                log.warning("config %s is invalid:\n%s", self._path, rendered)
                self._logged_error = rendered
            if self._good is None:
                raise outcome.error
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._good_at or 0))
            if len(rendered) > _CONFIG_ERROR_MAX_CHARS:
                rendered = rendered[:_CONFIG_ERROR_MAX_CHARS] + "\n... (truncated)"
            return DesiredState(
                specs=self._good.specs,
                reload_mode="watch",
                tracked_files=tracker.tracked_count,
                warnings=(
                    *tracker.warnings,
                    f"config {self._path} is invalid ({len(outcome.error.problems)} problem(s)); "
                    f"still serving the last good config, loaded at {when}",
                ),
                inputs_digest=tracker.per_source_digest(),
                config_error=rendered,
                sessions=self._good.sessions,
                inputs=tracked_inputs(tracker),
                curation=self._good.curation,
                discovery=self._good.discovery,
                approvals=self._good.approvals,
                limits=self._good.limits,
            )

    async def poll(self) -> set[str]:
        """Dirty keys since the last load: :data:`CONFIG_KEY` when a config file, drop-in or
        include-glob match changed, plus each source whose watched inputs changed. Before the
        first load everything is unknown, so the answer is ``{CONFIG_KEY}``."""
        tracker = self._tracker
        if tracker is None:
            return {CONFIG_KEY}
        try:
            return await anyio.to_thread.run_sync(tracker.dirty_keys)
        except InputsUnreadableError as exc:
            self._note_unreadable(exc)
            return set()  # nothing can be concluded now; the next sweep looks again

    def _note_unreadable(self, exc: InputsUnreadableError) -> None:
        """Say it once per episode (an episode ends with the next successful load)."""
        if not self._unreadable:
            self._unreadable = True
            log.warning("config inputs cannot be read (%s); keeping the last good config and retrying", exc.strerror)

    async def changed(self) -> bool:
        """Whether any tracked input changed since the last load (a cheap stat sweep)."""
        return bool(await self.poll())

    def _load_sync(self, previous: Tracker | None, good: LoadedConfig | None) -> _Outcome:
        if previous is not None:
            files, globs = tuple(previous.config.files), tuple(previous.config.include_globs)
        else:
            files, globs = (self._abs,), ()
        loaded: LoadedConfig | None = None
        error: ConfigError | None = None
        stamped: Fingerprint | None = None
        for _ in range(_MAX_READS):
            stamped = take_fingerprint(files, globs, racy_window_ns=self._racy_window_ns)
            try:
                loaded = load_config(self._path, environ=self._environ, max_sources=self._max_sources)
                error = None
                read_files, read_globs = loaded.files, loaded.include_globs
            except ConfigError as exc:
                loaded, error = None, exc
                # Keep watching what the broken config referenced *and* what the good one did,
                # so that the fix -- wherever it lands -- is noticed.
                prior_files = good.files if good is not None else ()
                read_files = tuple(dict.fromkeys((self._abs, *exc.files, *prior_files)))
                if exc.include_globs is not None:
                    read_globs = exc.include_globs
                else:
                    read_globs = good.include_globs if good is not None else globs
            settled = set(read_files) == set(files) and tuple(read_globs) == tuple(globs)
            files, globs = tuple(read_files), tuple(read_globs)
            if settled:
                break
        basis = loaded or good or LoadedConfig(self._abs, GatewaySettings(), (), (), ())
        view = dataclasses.replace(basis, files=files, include_globs=globs)
        tracker = Tracker(view, config_fingerprint=stamped, racy_window_ns=self._racy_window_ns)
        return _Outcome(tracker=tracker, loaded=loaded, error=error)
