"""The build cache: one folder for every program build and the compile's shared parts, listed,
cleaned, and kept under a size cap by evicting the least recently used entries.

The folder is ``$DISTSDFG_CACHE``, else ``$XDG_CACHE_HOME/distsdfg``, else ``~/.cache/distsdfg``:

    builds/matmul_d1f3a.../    a lowered program's build (``runtime/builds.py``)
    pch-<hash>/                a precompiled header (compile time only; 50-90 MB each)
    steps-<hash>/, stub-<hash>/  communication steps and DaCe's loader stub, linked by the builds
    openblas-*/, mklroot-*/, calibration.json   the BLAS set-up and the planner's rates (never evicted)

After each build the entries that may be rebuilt at will (program builds and precompiled headers)
are evicted, least recently used first, until the cache holds at most ``$DISTSDFG_CACHE_MAX``
(default 5G; ``0`` for no cap). A 2 x 2 example: with a cap of 100M and builds ``a`` (60 MB, used
an hour ago) and ``b`` (50 MB, just built), ``a`` is removed and ``b`` kept.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence

__all__ = ["CacheEntry", "cache_dir", "builds_dir", "entries", "total_size", "cap", "parse_size", "parse_age",
           "format_size", "touch", "evict", "clean", "report"]

CACHE_ENV = "DISTSDFG_CACHE"
BUILDS_ENV = "DISTSDFG_BUILDS"      # another folder for the program builds (e.g. one per test job)
CAP_ENV = "DISTSDFG_CACHE_MAX"
DEFAULT_CAP = "5G"
BUILDS = "builds"

#: what each entry is, by its name's prefix; ``evictable``: rebuilt on demand, never linked by a build
_KINDS = (("pch-", "precompiled header", True), ("steps-", "communication steps", False),
          ("stub-", "loader stub", False), ("openblas-", "OpenBLAS headers", False),
          ("mklroot-", "MKL links", False))
_KEEP = ("calibration.json", "bench")        # the user's measurements: never listed as removable


def cache_dir() -> str:
    """The cache folder (made if missing)."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "distsdfg")
    os.makedirs(base, exist_ok=True)
    return base


def builds_dir() -> str:
    """Where programs are built, whatever folder they run from: ``builds/`` in the cache, or
    ``$DISTSDFG_BUILDS`` (the compile's shared parts stay in the cache)."""
    return os.path.abspath(os.environ.get(BUILDS_ENV) or os.path.join(cache_dir(), BUILDS))


@dataclass(frozen=True, slots=True)
class CacheEntry:
    name: str                   # relative to the cache folder: "builds/matmul_d1f3a...", "pch-0a1b..."
    path: str
    kind: str                   # "program build", "precompiled header", ...
    size: int                   # bytes on disk (links not followed)
    last_use: float             # seconds since the epoch
    evictable: bool             # rebuilt at will: removed by the cap and by ``clean(older_than=...)``


def _size_and_newest(path: str):
    """Bytes under ``path`` and the newest modification time of it and the files at its top level."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0.0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size, st.st_mtime
    size, newest = 0, st.st_mtime
    for root, dirs, files in os.walk(path):
        for f in files:
            try:
                s = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            size += s.st_size
            if root == path:
                newest = max(newest, s.st_mtime)
    return size, newest


def entries(folder: Optional[str] = None) -> List[CacheEntry]:
    """Every entry of the cache, least recently used first (lock files are left out)."""
    folder = folder or cache_dir()
    out = []
    names = [n for n in os.listdir(folder) if not n.endswith(".lock") and n != BUILDS]
    bdir = os.path.join(folder, BUILDS)
    if os.path.isdir(bdir):
        names += [f"{BUILDS}/{n}" for n in os.listdir(bdir) if not n.endswith(".lock")]
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(BUILDS + "/"):
            kind, evictable = "program build", True
        elif name in _KEEP:
            kind, evictable = "planner rates" if name.endswith(".json") else "benchmark tools", False
        else:
            kind, evictable = next(((k, e) for p, k, e in _KINDS if name.startswith(p)), ("other", False))
        size, newest = _size_and_newest(path)
        out.append(CacheEntry(name=name, path=path, kind=kind, size=size, last_use=newest, evictable=evictable))
    return sorted(out, key=lambda e: e.last_use)


def total_size(folder: Optional[str] = None) -> int:
    return sum(e.size for e in entries(folder))


_UNITS = {"": 1, "B": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}


def parse_size(text: str) -> int:
    """``"5G"``, ``"500M"``, ``"1.5GB"``, ``"1048576"`` -> bytes (powers of 1024)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a size: give bytes or a number with K, M, G or T (e.g. 5G, 500M)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"`` or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhdw]?)\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not an age: give a number with s, m, h, d or w (e.g. 7d, 12h)")
    return float(m.group(1)) * _AGES[(m.group(2) or "s").lower()]


