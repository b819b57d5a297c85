"""The build cache (distsdfg/runtime/cache.py): listing, cleaning, the size cap with least-recently-used
eviction (on a temporary folder, no compiler), and a program built once and reused from another folder."""
import fcntl
import os
import time

import dace
import pytest

import distsdfg
from distsdfg.launch.cli import main
from distsdfg.runtime import cache

HOUR = 3600.0


def _entry(root, name, size, age_hours):
    """A cache entry ``name`` holding ``size`` bytes, last used ``age_hours`` ago."""
    path = root / name
    path.mkdir(parents=True)
    (path / "data").write_bytes(b"x" * size)
    when = time.time() - age_hours * HOUR
    for p in (path / "data", path):
        os.utime(p, (when, when))
    return path


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A cache with two builds, a precompiled header, steps, the BLAS set-up and the planner's rates."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(cache.CAP_ENV, raising=False)
    _entry(tmp_path, "builds/old_d1-aaaa", 6000, 48)
    _entry(tmp_path, "builds/new_d2-bbbb", 5000, 1)
    _entry(tmp_path, "pch-0123", 4000, 24)
    _entry(tmp_path, "steps-4567", 300, 72)
    _entry(tmp_path, "openblas-89ab", 100, 80)
    (tmp_path / "calibration.json").write_text("{}")
    os.utime(tmp_path / "calibration.json", (time.time() - 100 * HOUR,) * 2)
    (tmp_path / "builds" / "old_d1.lock").write_text("")
    return tmp_path


@pytest.mark.parametrize("text,value", [("5G", 5 * 2 ** 30), ("500M", 500 * 2 ** 20), ("1.5GB", 3 * 2 ** 29),
                                        ("2k", 2048), ("1048576", 2 ** 20), ("3 MiB", 3 * 2 ** 20)])
def test_sizes(text, value):
    assert cache.parse_size(text) == value


@pytest.mark.parametrize("text,value", [("7d", 7 * 86400), ("12h", 12 * HOUR), ("30m", 1800), ("90", 90),
                                        ("1w", 7 * 86400)])
def test_ages(text, value):
    assert cache.parse_age(text) == value


def test_bad_sizes_and_ages_say_what_to_write(monkeypatch):
    with pytest.raises(ValueError, match="e.g. 5G"):
        cache.parse_size("lots")
    with pytest.raises(ValueError, match="e.g. 7d"):
        cache.parse_age("soon")
    monkeypatch.setenv(cache.CAP_ENV, "big")
    with pytest.raises(distsdfg.DistributedLoweringError, match="DISTSDFG_CACHE_MAX='big'.*0 for no cap"):
        cache.cap()
    for off in ("0", "none"):
        monkeypatch.setenv(cache.CAP_ENV, off)
        assert cache.cap() is None
    monkeypatch.delenv(cache.CAP_ENV)
    assert cache.cap() == 5 * 2 ** 30


def test_entries_least_recently_used_first_with_sizes_and_kinds(folder):
    found = cache.entries()
    assert [e.name for e in found] == ["calibration.json", "openblas-89ab", "steps-4567", "builds/old_d1-aaaa",
                                       "pch-0123", "builds/new_d2-bbbb"]
    kinds = {e.name: (e.kind, e.size, e.evictable) for e in found}
    assert kinds["builds/old_d1-aaaa"] == ("program build", 6000, True)
    assert kinds["pch-0123"] == ("precompiled header", 4000, True)
    assert kinds["steps-4567"][::2] == ("communication steps", False)
    assert kinds["calibration.json"][::2] == ("planner rates", False)
    assert not any(e.name.endswith(".lock") for e in found)
    assert cache.total_size() == 6000 + 5000 + 4000 + 300 + 100 + 2


def test_cap_evicts_least_recently_used_builds_and_headers_only(folder):
    # 15,402 bytes; a cap of 9,000 removes the oldest evictable entries until it fits: the old build
    # (6,000: 9,402 left) and the header (4,000: 5,402 left); never the steps, the BLAS set-up, the rates.
    removed = cache.evict(9000)
    assert [e.name for e in removed] == ["builds/old_d1-aaaa", "pch-0123"]
    assert not (folder / "builds" / "old_d1-aaaa").exists() and not (folder / "pch-0123").exists()
    assert cache.total_size() <= 9000
    cache.evict(1)                                     # down to what may not be evicted
    assert {e.name for e in cache.entries()} == {"openblas-89ab", "steps-4567", "calibration.json"}


def test_cap_keeps_the_build_just_made_and_builds_in_use(folder):
    new = str(folder / "builds" / "new_d2-bbbb")
    with open(str(folder / "pch-0123") + ".lock", "a") as lock:         # a compile holds the header
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert [e.name for e in cache.evict(1, keep=[new])] == ["builds/old_d1-aaaa"]
    assert os.path.exists(new) and (folder / "pch-0123").exists()
    assert cache.evict(None) == []                     # under the default cap: nothing to do


def test_clean_older_than_and_all(folder):
    removed = cache.clean(older_than=12 * HOUR)
    assert sorted(e.name for e in removed) == ["builds/old_d1-aaaa", "pch-0123"]
    removed = cache.clean()
    assert sorted(e.name for e in removed) == ["builds/new_d2-bbbb", "steps-4567"]
    assert sorted(os.listdir(folder)) == ["builds", "calibration.json", "openblas-89ab"]


def test_cache_command_lists_and_cleans(folder, capsys):
    main(["cache"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"build cache {folder} (cap 5.0 GB, DISTSDFG_CACHE_MAX)"
    assert lines[2].split()[:3] == ["builds/new_d2-bbbb", "4.9", "KB"] and lines[2].endswith("program build")
    assert lines[-1] == "total 15.0 KB in 6 entries"
    main(["cache", "clean", "--older-than", "2d"])
    assert capsys.readouterr().out.splitlines()[0] == f"removed 1 entries (5.9 KB) from {folder}"
    assert not (folder / "builds" / "old_d1-aaaa").exists()
    with pytest.raises(SystemExit):
        main(["cache", "clean", "--older-than", "soon"])
    assert "--older-than: 'soon' is not an age" in capsys.readouterr().err


N = dace.symbol("N")


@dace.program
def cache_axpy(x: dace.float64[N], y: dace.float64[N]):
    return 2.0 * x + y


def test_a_program_built_once_is_reused_from_another_folder(tmp_path, monkeypatch, capsys):
    """Builds go to the cache, not to the folder a program runs from: the same program lowered again
    in another folder loads the first build, and neither folder gets a .dacecache."""
    from distsdfg.runtime.builds import build
    monkeypatch.setenv(cache.CAP_ENV, "0")              # leave the user's cache as it is
    folders = []
    for cwd in ("first", "second"):
        (tmp_path / cwd).mkdir()
        monkeypatch.chdir(tmp_path / cwd)
        sdfg = cache_axpy.to_sdfg()
        distsdfg.lower(sdfg, {"*": (2,)})
        _, folder = build(sdfg, verbose=True)
        folders.append(folder)
        assert os.listdir(tmp_path / cwd) == []
    log = capsys.readouterr().err
    assert folders[0] == folders[1] and os.path.dirname(folders[0]) == cache.builds_dir()
    assert f"reusing the build in {folders[0]}" in log.splitlines()[-1]
