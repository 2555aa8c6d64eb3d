"""``huginn-chat serve``: the read-only search process on a Unix socket.

Owns: the socket (a path bound with mode 0660, or the one systemd hands over via
``LISTEN_FDS``/``LISTEN_PID``), the NDJSON connection loop (``daemon.reader.protocol``), loading the
embedder once (``threads=1``), holding the current index reader and swapping in a newer
generation while requests run, and the audit line written for every request: search, listing, window,
thread, ``status`` (which carries no query) and refused.

Must not: import or call any write path (no ``IndexWriter``, no refresher, no Matrix), log a
query text (the audit line holds an HMAC digest of it, or nothing without a key), or answer a
search unfiltered when the embedder fails (``daemon.reader.search`` degrades to the lexical leg).

Theory of operation. Every request runs on a worker thread against an ``IndexLease``: the
reader that was current when the request began, with a count of the requests using it. A swap
opens the newer generation on another thread while requests keep using the old one, then makes
the new lease current; the old reader is closed when its last request finishes. Checks for a
newer generation run every ``swap_check_s`` seconds and, at most once a second, when a request
arrives; given a ``follow`` file (the embedded index's ``generations/CURRENT``), a stat of it every
``follow_s`` seconds starts one as soon as it changes, so a publication is served within a second. Index readers and the embedder are called from one thread at a time each (neither
library promises more); requests on different generations proceed in parallel.

The model a generation was built with. Each lease gets the embedder that matches its index meta
(model and dim): the one loaded at start-up, or one ``model_loader(model)`` finds in the model
directory (loaded once, kept). If none matches, the lease ranks lexical-only and every search on
it says ``degraded: "model_mismatch"``; the mismatch is journalled once per (model, dim). A
vector from another model must never rank a query: its nearest neighbours mean nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import hmac
import json
import os
import resource
import signal
import socket
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from daemon import native
from daemon.errors import EXIT_FAILED, EXIT_OK, OperationalError
from daemon.index.port import IndexReader, IndexUnreadableError
from daemon.ports import Embedder
from daemon.reader.protocol import (
    BUSY,
    INTERNAL,
    LINE_TIMEOUT,
    LINE_TOO_LONG,
    MAX_LINE_BYTES,
    NOT_FOUND,
    BAD_REQUEST,
    PROTOCOL_VERSION,
    UNAVAILABLE,
    ProtocolError,
    Request,
    RoomsRequest,
    SearchRequest,
    StatusRequest,
    ThreadRequest,
    WindowRequest,
    error_reply,
    ok_reply,
    parse_request,
)
from daemon.reader.audit import audited_field, audited_filters, bounded
from daemon.reader.citations import cite, rooms_of
from daemon.reader.filter_warnings import filter_warnings
from daemon.reader.room_list import list_rooms
from daemon.reader.follow import FileChangeWatch
from daemon.reader.search import (
    EmbedderUnavailable,
    QueryError,
    canonical_query,
    WindowQuery,
    execute_search,
    execute_thread,
    execute_window,
)

if TYPE_CHECKING:  # pydantic stays out of the import; the CLI hands the loaded settings in
    from daemon.config import Settings

DEFAULT_SOCKET = "/run/huginn-chat/reader.sock"
SOCKET_MODE = 0o660
SYSTEMD_FIRST_FD = 3

# Load and attack bounds. The listen backlog we ask for when we bind the path ourselves;
# under systemd the socket unit's Backlog= sets it. The kernel caps either at net.core.somaxconn.
DEFAULT_BACKLOG = 1024
# Connections served at once. Kept below RLIMIT_NOFILE (LimitNOFILE= in the unit) minus the
# descriptors the process needs for itself (index files, model, journal, worker threads), so
# accept() never meets EMFILE because of our own connections.
DEFAULT_MAX_CONNECTIONS = 1024
FD_RESERVE = 128
# A request line must arrive whole this many seconds after its first byte.
DEFAULT_LINE_TIMEOUT_S = 5.0
# A reply must be taken by the client within this many seconds, or the connection is dropped: a
# client that sends requests and never reads would otherwise hold its slot (and the reply's
# buffers) until the idle timeout, and enough of them lock every working client out.
DEFAULT_WRITE_TIMEOUT_S = 5.0
# A connection's user-space send buffer above which a reply waits for the client to read (asyncio's
# default is 64 KiB): what a client that never reads can pin beyond the kernel's socket buffer.
WRITE_BUFFER_HIGH = 16 * 1024
# How long the reader waits on SIGTERM for the answers in flight before it exits anyway.
DEFAULT_DRAIN_S = 10.0
# accept() failing (EMFILE, ENFILE, ENOBUFS, ENOMEM): pause this long, log at most once per interval.
ACCEPT_PAUSE_S = 0.2
ACCEPT_LOG_INTERVAL_S = 10.0
# Query texts are embedded one at a time (make_embedder_factory says why).
QUERY_BATCH_SIZE = 1
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
_ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_TRANSIENT_ERRORS = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EINTR, errno.EPROTO})


class AuditUnwritable(OperationalError):
    """The audit line of a request could not be written: the request is not answered."""


def somaxconn() -> int | None:
    """The kernel's cap on any listen backlog, or None where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text().strip())
    except (OSError, ValueError):
        return None


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to stay ``FD_RESERVE`` below the soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


class _Connection:
    """One client connection: ``waiting_since`` is when it began waiting for a request line
    (None while a request is being answered), ``writing_since`` when its reply began waiting for
    the client to read it (None otherwise). When the cap is reached the oldest waiting one is
    closed first, then the one whose reply has waited longest, so neither idle clients nor
    clients that never read can lock out a working one."""

    __slots__ = ("writer", "waiting_since", "writing_since", "evicted")

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.waiting_since: float | None = time.monotonic()
        self.writing_since: float | None = None
        self.evicted = False