def cap() -> Optional[int]:
    """The cache's size cap in bytes from ``$DISTSDFG_CACHE_MAX`` (default 5G); None for none (``0``)."""
    text = os.environ.get(CAP_ENV, "").strip() or DEFAULT_CAP
    if text.lower() in ("0", "none", "off", "unlimited"):
        return None
    try:
        return parse_size(text) or None
    except ValueError as exc:
        from ..errors import DistributedLoweringError
        raise DistributedLoweringError(f"{CAP_ENV}={text!r}: {exc}; or 0 for no cap") from None


def format_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def touch(path: str) -> None:
    """Mark ``path`` (an entry's folder or a file at its top level) as used now."""
    try:
        os.utime(path)
    except OSError:
        pass


def _remove(entry: CacheEntry) -> bool:
    """Remove an entry unless a process holds its lock (a build or a load in progress); True if removed."""
    lock = entry.path + ".lock"
    try:
        f = open(lock, "a")
    except OSError:
        f = None
    try:
        if f is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False            # in use
        if os.path.isdir(entry.path) and not os.path.islink(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.remove(entry.path)
        try:
            os.remove(lock)
        except OSError:
            pass
        return not os.path.exists(entry.path)
    except OSError:
        return False
    finally:
        if f is not None:
            f.close()


def evict(limit: Optional[int] = None, *, keep: Sequence[str] = (), folder: Optional[str] = None) -> List[CacheEntry]:
    """Remove evictable entries, least recently used first, until the cache holds at most ``limit``
    bytes (default ``cap()``; nothing when there is no cap). ``keep``: paths never removed (the build
    just made). Returns the removed entries."""
    limit = cap() if limit is None else limit
    if limit is None:
        return []
    found = entries(folder)
    total = sum(e.size for e in found)
    keep = {os.path.abspath(k) for k in keep}
    removed = []
    for e in found:                                  # least recently used first
        if total <= limit:
            break
        if e.evictable and os.path.abspath(e.path) not in keep and _remove(e):
            total -= e.size
            removed.append(e)
    return removed


def clean(*, older_than: Optional[float] = None, folder: Optional[str] = None) -> List[CacheEntry]:
    """Remove every entry that may be rebuilt (builds, headers, steps, stubs), or with ``older_than``
    (seconds) the evictable ones not used for that long. The BLAS set-up folders and the planner's
    calibration stay. Returns the removed entries."""
    now = time.time()
    out = []
    for e in entries(folder):
        if e.kind in ("planner rates", "benchmark tools", "OpenBLAS headers", "MKL links", "other"):
            continue
        if older_than is not None and (not e.evictable or now - e.last_use < older_than):
            continue
        if _remove(e):
            out.append(e)
    return out


def report(folder: Optional[str] = None) -> str:
    """The listing ``distsdfg cache`` prints: one line per entry, most recently used first, the total."""
    folder = folder or cache_dir()
    found = entries(folder)[::-1]
    limit = cap()
    lines = [f"build cache {folder} (cap {format_size(limit) if limit else 'none'}, {CAP_ENV})"]
    if found:
        width = max(len(e.name) for e in found)
        lines.append(f"  {'entry':{width}s}  {'size':>9s}  {'last use':16s}  kind")
        for e in found:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_use))
            lines.append(f"  {e.name:{width}s}  {format_size(e.size):>9s}  {when:16s}  {e.kind}")
    lines.append(f"total {format_size(sum(e.size for e in found))} in {len(found)} entries")
    return "\n".join(lines)
