"""Which index generation the reader serves, and when an old one is closed.

Owns: ``IndexLease`` (one opened index reader and how many requests use it), opening the newest
generation and swapping it in while requests keep running on the old one, when to look for one
(every ``swap_check_s`` seconds; at most once a ``request_check_s`` when a request arrives; and,
given a ``follow`` file, as soon as a stat every ``follow_s`` seconds sees it change), closing a
retired generation once its last request ends (then handing the freed heap back), one journal
line per generation that cannot be opened, and what a request is told while none is readable.

Must not: write under the index (readers are opened read-only, on a private copy), fail a request
because a check failed (the generation being served stays), or choose a lease's embedder: the
``fit`` it is handed (``daemon.reader.embedders``) does that for every lease before it is served.

Theory of operation. Every request runs on a worker thread against the lease that was current
when it began. A swap opens the newer generation on a worker thread while requests keep using the
old one, then makes the new lease current; the old reader is closed when its last request finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Awaitable, Callable

from daemon.index.port import IndexReader, IndexUnreadableError
from daemon.reader.follow import FileChangeWatch
from daemon.reader.memory import release_freed_memory
from daemon.reader.serialized import Serialized


class IndexLease:
    """One opened index reader and how many requests are using it right now. Every call, the
    final ``close`` included, goes through ``index``, one at a time. ``embedder`` is the one
    that matches the generation's model (None: the service's own); ``degraded`` is set when
    none matches."""

    def __init__(self, reader: IndexReader):
        self.reader = reader
        self.index = Serialized(reader, threading.Lock())
        self.users = 0
        self.retired = False
        self.generation = reader.current_generation
        self.embedder: Any = None
        self.degraded: str | None = None


class Generations:
    """The generation being served (``current``) and the checks that replace it.

    ``open_index()`` returns the newest index reader, or None while nothing is published; a reader
    is replaced when its ``newer_available()`` says so (never, on a Qdrant server). ``fit(lease)``
    gives a newly opened lease its embedder before it is served."""

    def __init__(
        self,
        open_index: Callable[[], IndexReader | None],
        fit: Callable[[IndexLease], Awaitable[None]],
        pool: Executor,
        log: Any,
        *,
        swap_check_s: float,
        request_check_s: float,
        follow: Path | None,
        follow_s: float,
    ):
        self._open_index = open_index
        self._fit = fit
        self._pool = pool
        self._log = log
        self._swap_check_s = swap_check_s
        self._request_check_s = request_check_s
        self._follow = FileChangeWatch(follow) if follow is not None else None
        self._follow_s = follow_s
        self.current: IndexLease | None = None
        self.unreadable: IndexUnreadableError | None = None  # the last generation that did not open
        self.swap_lock: asyncio.Lock | None = None  # made by the service's start, on its event loop
        self.last_check = 0.0
        self._check_task: asyncio.Task[None] | None = None
        self._periodic_task: asyncio.Task[None] | None = None
        self.swaps = 0

    def _needs_open(self) -> bool:
        """Runs on a worker thread: ``newer_available`` may read a file."""
        lease = self.current
        if lease is None:
            return True
        return lease.reader.newer_available()

    async def check(self) -> None:
        """Open and swap in a newer generation if there is one. Never fails a request: errors are
        logged and the current reader stays."""
        assert self.swap_lock is not None
        async with self.swap_lock:
            self.last_check = time.monotonic()
            loop = asyncio.get_running_loop()
            try:
                if not await loop.run_in_executor(self._pool, self._needs_open):
                    return
                reader = await loop.run_in_executor(self._pool, self._open_index)
            except IndexUnreadableError as exc:
                self._report_unreadable(exc)
                return
            except Exception as exc:  # noqa: BLE001
                self._log.error("index_open_failed", error=type(exc).__name__, detail=str(exc)[:500])
                return
            if reader is None or (self.current is not None and reader is self.current.reader):
                return
            self.unreadable = None
            lease = IndexLease(reader)
            await self._fit(lease)
            old, self.current = self.current, lease
            self.swaps += 1 if old is not None else 0
            self._log.info(
                "index_swapped" if old is not None else "index_opened",
                generation=self.current.generation,
                previous=old.generation if old is not None else None,
                copy=getattr(reader, "copy_method", None),
            )
            if old is not None:
                old.retired = True
                if old.users == 0:
                    self.close(old)

    def _report_unreadable(self, exc: IndexUnreadableError) -> None:
        """One journal line per unreadable generation (checks repeat every few seconds); the
        generation being served, if any, stays."""
        seen = self.unreadable
        self.unreadable = exc
        if seen is not None and (seen.generation, seen.where, seen.reason) == (exc.generation, exc.where, exc.reason):
            return
        self._log.error(
            "index_unreadable",
            generation=exc.generation,
            path=exc.where,
            error=exc.reason[:500],
            serving=self.current.generation if self.current is not None else None,
        )

    async def fit_current(self) -> None:
        """Fit the generation opened before the model loaded (the service's start) to it, as
        ``check`` fits every later one."""
        assert self.swap_lock is not None
        async with self.swap_lock:
            if self.current is not None:
                await self._fit(self.current)

    def close(self, lease: IndexLease) -> None:
        # Through the lease's lock: a request cancelled at shutdown has released its lease while
        # its worker thread may still be querying; the close waits for that call to end.
        try:
            lease.index.close()
        except Exception as exc:  # noqa: BLE001
            self._log.warning("index_close_failed", generation=lease.generation, error=type(exc).__name__)
            return
        release_freed_memory()

    def start_checking(self) -> None:
        """Look for newer generations in the background from now on."""
        self._periodic_task = asyncio.create_task(self._check_periodically())

    async def stop_checking(self) -> None:
        """End the background checks, the one a request started included."""
        for task in (self._periodic_task, self._check_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _check_periodically(self) -> None:
        watch = self._follow
        if watch is None:
            while True:
                await asyncio.sleep(self._swap_check_s)
                await self.check()
        # A stat every follow_s; the full check when the file changed, and every swap_check_s
        # regardless (a check that failed, or a change the stat cannot see, is retried).
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(self._follow_s)
            if watch.changed() or time.monotonic() - last_full >= self._swap_check_s:
                last_full = time.monotonic()
                await self.check()

    def check_soon(self) -> None:
        """Between requests: start a check in the background if none ran lately."""
        if time.monotonic() - self.last_check < self._request_check_s:
            return
        if self._check_task is not None and not self._check_task.done():
            return
        self.last_check = time.monotonic()
        self._check_task = asyncio.create_task(self.check())

    def no_index_message(self) -> str:
        unreadable = self.unreadable
        if unreadable is None:
            return "no index generation is published yet"
        named = f"generation {unreadable.generation}" if unreadable.generation is not None else "CURRENT"
        return f"no readable index generation: {named} is unreadable (the reader's journal says why)"

    def acquire(self) -> IndexLease | None:
        lease = self.current
        if lease is not None:
            lease.users += 1
        return lease

    def release(self, lease: IndexLease) -> None:
        lease.users -= 1
        if lease.retired and lease.users == 0:
            self.close(lease)

    def retire_current(self) -> None:
        """At shutdown: no generation is current any more; it closes now, or when its last
        request ends."""
        if self.current is not None:
            lease, self.current = self.current, None
            lease.retired = True
            if lease.users == 0:
                self.close(lease)