def _get_logger(component: str) -> Any:
    from daemon.journal import get_logger

    return get_logger(component=component)


class _Serialized:
    """Calls every method of ``target`` under one lock: neither qdrant-edge nor fastembed says
    it may be called from several threads at once."""

    def __init__(self, target: Any, lock: threading.Lock):
        self._target = target
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return locked


class _LexicalOnly:
    """Stands in for an embedder that failed to load: no dense vectors, BM25 still works."""

    def __init__(self, sparse_source: Any):
        self._sparse_source = sparse_source

    def embed(self, texts: Any) -> list[list[float]]:
        raise EmbedderUnavailable("dense embedder not loaded")

    def sparse_query(self, text: str) -> Any:
        return self._sparse_source.sparse_query(text)

    def sparse(self, texts: Any) -> Any:
        return self._sparse_source.sparse(texts)


DEGRADED_MODEL_MISMATCH = "model_mismatch"


class IndexLease:
    """One opened index reader and how many requests are using it right now. Every call, the
    final ``close`` included, goes through ``index``, one at a time. ``embedder`` is the one
    that matches the generation's model (None: the service's own); ``degraded`` is set when
    none matches."""

    def __init__(self, reader: IndexReader):
        self.reader = reader
        self.index = _Serialized(reader, threading.Lock())
        self.users = 0
        self.retired = False
        self.generation = reader.current_generation
        self.embedder: Any = None
        self.degraded: str | None = None


def _drop_mapped_pages(index: Any) -> bool:
    """The pages ``index``'s searches mapped in, dropped where the index has ``release_pages``
    (the embedded Edge copy); whether it has. Never raises: it is housekeeping."""
    release = getattr(index, "release_pages", None)
    if not callable(release):
        return False
    with contextlib.suppress(Exception):
        release()
    return True


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
        if not self._due(0, self.pages_budget) or not _drop_mapped_pages(index):
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


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``). A closed
    generation frees what Edge held on the heap for it (id tracker, payload and BM25 indexes), but most of it lies below the newer generation's allocations, so
    without a trim the reader's RSS would keep both generations' worth after every swap.
    Elsewhere than glibc it does nothing."""
    native.malloc_trim()


def read_audit_key(path: str | os.PathLike[str] | None) -> bytes | None:
    """The HMAC key for query digests, from a credential file. No file, no key, no digest. A
    key file others may read is refused (``ConfigError``, exit 2): digests keyed with a secret
    anyone holds hide nothing."""
    if not path:
        return None
    from daemon.config import refuse_unprotected_secret  # pydantic: only when a key is configured

    with open(path, "rb") as handle:
        refuse_unprotected_secret(os.fstat(handle.fileno()), "audit_key_file", Path(path))
        key = handle.read().strip()
    return key or None


def query_digest(key: bytes | None, canonical: bytes) -> str | None:
    if key is None:
        return None
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def systemd_socket() -> socket.socket | None:
    """The listening socket systemd passed (socket activation), or None when not activated."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)  # children must not think the socket is theirs
    if count < 1:
        return None
    sock = socket.socket(fileno=SYSTEMD_FIRST_FD)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise OSError("the socket systemd passed is not a Unix stream socket")
    os.set_inheritable(sock.fileno(), False)
    sock.setblocking(False)
    return sock


