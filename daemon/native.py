"""The glibc calls Python's ``os`` lacks: two the long-running processes make on their own memory,
``malloc_trim`` (hand the C heap's free pages back) and ``madvise(MADV_DONTNEED)`` (drop this
process's page table entries for a shared file mapping), how much of each kind the process holds
(``resident_bytes``), and ``syncfs`` (``sync_filesystem``: make one filesystem durable in one
call). One loader for all, so the reader, the writer and the serving loop do not each open libc.

Must not: decide when to call them (the callers say why), or do anything elsewhere than on glibc
and Linux: there the memory calls are no-ops, ``resident_bytes`` says None and
``sync_filesystem`` says False (never a silent no-op: the caller then fsyncs file by file).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

_MADV_DONTNEED = 4
_libc: Any = None  # None: not looked up yet; False: not available


def _glibc() -> Any:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            _libc = ctypes.CDLL(name, use_errno=True) if name else False
        except OSError:
            _libc = False
        madvise = getattr(_libc, "madvise", None) if _libc else None
        if madvise is not None:
            madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        syncfs = getattr(_libc, "syncfs", None) if _libc else None
        if syncfs is not None:
            syncfs.argtypes = [ctypes.c_int]
    return _libc


def sync_filesystem(fd: int) -> bool:
    """``syncfs(fd)``: write out and wait for every dirty page and all metadata of the filesystem
    holding ``fd`` (one journal commit and one cache flush, where an fsync a file costs one each).
    False where libc has no ``syncfs``; a failure raises ``OSError`` (Linux reports writeback
    errors through ``syncfs`` since 5.8)."""
    syncfs = getattr(_glibc(), "syncfs", None) if _glibc() else None
    if syncfs is None:
        return False
    if syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


def malloc_trim() -> None:
    """Hand the free pages of the C heap back to the system."""
    trim = getattr(_glibc(), "malloc_trim", None) if _glibc() else None
    if trim is not None:
        trim(0)


def drop_mapped_pages(start: int, end: int) -> None:
    """``MADV_DONTNEED`` on ``[start, end)``. Only for a *shared file* mapping this process holds
    now: on anonymous memory it would zero live data."""
    madvise = getattr(_glibc(), "madvise", None) if _glibc() else None
    if madvise is not None:
        madvise(start, end - start, _MADV_DONTNEED)


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> tuple[int, int] | None:
    """This process's resident memory as ``(file-backed, anonymous)`` bytes, from /proc/self/statm
    (its "shared" field is RssFile + RssShmem; the rest of "resident" is anonymous); a read costs
    ~20 µs, no walk of the mappings. None where there is no such file."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        resident, shared = int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None
    return shared * _PAGE_SIZE, (resident - shared) * _PAGE_SIZE
