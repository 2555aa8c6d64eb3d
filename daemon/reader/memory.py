"""The memory a reader gives back between requests.

Owns: when to give memory back (``GiveBack``: the pages a generation's searches mapped, and the
heap's free pages, each once past its budget), the heap given back after a generation closes
(``release_freed_memory``), and where it happens (``Tidying``): after the reply, on a thread of its
own, with at most ``MAX_TIDYING`` give-backs outstanding; or at once, in the request's worker,
while other requests are in flight.

Must not: close a generation (``daemon.reader.generations`` does, when its last user releases
it), release a lease it did not take, or let a give-back fail a request: it is housekeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from daemon import native

if TYPE_CHECKING:
    from daemon.reader.generations import IndexLease

# Memory is given back (``GiveBack``) after each request, on the reader's tidy thread,
# with at most this many such tasks outstanding (one running, one queued behind it that covers every
# request that ends meanwhile): under sixteen clients at 100k windows a release every 0.25 s let the
# pages of the searches in between pile up (a far higher peak than one release a search).
MAX_TIDYING = 2
# What a reader lets its searches keep between two give-backs (``GiveBack``): the pages of the
# generation's files they mapped, and the heap's free pages. The page budget holds about one
# search's mappings at 100k windows; ordinary queries free what they allocate, while a max-size
# query leaves more on the heap than its budget, so a trim follows it at once.
PAGES_BUDGET_MB = 32.0
HEAP_BUDGET_MB = 16.0

Result = TypeVar("Result")


def drop_mapped_pages(index: Any) -> bool:
    """The pages ``index``'s searches mapped in, dropped where the index has ``release_pages``
    (the embedded Edge copy); whether it has. Never raises: it is housekeeping."""
    release = getattr(index, "release_pages", None)
    if not callable(release):
        return False
    with contextlib.suppress(Exception):
        release()
    return True


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``). A closed
    generation frees what Edge held on the heap for it (id tracker, payload and BM25 indexes), but most of it lies below the newer generation's allocations, so
    without a trim the reader's RSS would keep both generations' worth after every swap.
    Elsewhere than glibc it does nothing."""
    native.malloc_trim()


class GiveBack:
    """When a reader gives memory back between requests. Searches map pages of the generation's
    files, and a query's activations stay on glibc's heap when it frees them; both are given back
    (``give_back``) once they pass their budgets: the pages once the process's file-backed
    resident memory is ``pages_mb`` above where the last drop left it, the heap once its anonymous
    memory is ``heap_mb`` above the last trim's level. A drop after every search slowed the next
    one, its pages faulting back in (bench: reader_vs_raw_ratio, the two readers side by side in
    one run); a trim after a max-size query still comes at once, and without it a reader that once answered eight 1,000-byte texts held that for the
    rest of its life. Budgets of 0, or a system without /proc/self/statm, give back after every
    request. Thread-safe: the tidy thread and the workers both ask."""

    def __init__(self, pages_mb: float = PAGES_BUDGET_MB, heap_mb: float = HEAP_BUDGET_MB, measure: Any = None):
        self.pages_budget = int(pages_mb * 1024 * 1024)
        self.heap_budget = int(heap_mb * 1024 * 1024)
        self._measure: Callable[[], tuple[int, int] | None] = measure or native.resident_bytes
        self._lock = threading.Lock()
        self._floors: list[int | None] = [None, None]  # file-backed after the last drop, anonymous after the last trim

    def _due(self, kind: int, budget: int) -> bool:
        if budget <= 0:
            return True
        now = self._measure()
        with self._lock:
            floor = self._floors[kind]
            if now is not None and floor is not None and now[kind] < floor:
                # lower than at the last give-back (a generation closed, say): count from here
                self._floors[kind] = floor = now[kind]
            return now is None or floor is None or now[kind] - floor > budget

    def _done(self, kind: int) -> None:
        now = self._measure()
        with self._lock:
            self._floors[kind] = None if now is None else now[kind]

    def drop_pages(self, index: Any) -> bool:
        """Drop the pages ``index``'s searches mapped when they are over budget; whether dropped."""
        if not self._due(0, self.pages_budget) or not drop_mapped_pages(index):
            return False
        self._done(0)
        return True

    def give_back(self, index: Any, pages: bool = True) -> None:
        """Between requests: the pages (``drop_pages``, unless ``pages`` is False: the request
        dropped them already) and the heap's free pages, each when over its budget. Never raises:
        it is housekeeping."""
        with contextlib.suppress(Exception):
            if pages:
                self.drop_pages(index)
            if self._due(1, self.heap_budget):
                native.malloc_trim()
                self._done(1)


