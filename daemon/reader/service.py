"""``huginn-chat serve``: the read-only search process, put together from its parts.

Owns: ``ReaderService``, which wires the parts of one reader to each other and runs their order:
start (bind the socket first, then the index generation, then the model, then accept), serve
until SIGTERM/SIGINT (telling systemd ``READY=1`` and ``STOPPING=1``), and drain (stop accepting,
let the answers in flight be written for up to ``DEFAULT_DRAIN_S``, close the generation). Each
part has its own module:

- ``daemon.reader.sockets``: the listening socket (a path bound 0660, or the one systemd passes);
- ``daemon.reader.connections``: accepting, the connection cap, the NDJSON line loop;
- ``daemon.reader.requests``: one request line to one reply line;
- ``daemon.reader.generations``: the index generation served and its swaps;
- ``daemon.reader.embedders``: the query embedder each generation gets (``threads=1``);
- ``daemon.reader.memory``: the memory given back between requests;
- ``daemon.reader.audit_log``: the audit line every request leaves.

Must not: import or call any write path (no ``IndexWriter``, no refresher, no Matrix) or the
process wiring (``daemon.wiring`` builds a service from the settings, never the reverse), log a
query text, or answer a search unfiltered when the embedder fails (``daemon.reader.search``
degrades to the lexical leg).

Theory of operation. Every request runs on a worker thread against an ``IndexLease``: the
reader that was current when the request began, with a count of the requests using it. Index
readers and the embedder are called from one thread at a time each (neither library promises
more); requests on different generations proceed in parallel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from daemon.config import Settings
from daemon.errors import EXIT_FAILED, EXIT_OK
from daemon.index.port import IndexReader
from daemon.journal import get_logger
from daemon.ports import Embedder
from daemon.reader.audit_log import AuditLog, read_audit_key
from daemon.reader.connections import (
    ACCEPT_LOG_INTERVAL_S,
    ACCEPT_PAUSE_S,
    DEFAULT_LINE_TIMEOUT_S,
    DEFAULT_WRITE_TIMEOUT_S,
    Connections,
)
from daemon.reader.embedders import Embedders
from daemon.reader.generations import Generations, IndexLease
from daemon.reader.memory import GiveBack, Tidying
from daemon.reader.requests import Requests
from daemon.reader.sockets import (
    DEFAULT_BACKLOG,
    DEFAULT_MAX_CONNECTIONS,
    bind_socket,
    connection_cap,
    sd_notify,
    somaxconn,
    systemd_socket,
)

# How long the reader waits on SIGTERM for the answers in flight before it exits anyway.
DEFAULT_DRAIN_S = 10.0


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
        self._log = logger if logger is not None else get_logger(component="reader")
        self._max_connections = connection_cap(getattr(settings, "reader_max_connections", None) or max_connections)
        self._backlog = backlog
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reader")
        self.embedders = Embedders(
            embedder_factory, self._pool, self._log, sparse_factory=sparse_factory, model_loader=model_loader
        )
        self.generations = Generations(
            open_index,
            self.embedders.fit,
            self._pool,
            self._log,
            swap_check_s=swap_check_s,
            request_check_s=request_check_s,
            follow=follow,
            follow_s=follow_s,
        )
        self.tidying = Tidying(
            give_back if give_back is not None else GiveBack(), self.generations.acquire, self.generations.release
        )
        if audit_key is None and settings is not None:
            key_file = settings.audit_key_file
            try:
                audit_key = read_audit_key(key_file)
            except OSError as exc:
                self._log.warning("audit_key_unreadable", path=str(key_file), error=type(exc).__name__)
        self.audit = AuditLog(self._log, audit_key)
        self.requests = Requests(self.generations, self.embedders, self.tidying, self.audit, self._pool, self._log)
        self.connections = Connections(
            self.requests.answer,
            self.audit.refusal,
            self._log,
            max_connections=self._max_connections,
            idle_timeout_s=idle_timeout_s,
            line_timeout_s=getattr(settings, "reader_line_timeout_s", None) or line_timeout_s,
            write_timeout_s=write_timeout_s,
            accept_pause_s=accept_pause_s,
            accept_log_interval_s=accept_log_interval_s,
        )
        self._accept_task: asyncio.Task[None] | None = None
        self._listener: socket.socket | None = None
        self._bound_path: Path | None = None

    async def start(self, *, path: str | os.PathLike[str] | None = None, sock: socket.socket | None = None) -> None:
        """Bind ``path`` (unless given a listening ``sock``), load the embedder and the index, then
        serve. Binding comes first: when another reader already listens there, this one fails at
        once, before it loads a model or copies a generation into the private directory."""
        self.generations.swap_lock = asyncio.Lock()
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
        await self.generations.check()
        await self.embedders.load()
        await self.generations.fit_current()
        self._listener = sock
        self._accept_task = asyncio.create_task(self.connections.accept_loop(sock))
        self.generations.start_checking()
        cap = somaxconn()
        if path is not None and cap is not None and cap < self._backlog:
            # listen() does not fail: the kernel silently queues fewer. Say so once.
            self._log.warning("backlog_capped", backlog=self._backlog, somaxconn=cap)
        current = self.generations.current
        self._log.info(
            "reader_started",
            socket=str(path) if path is not None else "systemd",
            max_connections=self._max_connections,
            backlog=self._backlog if path is not None else "systemd",
            somaxconn=cap,
            generation=current.generation if current else None,
            index_ready=current is not None,
            embedder=self.embedders.state,
            audit_digest=self.audit.key is not None,
        )

    async def stop(self, grace_s: float = DEFAULT_DRAIN_S) -> None:
        """Drain: stop accepting, close every connection that is not being answered, let the
        answers in flight be written (up to ``grace_s``; each connection then closes instead of
        reading another request), cancel what is left, close readers."""
        self.connections.stopping = True
        if self._accept_task is not None:
            self._accept_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._accept_task
        await self.generations.stop_checking()
        if self._listener is not None:
            self._listener.close()
        unfinished = await self.connections.close_all(grace_s)
        await self.tidying.stop(grace_s)
        self.generations.retire_current()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.tidying.pool.shutdown(wait=False, cancel_futures=True)
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
        sd_notify("READY=1")
        await stopping.wait()
        sd_notify("STOPPING=1")
        await self.stop()
        return EXIT_OK

    async def answer(self, line: bytes) -> bytes:
        """One request line to one reply line (``Requests.answer``)."""
        return await self.requests.answer(line)

    async def check_index(self) -> None:
        """Open and swap in a newer generation if there is one (``Generations.check``)."""
        await self.generations.check()

    @property
    def swaps(self) -> int:
        return self.generations.swaps

    @property
    def embedder(self) -> Any:
        return self.embedders.embedder

    @property
    def embedder_state(self) -> str:
        return self.embedders.state

    # The names tests drive a service by without starting it, each forwarded to the part that
    # owns it.

    @property
    def _current(self) -> IndexLease | None:
        return self.generations.current

    @_current.setter
    def _current(self, lease: IndexLease | None) -> None:
        self.generations.current = lease

    @property
    def _last_check(self) -> float:
        return self.generations.last_check

    @_last_check.setter
    def _last_check(self, when: float) -> None:
        self.generations.last_check = when

    @property
    def _swap_lock(self) -> asyncio.Lock | None:
        return self.generations.swap_lock

    @_swap_lock.setter
    def _swap_lock(self, lock: asyncio.Lock | None) -> None:
        self.generations.swap_lock = lock

    @property
    def _in_flight(self) -> int:
        return self.tidying.in_flight

    @_in_flight.setter
    def _in_flight(self, count: int) -> None:
        self.tidying.in_flight = count

    @property
    def _tidying(self) -> set[asyncio.Task[None]]:
        return self.tidying.tasks

    @property
    def _tidy_pool(self) -> ThreadPoolExecutor:
        return self.tidying.pool

    @property
    def _conns(self) -> dict[asyncio.Task[Any], Any]:
        return self.connections.conns

    async def _load_embedder(self) -> None:
        await self.embedders.load()

    async def _accept_loop(self, listener: socket.socket) -> None:
        await self.connections.accept_loop(listener)

    def _release_after_tidying(self, lease: IndexLease, pages: bool = True) -> None:
        self.tidying.release_after(lease, pages)
