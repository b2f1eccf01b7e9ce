"""What a config load reports: one :class:`ConfigProblem` per ``file:line: field: message (hint)``,
all of one load in a :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Problems and errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One finding in a config file.

    ``file`` is the path as the operator named it (drop-ins relative to the main file's
    directory as named), ``line`` is 1-based (``None`` when the problem is not tied to a line,
    e.g. an unreadable file), ``field`` is a dotted path like ``sources[1].http.url`` (empty for
    the whole document). No field ever holds an interpolated value."""

    file: str
    line: int | None
    field: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(Exception):
    """The configuration is invalid. ``str()`` renders one problem per line.

    ``files`` and ``include_globs`` describe the inputs the failed load discovered (best
    effort; ``include_globs`` is ``None`` when the main file could not be parsed), so a caller
    can keep watching them and notice the fix."""

    def __init__(
        self,
        problems: Sequence[ConfigProblem],
        *,
        files: Sequence[Path] = (),
        include_globs: Sequence[str] | None = None,
    ) -> None:
        self.problems: list[ConfigProblem] = list(problems)
        self.files: tuple[Path, ...] = tuple(files)
        self.include_globs: tuple[str, ...] | None = None if include_globs is None else tuple(include_globs)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