def bind_socket(path: str | os.PathLike[str], backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """Bind ``path`` with mode 0660 and listen with ``backlog`` (the kernel silently caps it at
    net.core.somaxconn). A stale socket file is replaced; a live one is refused."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        if not stat.S_ISSOCK(target.lstat().st_mode):
            raise OSError(f"{target} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(target))
        except OSError:
            target.unlink()  # nobody listening: a leftover of a reader that died
        else:
            raise OSError(f"another reader is already listening on {target}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o117)  # created 0660 from the start, no window where it is wider
    try:
        sock.bind(str(target))
    finally:
        os.umask(old_umask)
    os.chmod(target, SOCKET_MODE)
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def _sd_notify(message: str) -> None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.sendto(message.encode("ascii"), address)


class ReaderService:
    """The reader, wired to whatever opens the index and loads the embedder.

    ``open_index()`` returns the newest index reader, or None while nothing is published. The
    reader is replaced when its ``newer_available()`` says so (never, on a Qdrant server). ``embedder_factory()`` is called once; ``sparse_factory()``, if
    given, supplies BM25 query vectors should the embedder fail to load."""

    def __init__(
        self,
        open_index: Callable[[], IndexReader | None],
        embedder_factory: Callable[[], Embedder],
        settings: Settings | None = None,
        *,
        sparse_factory: Callable[[], Any] | None = None,
        model_loader: Callable[[str], Embedder | None] | None = None,
        audit_key: bytes | None = None,
        logger: Any = None,
        swap_check_s: float = 5.0,
        request_check_s: float = 1.0,
        follow: Path | None = None,
        follow_s: float = 0.5,
        idle_timeout_s: float = 300.0,
        line_timeout_s: float = DEFAULT_LINE_TIMEOUT_S,
        write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        backlog: int = DEFAULT_BACKLOG,
        accept_pause_s: float = ACCEPT_PAUSE_S,
        accept_log_interval_s: float = ACCEPT_LOG_INTERVAL_S,
        workers: int = 4,
        give_back: GiveBack | None = None,
    ):
        self._open_index = open_index
        self._embedder_factory = embedder_factory
        self._sparse_factory = sparse_factory
        self._model_loader = model_loader
        self._other_models: dict[str, Any] = {}  # model id -> serialized embedder (None: not found)
        self._mismatches_logged: set[tuple[Any, Any]] = set()
        self._settings = settings
        self._log = logger if logger is not None else _get_logger("reader")
        self._swap_check_s = swap_check_s
        self._follow = FileChangeWatch(follow) if follow is not None else None
        self._follow_s = follow_s
        self._request_check_s = request_check_s
        self._idle_timeout_s = idle_timeout_s
        self._line_timeout_s = getattr(settings, "reader_line_timeout_s", None) or line_timeout_s
        self._write_timeout_s = write_timeout_s
        self._max_connections = connection_cap(getattr(settings, "reader_max_connections", None) or max_connections)
        self._backlog = backlog
        self._accept_pause_s = accept_pause_s
        self._accept_log_interval_s = accept_log_interval_s
        self._accept_errors = 0
        self._accept_logged_at: float | None = None
        self._refused = 0
        self._refused_logged_at: float | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._listener: socket.socket | None = None
        self._conns: dict[asyncio.Task[Any], _Connection] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reader")
        # Its own thread: queued on the pool, a release waited behind every search already queued
        # there (under sixteen clients, a dozen searches' pages were mapped at once).
        self._tidy_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader-tidy")
        self._in_flight = 0  # requests between parse and reply
        self._tidying: set[asyncio.Task[None]] = set()
        # A request ended with MAX_TIDYING outstanding: None when none did, else whether the pages
        # of one of those requests were not dropped yet.
        self._owed_pages: bool | None = None
        self._tidying_stopped = False
        self._give_back = give_back if give_back is not None else GiveBack()
        self._audit_key = audit_key
        if audit_key is None and settings is not None:
            key_file = settings.audit_key_file
            try:
                self._audit_key = read_audit_key(key_file)
            except OSError as exc:
                self._log.warning("audit_key_unreadable", path=str(key_file), error=type(exc).__name__)
        self.embedder: Any = None
        self.embedder_state = "not_loaded"
        self._current: IndexLease | None = None
        self._unreadable: IndexUnreadableError | None = None  # the last generation that did not open
        self._swap_lock: asyncio.Lock | None = None
        self._last_check = 0.0
        self._check_task: asyncio.Task[None] | None = None
        self._periodic_task: asyncio.Task[None] | None = None
        self._bound_path: Path | None = None
        self._stopping = False  # stop() began: a connection closes once its answer is written
        self.swaps = 0

    # -- startup and shutdown ------------------------------------------------------------------

    async def start(self, *, path: str | os.PathLike[str] | None = None, sock: socket.socket | None = None) -> None:
        """Bind ``path`` (unless given a listening ``sock``), load the embedder and the index, then
        serve. Binding comes first: when another reader already listens there, this one fails at
        once, before it loads a model or copies a generation into the private directory."""
        self._swap_lock = asyncio.Lock()
        if sock is None:
            if path is None:
                raise ValueError("start() needs a socket path or a listening socket")
            sock = bind_socket(path, self._backlog)
            self._bound_path = Path(path)
        sock.setblocking(False)
        # The generation first, then the model: loading a generation touches many of its files'
        # pages (dropped right after) and the model's session build passes through far more memory
        # than it keeps; each on top of the other's resident part, this order peaks
        # lower (bench: reader_peak_rss_mb_100k). The generation is then fitted to the model.
        await self.check_index()
        await self._load_embedder()
        await self._fit_current()
        self._listener = sock
        self._accept_task = asyncio.create_task(self._accept_loop(sock))
        self._periodic_task = asyncio.create_task(self._check_periodically())
        cap = somaxconn()
        if path is not None and cap is not None and cap < self._backlog:
            # listen() does not fail: the kernel silently queues fewer. Say so once.
            self._log.warning("backlog_capped", backlog=self._backlog, somaxconn=cap)
        self._log.info(
            "reader_started",
            socket=str(path) if path is not None else "systemd",
            max_connections=self._max_connections,
            backlog=self._backlog if path is not None else "systemd",
            somaxconn=cap,
            generation=self._current.generation if self._current else None,
            index_ready=self._current is not None,
            embedder=self.embedder_state,
            audit_digest=self._audit_key is not None,
        )

    async def stop(self, grace_s: float = DEFAULT_DRAIN_S) -> None:
        """Drain: stop accepting, close every connection that is not being answered, let the
        answers in flight be written (up to ``grace_s``; each connection then closes instead of
        reading another request), cancel what is left, close readers."""
        self._stopping = True
        for task in (self._accept_task, self._periodic_task, self._check_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._listener is not None:
            self._listener.close()
        for state in self._conns.values():
            if state.waiting_since is not None and state.writer is not None and not state.evicted:
                state.evicted = True  # no request of its own in flight: nothing to wait for
                with contextlib.suppress(Exception):
                    state.writer.close()
        unfinished = 0
        if self._conns:
            _, pending = await asyncio.wait(list(self._conns), timeout=grace_s)
            unfinished = len(pending)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        self._tidying_stopped = True
        if self._tidying:  # they hold the lease: let them end, so the generation is closed below
            await asyncio.wait(list(self._tidying), timeout=grace_s)
        if self._current is not None:
            lease, self._current = self._current, None
            lease.retired = True
            if lease.users == 0:
                self._close_reader(lease)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._tidy_pool.shutdown(wait=False, cancel_futures=True)
        if self._bound_path is not None:
            with contextlib.suppress(OSError):
                self._bound_path.unlink()
        self._log.info("reader_stopped", swaps=self.swaps, unfinished=unfinished)

    async def run(self, *, path: str | os.PathLike[str] | None = None) -> int:
        """Serve until SIGTERM/SIGINT. Uses the systemd socket when activated, else ``path``."""
        sock = systemd_socket()
        try:
            await self.start(path=None if sock is not None else path, sock=sock)
        except OSError as exc:
            self._log.error("reader_start_failed", socket=str(path), error=str(exc))
            return EXIT_FAILED
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        _sd_notify("READY=1")
        await stopping.wait()
        _sd_notify("STOPPING=1")
        await self.stop()
        return EXIT_OK

    async def _load_embedder(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            embedder = await loop.run_in_executor(self._pool, self._embedder_factory)
        except Exception as exc:  # noqa: BLE001 - serve degraded rather than not at all
            # The loader's message names paths and models, never a query: worth keeping.
            self._log.error("embedder_load_failed", error=type(exc).__name__, detail=str(exc)[:500])
            self.embedder_state = "failed"
            if self._sparse_factory is not None:
                try:
                    sparse = await loop.run_in_executor(self._pool, self._sparse_factory)
                except Exception as sparse_exc:  # noqa: BLE001
                    self._log.error("sparse_load_failed", error=type(sparse_exc).__name__)
                else:
                    self.embedder = _Serialized(_LexicalOnly(sparse), threading.Lock())
                    self.embedder_state = "lexical_only"
            return
        self.embedder = _Serialized(embedder, threading.Lock())
        self.embedder_state = "loaded"

    # -- index generations ---------------------------------------------------------------------

    def _needs_open(self) -> bool:
        """Runs on a worker thread: ``newer_available`` may read a file."""
        lease = self._current
        if lease is None:
            return True
        return lease.reader.newer_available()

    async def check_index(self) -> None:
        """Open and swap in a newer generation if there is one. Never fails a request: errors are
        logged and the current reader stays."""
        assert self._swap_lock is not None
        async with self._swap_lock:
            self._last_check = time.monotonic()
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
            if reader is None or (self._current is not None and reader is self._current.reader):
                return
            self._unreadable = None
            lease = IndexLease(reader)
            await self._fit(lease)
            old, self._current = self._current, lease
            self.swaps += 1 if old is not None else 0
            self._log.info(
                "index_swapped" if old is not None else "index_opened",
                generation=self._current.generation,
                previous=old.generation if old is not None else None,
                copy=getattr(reader, "copy_method", None),
            )
            if old is not None:
                old.retired = True
                if old.users == 0:
                    self._close_reader(old)

    def _report_unreadable(self, exc: IndexUnreadableError) -> None:
        """One journal line per unreadable generation (checks repeat every few seconds); the
        generation being served, if any, stays."""
        seen = self._unreadable
        self._unreadable = exc
        if seen is not None and (seen.generation, seen.where, seen.reason) == (exc.generation, exc.where, exc.reason):
            return
        self._log.error(
            "index_unreadable",
            generation=exc.generation,
            path=exc.where,
            error=exc.reason[:500],
            serving=self._current.generation if self._current is not None else None,
        )

    async def _fit_current(self) -> None:
        """Fit the generation opened before the model loaded (``start``) to it, as ``check_index``
        fits every later one."""
        assert self._swap_lock is not None
        async with self._swap_lock:
            if self._current is not None:
                await self._fit(self._current)

    async def _fit(self, lease: IndexLease) -> None:
        """``_fit_embedder`` on a worker thread; if it fails, the lease ranks lexically."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._fit_embedder, lease)
        except Exception as exc:  # noqa: BLE001 - rank lexically rather than with a wrong model
            self._log.error("embedder_fit_failed", error=type(exc).__name__, detail=str(exc)[:500])
            lease.embedder, lease.degraded = self._lexical_only(), DEGRADED_MODEL_MISMATCH

    def _fit_embedder(self, lease: IndexLease) -> None:
        """Runs on a worker thread: give ``lease`` the embedder its generation was built with."""
        meta = lease.index.read_meta()
        if meta is None or self.embedder is None or self.embedder_state != "loaded":
            return  # nothing to compare, or already lexical-only (embedder_state says why)
        if (meta.model, meta.dim) == (self.embedder.model_id, self.embedder.dim):
            return
        if meta.model not in self._other_models:
            other = self._model_loader(meta.model) if self._model_loader is not None else None
            self._other_models[meta.model] = _Serialized(other, threading.Lock()) if other is not None else None
        other = self._other_models[meta.model]
        if other is not None and other.dim == meta.dim:
            lease.embedder = other
            if (meta.model, meta.dim) not in self._mismatches_logged:
                self._mismatches_logged.add((meta.model, meta.dim))
                self._log.info("embedder_matched", generation=lease.generation, model=meta.model, dim=meta.dim)
            return
        lease.embedder, lease.degraded = self._lexical_only(), DEGRADED_MODEL_MISMATCH
        if (meta.model, meta.dim) not in self._mismatches_logged:
            self._mismatches_logged.add((meta.model, meta.dim))
            self._log.warning(
                "model_mismatch",
                generation=lease.generation,
                index_model=meta.model,
                index_dim=meta.dim,
                embedder_model=self.embedder.model_id,
                embedder_dim=self.embedder.dim,
            )

    def _lexical_only(self) -> Any:
        return _Serialized(_LexicalOnly(self.embedder), threading.Lock()) if self.embedder is not None else None

    def _close_reader(self, lease: IndexLease) -> None:
        # Through the lease's lock: a request cancelled at shutdown has released its lease while
        # its worker thread may still be querying; the close waits for that call to end.
        try:
            lease.index.close()
        except Exception as exc:  # noqa: BLE001
            self._log.warning("index_close_failed", generation=lease.generation, error=type(exc).__name__)
            return
        release_freed_memory()

    async def _check_periodically(self) -> None:
        watch = self._follow
        if watch is None:
            while True:
                await asyncio.sleep(self._swap_check_s)
                await self.check_index()
        # A stat every follow_s; the full check when the file changed, and every swap_check_s
        # regardless (a check that failed, or a change the stat cannot see, is retried).
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(self._follow_s)
            if watch.changed() or time.monotonic() - last_full >= self._swap_check_s:
                last_full = time.monotonic()
                await self.check_index()

    def _check_soon(self) -> None:
        """Between requests: start a check in the background if none ran lately."""
        if time.monotonic() - self._last_check < self._request_check_s:
            return
        if self._check_task is not None and not self._check_task.done():
            return
        self._last_check = time.monotonic()
        self._check_task = asyncio.create_task(self.check_index())

    def _no_index_message(self) -> str:
        unreadable = self._unreadable
        if unreadable is None:
            return "no index generation is published yet"
        named = f"generation {unreadable.generation}" if unreadable.generation is not None else "CURRENT"
        return f"no readable index generation: {named} is unreadable (the reader's journal says why)"

    def _acquire(self) -> IndexLease | None:
        lease = self._current
        if lease is not None:
            lease.users += 1
        return lease

    def _release(self, lease: IndexLease) -> None:
        lease.users -= 1
        if lease.retired and lease.users == 0:
            self._close_reader(lease)

    # -- connections ---------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accept for ever. Out of descriptors or buffers: log once per interval, pause briefly,
        retry; never spin (the kernel keeps the waiting clients in the backlog meanwhile)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in _ACCEPT_TRANSIENT_ERRORS:
                    continue
                self._accept_failed(exc)
                await asyncio.sleep(self._accept_pause_s)
                continue
            self._admit(conn)

    def _accept_failed(self, exc: OSError) -> None:
        self._accept_errors += 1
        now = time.monotonic()
        if self._accept_logged_at is None or now - self._accept_logged_at >= self._accept_log_interval_s:
            self._log.warning(
                "accept_failed",
                error=errno.errorcode.get(exc.errno or 0, type(exc).__name__),
                failures=self._accept_errors,
                pause_s=self._accept_pause_s,
                connections=len(self._conns),
            )
            self._accept_logged_at, self._accept_errors = now, 0

    def _admit(self, conn: socket.socket) -> None:
        """Serve ``conn``, or at the cap make room by closing the longest-waiting idle connection;
        with none idle, refuse it with one ``busy`` line and close it."""
        conn.setblocking(False)
        if len(self._conns) >= self._max_connections and not self._evict_one():
            self._refuse(conn)
            return
        state = _Connection()
        task = asyncio.create_task(self._on_socket(conn, state))
        self._conns[task] = state
        task.add_done_callback(self._conns.pop)

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request line; with none idle, the
        one whose reply has waited longest for its client to read. Whether one was closed."""
        idle = [s for s in self._conns.values() if s.waiting_since is not None and not s.evicted and s.writer]
        if idle:
            oldest = min(idle, key=lambda s: s.waiting_since or 0.0)
            oldest.evicted = True
            assert oldest.writer is not None
            with contextlib.suppress(Exception):
                oldest.writer.write(error_reply(None, BUSY, "idle connection closed: the reader needed its slot"))
                oldest.writer.close()
            return True
        stuck = [s for s in self._conns.values() if s.writing_since is not None and not s.evicted and s.writer]
        if not stuck:
            return False
        oldest = min(stuck, key=lambda s: s.writing_since or 0.0)
        oldest.evicted = True
        assert oldest.writer is not None
        # Its buffers are full: nothing more can be said to it, and close() would wait to flush.
        oldest.writer.transport.abort()
        return True

    def _refuse(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.send(error_reply(None, BUSY, f"the reader serves at most {self._max_connections} connections; retry"))
        conn.close()
        self._refused += 1
        now = time.monotonic()
        if self._refused_logged_at is None or now - self._refused_logged_at >= self._accept_log_interval_s:
            self._log.warning("connection_refused", refused=self._refused, max_connections=self._max_connections)
            self._refused_logged_at, self._refused = now, 0

    async def _on_socket(self, conn: socket.socket, state: _Connection) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_LINE_BYTES + 1)
        except OSError:
            conn.close()
            return
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        state.writer = writer
        try:
            await self._serve_connection(reader, writer, state)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            if writer.transport.get_write_buffer_size():
                # A reply the client did not take: close() would keep the socket open until it
                # is flushed, which a client that never reads never lets happen.
                writer.transport.abort()
            else:
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _read_line(self, reader: asyncio.StreamReader, state: _Connection) -> tuple[bytes, bool] | None:
        """The next request line and whether the client half-closed after it; None to close
        quietly (end of stream, idle too long, or evicted). Raises ``_Refusal`` to close with a
        reply: a line over the limit, or one that did not end in ``line_timeout_s``."""
        state.waiting_since = time.monotonic()
        # asyncio.timeout, not wait_for: wait_for wraps each read in a task of its own, and a
        # request paid for three (bench: reader_vs_raw_ratio).
        try:
            async with asyncio.timeout(self._idle_timeout_s):
                first = await reader.read(1)
        except TimeoutError:
            return None
        if not first or state.evicted:
            return None
        if first == b"\n":
            return b"", False
        last = False
        try:
            async with asyncio.timeout(self._line_timeout_s):
                rest = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as eof:
            rest, last = eof.partial, True  # half-closed: answer a final unterminated line
        except asyncio.LimitOverrunError:
            raise _Refusal(LINE_TOO_LONG, f"a request line is at most {MAX_LINE_BYTES} bytes") from None
        except TimeoutError:
            raise _Refusal(LINE_TIMEOUT, f"a request line must end within {self._line_timeout_s:g}s") from None
        if state.evicted:
            return None
        state.waiting_since = None
        line = first + rest
        if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise _Refusal(LINE_TOO_LONG, f"a request line is at most {MAX_LINE_BYTES} bytes")
        return line, last

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: _Connection | None = None
    ) -> None:
        state = state if state is not None else _Connection()
        while True:
            started = time.monotonic()
            try:
                got = await self._read_line(reader, state)
            except _Refusal as refusal:
                state.waiting_since = None
                try:
                    self._audit_refusal(refusal.code, None, started)
                except AuditUnwritable:
                    return
                await self._send(writer, error_reply(None, refusal.code, refusal.message), state)
                return
            if got is None:
                return
            line, last = got
            if line.strip() and not await self._send(writer, await self.answer(line.rstrip(b"\r\n")), state):
                return
            if last or self._stopping:
                return

    async def _send(self, writer: asyncio.StreamWriter, reply: bytes, state: _Connection | None = None) -> bool:
        """Write one reply; False when the client has not taken it within ``write_timeout_s`` (it
        sends requests but does not read the replies): the connection is then dropped at once, and
        while it waits it may be evicted (``_evict_one``), so it never holds a slot a working
        client needs."""
        writer.write(reply)
        if state is not None:
            state.writing_since = time.monotonic()
        try:
            # A client that takes no reply for longer than a client may idle is idle too.
            async with asyncio.timeout(min(self._write_timeout_s, self._idle_timeout_s)):
                await writer.drain()
        except TimeoutError:
            writer.transport.abort()
            return False
        finally:
            if state is not None:
                state.writing_since = None
        return True

    # -- requests ------------------------------------------------------------------------------

    async def answer(self, line: bytes) -> bytes:
        """One request line to one reply line, after its one audit line. A request whose audit
        line cannot be written is not answered: the reply is then an ``internal`` error."""
        started = time.monotonic()
        try:
            request = parse_request(line)
        except ProtocolError as exc:
            return self._audited(
                error_reply(exc.request_id, exc.code, exc.message, exc.field),
                exc.request_id,
                functools.partial(self._audit_refusal, exc.code, exc.field, started),
            )
        self._check_soon()
        if isinstance(request, StatusRequest):
            status = await self._status()
            return self._audited(
                ok_reply(request.id, status), request.id, functools.partial(self._audit, request, started)
            )
        lease = self._acquire()
        if lease is None:
            return self._audited(
                error_reply(request.id, UNAVAILABLE, self._no_index_message()),
                request.id,
                functools.partial(self._audit, request, started, error=UNAVAILABLE),
            )
        self._in_flight += 1
        pages_released: list[bool] = []
        try:
            result, extra = await asyncio.get_running_loop().run_in_executor(
                self._pool, functools.partial(self._execute_then_release, lease, request, pages_released)
            )
        except QueryError as exc:
            code = exc.code or (NOT_FOUND if exc.not_found else BAD_REQUEST)
            return self._audited(
                error_reply(request.id, code, exc.message, exc.field),
                request.id,
                functools.partial(self._audit, request, started, error=code, field=exc.field),
            )
        except EmbedderUnavailable:
            return self._audited(
                error_reply(request.id, UNAVAILABLE, "the embedder is not available and no lexical leg could run"),
                request.id,
                functools.partial(self._audit, request, started, error=UNAVAILABLE),
            )
        except Exception as exc:  # noqa: BLE001 - one failed request must not end the connection
            with contextlib.suppress(Exception):
                self._log.error("request_failed", op=_op(request), error=type(exc).__name__)
            return self._audited(
                error_reply(request.id, INTERNAL, f"the reader failed: {type(exc).__name__}"),
                request.id,
                functools.partial(self._audit, request, started, error=INTERNAL),
            )
        finally:
            self._in_flight -= 1
            self._release_after_tidying(lease, pages=not pages_released)
        return self._audited(
            ok_reply(request.id, result),
            request.id,
            functools.partial(self._audit, request, started, result=result, extra=extra),
        )

    def _execute_then_release(
        self,
        lease: IndexLease,
        request: SearchRequest | WindowRequest | ThreadRequest | RoomsRequest,
        released: list[bool],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``_execute``; then, when other requests are in flight, drop the pages it mapped at once,
        in this worker, and say so in ``released``. Those requests wait for the index anyway, and a
        release deferred past the reply ran only after some of their searches had mapped theirs:
        under sixteen clients the peak rose above what a release per search reaches.
        Alone, the request replies first and its pages go after (``_release_after_tidying``)."""
        try:
            return self._execute(lease, request)
        finally:
            if self._in_flight > 1 and self._give_back.drop_pages(lease.index):
                released.append(True)

    def _release_after_tidying(self, lease: IndexLease, pages: bool = True) -> None:
        """Release ``lease`` once memory is given back (``GiveBack.give_back``) on its own thread: after
        the reply, so no request waits for the release of a search's pages; the lease
        is held until it ends, so the generation cannot be closed (and its ranges unmapped) under
        it. With ``MAX_TIDYING`` tasks outstanding already, one more runs when one of them ends."""
        if len(self._tidying) >= MAX_TIDYING or self._tidying_stopped:
            if not self._tidying_stopped:
                self._owed_pages = bool(self._owed_pages) or pages
            self._release(lease)
            return
        lease.users += 1  # the tidying's own hold, released when it ends
        self._release(lease)
        task = asyncio.get_running_loop().create_task(self._tidy(lease, pages))
        self._tidying.add(task)
        task.add_done_callback(self._tidied)

    async def _tidy(self, lease: IndexLease, pages: bool) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._tidy_pool, self._give_back.give_back, lease.index, pages
            )
        except RuntimeError:
            pass  # the pool is shut down: the reader is stopping
        finally:
            self._release(lease)

    def _tidied(self, task: asyncio.Task[None]) -> None:
        self._tidying.discard(task)
        if self._owed_pages is not None and not self._tidying_stopped:
            # a request ended while two were outstanding: its heap (and pages, unless dropped)
            pages, self._owed_pages = self._owed_pages, None
            lease = self._acquire()
            if lease is not None:
                self._release_after_tidying(lease, pages)

    def _audited(self, reply: bytes, request_id: Any, write_audit: Callable[[], None]) -> bytes:
        """``reply`` once its audit line is written; otherwise an error that gives nothing away."""
        try:
            write_audit()
        except AuditUnwritable:
            return error_reply(
                request_id, INTERNAL, "the audit line could not be written; nothing is answered unaudited"
            )
        return reply

    def _execute(
        self, lease: IndexLease, request: SearchRequest | WindowRequest | ThreadRequest | RoomsRequest
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The reply's result and what only the audit line gets."""
        if isinstance(request, RoomsRequest):
            return list_rooms(lease.index), {}
        if isinstance(request, SearchRequest):
            found = execute_search(lease.index, lease.embedder or self.embedder, request.query)
            result = _cited(lease, found.to_json())
            if lease.degraded and request.query.texts:
                result["degraded"] = lease.degraded
            query = request.query
            directory = lease.index.room_directory() if query.rooms is not None else {}
            senders = (m.get("sender") for hit in found.hits for m in hit.get("messages") or ())
            filters = audited_filters(query.filters(), directory, senders, self._audit_key)
            result["warnings"] = filter_warnings(lease.index, query.rooms, query.senders)
            return result, {
                "returned": list(found.attribution),
                "excluded": found.excluded,
                "candidates": found.candidates,
                "filters": filters,
            }
        if isinstance(request, ThreadRequest):
            result = _cited(lease, execute_thread(lease.index, request.query))
        else:
            result = _cited(lease, execute_window(lease.index, request.query))
        returned = [{"chunk_id": chunk_id} for chunk_id in result.get("chunk_ids", [])]
        event_ids = [m.get("event_id") for m in result.get("messages", [])]
        return result, {"returned": returned, "event_ids": event_ids}

    async def _status(self) -> dict[str, Any]:
        lease = self._acquire()
        meta = None
        if lease is not None:
            try:
                with contextlib.suppress(Exception):
                    meta = await asyncio.get_running_loop().run_in_executor(self._pool, lease.index.read_meta)
            finally:
                self._release(lease)
        return {
            "protocol": PROTOCOL_VERSION,
            "index_ready": lease is not None,
            "generation": lease.generation if lease is not None else None,
            "model": meta.model if meta is not None else None,
            "chat_version": meta.chat_version if meta is not None else None,
            "embedder": self.embedder_state,
            "degraded": lease.degraded if lease is not None else None,
        }

    # -- audit ---------------------------------------------------------------------------------

    def _audit(
        self,
        request: Request,
        started: float,
        *,
        result: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        error: str | None = None,
        field: str | None = None,
    ) -> None:
        """One line per request: the keyed digest of the query (never its text), the filters,
        what was returned (window ids, their message event ids, ranks per text leg, legs), and
        how many windows eligibility excluded. Raises ``AuditUnwritable`` if it cannot be written."""
        fields: dict[str, Any] = {"op": _op(request), "outcome": error or "ok"}
        if isinstance(request, SearchRequest):
            query = request.query
            fields["query_digest"] = query_digest(self._audit_key, canonical_query(query)) if query.texts else None
            fields["n_texts"] = len(query.texts)
            fields["top_k"] = query.top_k
            # A request refused before the index was asked records no filter value in the clear.
            fields["filters"] = (extra or {}).get("filters") or audited_filters(
                query.filters(), {}, (), self._audit_key
            )
            fields["sort"] = query.sort
            fields["continued"] = query.cursor is not None
            if result is not None:
                fields["window_ids"] = [hit.get("chunk_id") for hit in result.get("hits", [])]
                fields["returned"] = (extra or {}).get("returned", [])
                fields["excluded"] = (extra or {}).get("excluded")
                fields["candidates"] = (extra or {}).get("candidates")
                fields["degraded"] = result.get("degraded")
        elif isinstance(request, (WindowRequest, ThreadRequest)):
            window = request.query
            canonical = json.dumps({"event_id": window.event_id}, separators=(",", ":")).encode("utf-8")
            fields["query_digest"] = query_digest(self._audit_key, canonical)
            fields["filters"] = None
            if isinstance(window, WindowQuery):
                fields["before"] = window.before
                fields["after"] = window.after
            else:
                fields["top_k"] = window.top_k
                fields["continued"] = window.cursor is not None
            if result is not None:
                fields["window_ids"] = list(result.get("chunk_ids", []))
                fields["returned"] = (extra or {}).get("returned", [])
                fields["event_ids"] = (extra or {}).get("event_ids", [])
                fields["excluded"] = None  # a window has no eligibility filter
        else:
            fields["query_digest"] = None
            fields["filters"] = None
        if field is not None:
            fields["field"] = audited_field(field)
        fields["duration_ms"] = round((time.monotonic() - started) * 1000, 2)
        self._write_audit(bounded(fields))

    def _audit_refusal(self, code: str, field: str | None, started: float) -> None:
        self._write_audit(
            {
                "op": None,
                "outcome": code,
                "field": audited_field(field),
                "query_digest": None,
                "filters": None,
                "duration_ms": round((time.monotonic() - started) * 1000, 2),
            }
        )

    def _write_audit(self, fields: dict[str, Any]) -> None:
        try:
            self._log.info("request_answered", **fields)
        except Exception as exc:  # a full disk, a closed journal stream, anything
            with contextlib.suppress(Exception):
                self._log.error("audit_unwritable", error=type(exc).__name__)
            raise AuditUnwritable(type(exc).__name__) from exc


def _cited(lease: IndexLease, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with room names, display names and permalinks (``daemon.reader.citations``)."""
    rooms = rooms_of(result)
    return cite(result, lease.index.room_directory(rooms) if rooms else {})


class _Refusal(OperationalError):
    """A connection that is answered with one error line and then closed."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _op(request: Any) -> str:
    if isinstance(request, SearchRequest):
        return "search" if request.query.terms else "list"
    if isinstance(request, WindowRequest):
        return "window"
    if isinstance(request, ThreadRequest):
        return "thread"
    if isinstance(request, RoomsRequest):
        return "rooms"
    return "status"


# ---------------------------------------------------------------------------------------------
# Wiring of the real adapters (lazy imports: the CLI imports this module only for `serve`).


def make_index_opener(settings: Settings) -> Callable[[], IndexReader | None]:
    """The Qdrant server (read-only key) when ``qdrant_url`` is set, else the newest published
    Edge generation, copied into the reader's private directory."""
    if settings.qdrant_url:

        def open_server() -> IndexReader | None:
            from daemon.wiring import qdrant_client
            from daemon.index.remote_reader import RemoteIndexReader

            return RemoteIndexReader(qdrant_client(settings), settings.qdrant_collection)

        return open_server

    leftovers_discarded = False
    unreadable: IndexUnreadableError | None = None

    def open_edge() -> IndexReader | None:
        nonlocal leftovers_discarded, unreadable
        from daemon.wiring import edge_index_root, reader_private_dir
        from daemon.index.edge import read_current
        from daemon.index.edge_reader import EdgeIndexReader

        private_dir = reader_private_dir(settings)
        root = edge_index_root(settings)
        if not leftovers_discarded:
            # The first open comes after ReaderService.start() took the socket, so no other reader
            # uses the private directory: copies left there by one that died without closing would
            # otherwise pile up, and a live reader's copies are never touched.
            EdgeIndexReader.discard_copies(private_dir)
            leftovers_discarded = True
        if unreadable is not None and unreadable.generation is not None:
            # A generation never changes once published: one that did not open will not, and
            # copying it again at every check would cost its whole size each time.
            try:
                unchanged = read_current(root) == unreadable.generation
            except Exception:  # noqa: BLE001 - open_latest says what is wrong with CURRENT
                unchanged = False
            if unchanged:
                raise IndexUnreadableError(unreadable.generation, unreadable.where, unreadable.reason)
        try:
            return EdgeIndexReader.open_latest(root, private_dir)
        except IndexUnreadableError as exc:
            unreadable = exc
            raise

    return open_edge


def make_embedder_factory(settings: Settings) -> Callable[[], Embedder]:
    def load() -> Embedder:
        from daemon.wiring import open_embedder, reader_private_dir

        # No onnxruntime arena: the reader's RSS must come back down after a max-size query. One
        # text per run: a batch of eight 1,000-byte texts padded together raised the peak sharply
        # (attention over the whole padded batch), and with one thread a batch is no faster.
        return open_embedder(
            settings,
            threads=1,
            cache_dir=reader_private_dir(settings) / "fastembed-cache",
            cpu_mem_arena=False,
            batch_size=QUERY_BATCH_SIZE,
        )

    return load


def make_model_loader(settings: Any) -> Callable[[str], Embedder | None]:
    """Loads another model a generation was built with, when the model directory's parent holds
    it (``<models>/<last part of the model id>/model.onnx``, as ``make setup`` lays them out).
    Never downloads: None when it is not there."""

    def load(model: str) -> Embedder | None:
        from daemon.wiring import reader_private_dir

        base = getattr(settings, "embed_model_dir", None)
        if not base or not model:
            return None
        candidate = Path(base).parent / model.rstrip("/").rsplit("/", 1)[-1]
        if not (candidate / "model.onnx").is_file():
            return None
        from daemon.embedder import FastEmbedder

        return FastEmbedder(
            model=model,
            model_dir=candidate,
            cache_dir=reader_private_dir(settings) / "fastembed-cache",
            threads=1,
            batch_size=QUERY_BATCH_SIZE,
            cpu_mem_arena=False,
        )

    return load


def make_sparse_factory() -> Callable[[], Any]:
    """BM25 query vectors without the dense model, for when the model fails to load."""

    def load() -> Any:
        from daemon.embedder import Bm25Sparse

        return Bm25Sparse()

    return load


def serve_main(settings: Settings) -> int:
    """Entry point of ``huginn-chat serve``. Returns the exit code."""
    from daemon import journal

    journal.configure()
    service = ReaderService(
        make_index_opener(settings),
        make_embedder_factory(settings),
        settings,
        sparse_factory=make_sparse_factory(),
        model_loader=make_model_loader(settings),
        follow=None if settings.qdrant_url else current_file(settings),
    )
    return asyncio.run(service.run(path=settings.socket))


def current_file(settings: Settings) -> Path:
    """The embedded index's ``generations/CURRENT``, which every publication replaces."""
    from daemon.wiring import EDGE_CURRENT, edge_index_root

    return edge_index_root(settings).joinpath(*EDGE_CURRENT)