class Tidying:
    """Where and when each request's memory is given back. ``in_flight`` counts the requests
    between parse and reply; ``acquire`` and ``release`` take and give back a hold on the
    generation being served (``daemon.reader.generations``), so a give-back never runs on a
    generation closed under it."""

    def __init__(
        self,
        give_back: GiveBack,
        acquire: Callable[[], IndexLease | None],
        release: Callable[[IndexLease], None],
    ):
        self.give_back = give_back
        self._acquire = acquire
        self._release = release
        # Its own thread: queued on the request pool, a release waited behind every search already
        # queued there (under sixteen clients, a dozen searches' pages were mapped at once).
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader-tidy")
        self.in_flight = 0
        self.tasks: set[asyncio.Task[None]] = set()
        # A request ended with MAX_TIDYING outstanding: None when none did, else whether the pages
        # of one of those requests were not dropped yet.
        self._owed_pages: bool | None = None
        self._stopped = False

    def run_then_drop(self, lease: IndexLease, execute: Callable[[], Result], released: list[bool]) -> Result:
        """``execute()``; then, when other requests are in flight, drop the pages it mapped at once,
        in this worker, and say so in ``released``. Those requests wait for the index anyway, and a
        release deferred past the reply ran only after some of their searches had mapped theirs:
        under sixteen clients the peak rose above what a release per search reaches.
        Alone, the request replies first and its pages go after (``release_after``)."""
        try:
            return execute()
        finally:
            if self.in_flight > 1 and self.give_back.drop_pages(lease.index):
                released.append(True)

    def release_after(self, lease: IndexLease, pages: bool = True) -> None:
        """Release ``lease`` once memory is given back (``GiveBack.give_back``) on its own thread: after
        the reply, so no request waits for the release of a search's pages; the lease
        is held until it ends, so the generation cannot be closed (and its ranges unmapped) under
        it. With ``MAX_TIDYING`` tasks outstanding already, one more runs when one of them ends."""
        if len(self.tasks) >= MAX_TIDYING or self._stopped:
            if not self._stopped:
                self._owed_pages = bool(self._owed_pages) or pages
            self._release(lease)
            return
        lease.users += 1  # the tidying's own hold, released when it ends
        self._release(lease)
        task = asyncio.get_running_loop().create_task(self._tidy(lease, pages))
        self.tasks.add(task)
        task.add_done_callback(self._tidied)

    async def _tidy(self, lease: IndexLease, pages: bool) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self.pool, self.give_back.give_back, lease.index, pages)
        except RuntimeError:
            pass  # the pool is shut down: the reader is stopping
        finally:
            self._release(lease)

    def _tidied(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self._owed_pages is not None and not self._stopped:
            # a request ended while two were outstanding: its heap (and pages, unless dropped)
            pages, self._owed_pages = self._owed_pages, None
            lease = self._acquire()
            if lease is not None:
                self.release_after(lease, pages)

    async def stop(self, grace_s: float) -> None:
        """No more give-backs; those outstanding hold the lease: let them end (up to ``grace_s``),
        so the generation can be closed after them."""
        self._stopped = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=grace_s)
