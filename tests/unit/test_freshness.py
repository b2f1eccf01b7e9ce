"""reconciler.freshness: stat-sweep fingerprints and the per-config Tracker (I11)."""

from __future__ import annotations

import builtins
import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_reconciler.reconciler.config import load_config
from mcp_reconciler.reconciler.freshness import CONFIG_KEY, FileStamp, Fingerprint, GlobStamp, Tracker, take_fingerprint

OLD_NS = 1_600_000_000 * 10**9
NOW_NS = 1_700_000_000 * 10**9  # passed as now_ns so racy classification is deterministic


def make(path: Path, text: str = "x", mtime_ns: int = OLD_NS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def sweep(paths: Sequence[Path] = (), globs: Sequence[str] = ()) -> Fingerprint:
    return take_fingerprint(paths, globs, now_ns=NOW_NS)


def test_stamps_exist_mtime_size_and_sorted(tmp_path: Path) -> None:
    b = make(tmp_path / "b.txt", "bb")
    a = make(tmp_path / "a.txt", "a", OLD_NS + 5)
    fp = sweep([b, a])
    assert fp.files == (FileStamp(str(a), True, OLD_NS + 5, 1), FileStamp(str(b), True, OLD_NS, 2))
    assert fp.globs == () and fp.warnings == () and fp.racy == ()


def test_I11_absent_file_is_stamped_and_warned_never_silently_zero(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    fp = sweep([missing])
    assert fp.files == (FileStamp(str(missing), False, 0, 0),)
    assert fp.warnings == (f"tracked file {str(missing)!r} does not exist",)


def test_I11_glob_matching_nothing_is_a_warning(tmp_path: Path) -> None:
    pattern = str(tmp_path / "data" / "**" / "*.yml")
    fp = sweep(globs=[pattern])
    assert fp.globs == (GlobStamp(pattern, ()),)
    assert fp.warnings == (f"glob {pattern!r} matched no files",)


def test_unchanged_inputs_give_equal_digests_whatever_the_argument_order(tmp_path: Path) -> None:
    files = [make(tmp_path / f"f{i}") for i in range(5)]
    g1, g2 = str(tmp_path / "*"), str(tmp_path / "f1")
    one = sweep(files, [g1, g2])
    two = sweep(list(reversed(files)), [g2, g1, g1])
    assert one == two and one.digest == two.digest
    assert one.changed_paths(two) == ()


def test_detects_modify_by_mtime(tmp_path: Path) -> None:
    f = make(tmp_path / "f")
    before = sweep([f])
    os.utime(f, ns=(OLD_NS + 1, OLD_NS + 1))
    after = sweep([f])
    assert before.digest != after.digest
    assert before.changed_paths(after) == (str(f),)


def test_detects_modify_by_size_with_the_same_mtime(tmp_path: Path) -> None:
    f = make(tmp_path / "f", "one")
    before = sweep([f])
    make(f, "three")  # same OLD_NS mtime
    after = sweep([f])
    assert before.digest != after.digest and before.changed_paths(after) == (str(f),)


def test_detects_create_and_delete_of_an_explicit_path(tmp_path: Path) -> None:
    f = tmp_path / "later.txt"
    absent = sweep([f])
    make(f)
    present = sweep([f])
    assert absent.digest != present.digest and absent.changed_paths(present) == (str(f),)
    f.unlink()
    gone = sweep([f])
    assert gone.digest == absent.digest and present.changed_paths(gone) == (str(f),)


def test_detects_new_glob_match_and_lost_match(tmp_path: Path) -> None:
    make(tmp_path / "data" / "a.yml")
    pattern = str(tmp_path / "data" / "**" / "*.yml")
    before = sweep(globs=[pattern])
    new = make(tmp_path / "data" / "deep" / "er" / "b.yml")
    make(tmp_path / "data" / "c.txt")  # not matched: must not matter
    after = sweep(globs=[pattern])
    assert before.digest != after.digest
    assert before.changed_paths(after) == (str(new),)
    assert after.globs[0].matches == (str(tmp_path / "data" / "a.yml"), str(new))
    new.unlink()
    assert sweep(globs=[pattern]).digest == before.digest


def test_glob_matches_are_stat_stamped(tmp_path: Path) -> None:
    a = make(tmp_path / "a.xml", "12345")
    fp = sweep(globs=[str(tmp_path / "*.xml")])
    assert fp.files == (FileStamp(str(a), True, OLD_NS, 5),)


def test_path_tracked_explicitly_and_by_glob_is_stamped_once(tmp_path: Path) -> None:
    a = make(tmp_path / "a")
    fp = sweep([a], [str(tmp_path / "*")])
    assert fp.paths == (str(a),)


def test_racy_stamps_make_a_baseline_stale_until_they_age(tmp_path: Path) -> None:
    """A same-size rewrite within the timestamp tick would be invisible to stat, so a stamp
    close to the sweep cannot vouch for the content it saw."""
    f = make(tmp_path / "f", mtime_ns=NOW_NS - 1_000_000)  # 1 ms before the sweep
    fresh = take_fingerprint([f], [], now_ns=NOW_NS)
    assert fresh.racy == (str(f),)
    again = take_fingerprint([f], [], now_ns=NOW_NS + 10**9)
    assert again.digest == fresh.digest and fresh.is_stale(again)
    aged = take_fingerprint([f], [], now_ns=NOW_NS + 3 * 10**9)
    assert aged.racy == () and not aged.is_stale(aged)
    # Far-future mtimes (clock skew) are not racy, so they cannot keep a key dirty forever.
    assert take_fingerprint([f], [], now_ns=NOW_NS - 3600 * 10**9).racy == ()
    assert take_fingerprint([f], [], now_ns=NOW_NS, racy_window_ns=0).racy == ()


def test_sweep_never_opens_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Freshness is a stat sweep: content is never read (cost independent of file size)."""
    files = [make(tmp_path / f"f{i}") for i in range(3)]

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("take_fingerprint opened a file")

    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(io, "open", forbidden)
    fp = take_fingerprint(files, [str(tmp_path / "*")], now_ns=NOW_NS)
    assert len(fp.files) == 3


@settings(max_examples=30, deadline=None)
@given(st.permutations(list(range(6))), st.integers(min_value=0, max_value=5))
def test_digest_is_order_free_and_sensitive_to_each_stamp(order: list[int], changed: int) -> None:
    # Pure data check on stamps: the same set in any order digests equally; any one stamp
    # changing changes the digest.
    with tempfile.TemporaryDirectory() as d:
        files = [make(Path(d) / f"f{i}") for i in range(6)]
        base = take_fingerprint([files[i] for i in order], [], now_ns=NOW_NS)
        assert base.digest == take_fingerprint(files, [], now_ns=NOW_NS).digest
        os.utime(files[changed], ns=(OLD_NS + 7, OLD_NS + 7))
        assert take_fingerprint(files, [], now_ns=NOW_NS).digest != base.digest


# --------------------------------------------------------------------------- Tracker


def _config(tmp_path: Path) -> Path:
    make(
        tmp_path / "gateway.yaml",
        """
sources:
  - name: notes
    stdio: {command: x}
    watch: ["data/**/*.yml", "reports/*.xml"]
  - name: plain
    sse: {url: "http://a/sse"}
  - name: empty
    sse: {url: "http://a/sse"}
    watch: ["nothing/*"]
include: ["sources.d/*.yaml"]
""",
    )
    make(tmp_path / "sources.d" / "x.yaml", "name: x\nsse: {url: 'http://a/sse'}\n")
    make(tmp_path / "data" / "a.yml")
    make(tmp_path / "data" / "sub" / "b.yml")
    make(tmp_path / "reports" / "r.xml")
    return tmp_path / "gateway.yaml"


def test_tracker_fingerprints_config_and_each_watching_source(tmp_path: Path) -> None:
    tracker = Tracker(load_config(_config(tmp_path)), now_ns=NOW_NS)
    digests = tracker.per_source_digest()
    assert set(digests) == {"notes", "empty"}  # sources without watch globs are absent
    # gateway.yaml + x.yaml + a.yml + b.yml + r.xml
    assert tracker.tracked_count == 5
    assert tracker.warnings == (f"source 'empty': glob {str(tmp_path / 'nothing' / '*')!r} matched no files",)
    assert tracker.dirty_keys(now_ns=NOW_NS) == set()


def test_tracker_dirty_keys_name_what_changed(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    tracker = Tracker(load_config(cfg), now_ns=NOW_NS)

    os.utime(tmp_path / "data" / "sub" / "b.yml", ns=(OLD_NS + 1, OLD_NS + 1))
    assert tracker.dirty_keys(now_ns=NOW_NS) == {"notes"}

    make(tmp_path / "nothing" / "new")
    assert tracker.dirty_keys(now_ns=NOW_NS) == {"notes", "empty"}

    make(tmp_path / "sources.d" / "y.yaml", "name: y\nsse: {url: 'http://a/sse'}\n")
    assert tracker.dirty_keys(now_ns=NOW_NS) == {"notes", "empty", CONFIG_KEY}


def test_tracker_config_key_for_main_file_and_drop_in_delete(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    tracker = Tracker(load_config(cfg), now_ns=NOW_NS)
    (tmp_path / "sources.d" / "x.yaml").unlink()
    assert tracker.dirty_keys(now_ns=NOW_NS) == {CONFIG_KEY}

    tracker = Tracker(load_config(cfg), now_ns=NOW_NS)
    os.utime(cfg, ns=(OLD_NS + 9, OLD_NS + 9))
    assert tracker.dirty_keys(now_ns=NOW_NS) == {CONFIG_KEY}


def test_tracker_warns_about_an_include_glob_matching_nothing(tmp_path: Path) -> None:
    cfg = make(tmp_path / "g.yaml", "include: ['d/*.yaml']\n")
    tracker = Tracker(load_config(cfg), now_ns=NOW_NS)
    assert tracker.warnings == (f"config: glob {str(tmp_path / 'd' / '*.yaml')!r} matched no files",)
    assert tracker.tracked_count == 1


# -- strict_glob: glob's semantics, but exhaustion raises (issue 10, item 5) -------------------

GLOB_TREE = (
    "a/x.yml", "a/.h.yml", "a/b/y.yml", "a/b/c/z.yml", "a/b/c/zz.yaml", "a/b/.hd/w.yml",
    ".hid/q.yml", "top.yml", "d1/", "d2/e/",
)  # fmt: skip
GLOB_PATTERNS = (
    "*.yml", "**/*.yml", "a/**/*.yml", "a/**", "a/**/", "**", "*/", "a/*/*.yml", ".*/*.yml", "a/.*.yml",
    "a/b/c/z.yml", "missing.yml", "a/b", "a/b/", "*/**/*.yaml", "d*/", "link/*.yml", "link/**/*.yml",
    "a/[xb]*", "a/b/c/z?.y*ml", "**/.hd/*", "a/**/c", "a/**/c/", "nope/**/*.yml",
)  # fmt: skip


def _tree(root: Path) -> None:
    for rel in GLOB_TREE:
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
    (root / "link").symlink_to(root / "a" / "b")


@pytest.mark.parametrize("pattern", GLOB_PATTERNS)
def test_strict_glob_matches_glob_glob(pattern: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import glob

    from mcp_reconciler.reconciler.freshness import strict_glob

    _tree(tmp_path)
    absolute = str(tmp_path / pattern)
    assert sorted(strict_glob(absolute)) == sorted(glob.glob(absolute, recursive=True))
    monkeypatch.chdir(tmp_path)  # relative patterns resolve against the working directory
    assert sorted(strict_glob(pattern)) == sorted(glob.glob(pattern, recursive=True))


def test_strict_glob_raises_when_descriptors_run_out(tmp_path: Path) -> None:
    """glob.glob answers "no match" when it cannot list a directory for lack of descriptors;
    strict_glob raises, and so does a sweep (never a stamp that looks like a removal)."""
    import glob

    from mcp_reconciler.reconciler.freshness import InputsUnreadableError, strict_glob
    from tests.support.exhaustion import descriptors_exhausted

    _tree(tmp_path)
    pattern = str(tmp_path / "a" / "**" / "*.yml")
    with descriptors_exhausted():
        silent = glob.glob(pattern, recursive=True)
        with pytest.raises(InputsUnreadableError):
            strict_glob(pattern)
        with pytest.raises(InputsUnreadableError):
            take_fingerprint((), [pattern])
    assert silent == []  # what glob.glob said: "nothing there"
    assert len(strict_glob(pattern)) == 3
