"""The reader's client connections: accepting them and the NDJSON line loop on each.

Owns: the accept loop (out of descriptors or buffers: log once per interval, pause, retry; never
spin), the cap on connections served at once (at the cap the longest-idle connection is closed
to make room, then the one whose reply has waited longest to be read; with neither, the newcomer
gets one ``busy`` line), reading one request line at a time within its bounds (length, the time a
started line may take, how long a client may idle), writing each reply within
``write_timeout_s``, and closing the connections at shutdown once their answers are written.

Must not: parse or answer a request (it hands each line to ``answer``, ``daemon.reader.requests``),
hold a line's text anywhere but in the call that answers it, or let one connection's failure end
another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from typing import Any, Awaitable, Callable

from daemon.errors import OperationalError
from daemon.reader.audit_log import AuditUnwritable
from daemon.reader.protocol import BUSY, LINE_TIMEOUT, LINE_TOO_LONG, MAX_LINE_BYTES, error_reply

# A request line must arrive whole this many seconds after its first byte.
DEFAULT_LINE_TIMEOUT_S = 5.0
# A reply must be taken by the client within this many seconds, or the connection is dropped: a
# client that sends requests and never reads would otherwise hold its slot (and the reply's
# buffers) until the idle timeout, and enough of them lock every working client out.
DEFAULT_WRITE_TIMEOUT_S = 5.0
# A connection's user-space send buffer above which a reply waits for the client to read (asyncio's
# default is 64 KiB): what a client that never reads can pin beyond the kernel's socket buffer.
WRITE_BUFFER_HIGH = 16 * 1024
# accept() failing (EMFILE, ENFILE, ENOBUFS, ENOMEM): pause this long, log at most once per interval.
ACCEPT_PAUSE_S = 0.2
ACCEPT_LOG_INTERVAL_S = 10.0
_ACCEPT_TRANSIENT_ERRORS = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EINTR, errno.EPROTO})


class ConnectionState:
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


class LineRefused(OperationalError):
    """A connection that is answered with one error line and then closed."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class Connections:
    """Every connection the reader serves. ``answer(line)`` turns one request line into its reply
    line; ``audit_refusal(code, field, started)`` writes the audit line of a line refused on the wire
    and raises ``AuditUnwritable`` when it cannot. ``conns`` maps each connection's task to its
    state; ``stopping`` is set once the reader began to stop: a connection then closes once its
    answer is written."""

    def __init__(
        self,
        answer: Callable[[bytes], Awaitable[bytes]],
        audit_refusal: Callable[[str, str | None, float], None],
        log: Any,
        *,
        max_connections: int,
        idle_timeout_s: float,
        line_timeout_s: float,
        write_timeout_s: float,
        accept_pause_s: float,
        accept_log_interval_s: float,
    ):
        self._answer = answer
        self._audit_refusal = audit_refusal
        self._log = log
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._line_timeout_s = line_timeout_s
        self._write_timeout_s = write_timeout_s
        self._accept_pause_s = accept_pause_s
        self._accept_log_interval_s = accept_log_interval_s
        self._accept_errors = 0
        self._accept_logged_at: float | None = None
        self._refused = 0
        self._refused_logged_at: float | None = None
        self.conns: dict[asyncio.Task[Any], ConnectionState] = {}
        self.stopping = False

    async def accept_loop(self, listener: socket.socket) -> None:
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
                connections=len(self.conns),
            )
            self._accept_logged_at, self._accept_errors = now, 0

    def _admit(self, conn: socket.socket) -> None:
        """Serve ``conn``, or at the cap make room by closing the longest-waiting idle connection;
        with none idle, refuse it with one ``busy`` line and close it."""
        conn.setblocking(False)
        if len(self.conns) >= self._max_connections and not self._evict_one():
            self._refuse(conn)
            return
        state = ConnectionState()
        task = asyncio.create_task(self._on_socket(conn, state))
        self.conns[task] = state
        task.add_done_callback(self.conns.pop)

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request line; with none idle, the
        one whose reply has waited longest for its client to read. Whether one was closed."""
        idle = [s for s in self.conns.values() if s.waiting_since is not None and not s.evicted and s.writer]
        if idle:
            oldest = min(idle, key=lambda s: s.waiting_since or 0.0)
            oldest.evicted = True
            assert oldest.writer is not None
            with contextlib.suppress(Exception):
                oldest.writer.write(error_reply(None, BUSY, "idle connection closed: the reader needed its slot"))
                oldest.writer.close()
            return True
        stuck = [s for s in self.conns.values() if s.writing_since is not None and not s.evicted and s.writer]
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

    async def _on_socket(self, conn: socket.socket, state: ConnectionState) -> None:
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

    async def _read_line(self, reader: asyncio.StreamReader, state: ConnectionState) -> tuple[bytes, bool] | None:
        """The next request line and whether the client half-closed after it; None to close
        quietly (end of stream, idle too long, or evicted). Raises ``LineRefused`` to close with a
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
            raise LineRefused(LINE_TOO_LONG, f"a request line is at most {MAX_LINE_BYTES} bytes") from None
        except TimeoutError:
            raise LineRefused(LINE_TIMEOUT, f"a request line must end within {self._line_timeout_s:g}s") from None
        if state.evicted:
            return None
        state.waiting_since = None
        line = first + rest
        if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise LineRefused(LINE_TOO_LONG, f"a request line is at most {MAX_LINE_BYTES} bytes")
        return line, last

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: ConnectionState
    ) -> None:
        while True:
            started = time.monotonic()
            try:
                got = await self._read_line(reader, state)
            except LineRefused as refusal:
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
            if line.strip() and not await self._send(writer, await self._answer(line.rstrip(b"\r\n")), state):
                return
            if last or self.stopping:
                return

    async def _send(self, writer: asyncio.StreamWriter, reply: bytes, state: ConnectionState) -> bool:
        """Write one reply; False when the client has not taken it within ``write_timeout_s`` (it
        sends requests but does not read the replies): the connection is then dropped at once, and
        while it waits it may be evicted (``_evict_one``), so it never holds a slot a working
        client needs."""
        writer.write(reply)
        state.writing_since = time.monotonic()
        try:
            # A client that takes no reply for longer than a client may idle is idle too.
            async with asyncio.timeout(min(self._write_timeout_s, self._idle_timeout_s)):
                await writer.drain()
        except TimeoutError:
            writer.transport.abort()
            return False
        finally:
            state.writing_since = None
        return True

    async def close_all(self, grace_s: float) -> int:
        """At shutdown: close every connection that is not being answered, let the answers in
        flight be written (up to ``grace_s``; each connection then closes instead of reading
        another request), cancel what is left. How many were cancelled."""
        for state in self.conns.values():
            if state.waiting_since is not None and state.writer is not None and not state.evicted:
                state.evicted = True  # no request of its own in flight: nothing to wait for
                with contextlib.suppress(Exception):
                    state.writer.close()
        if not self.conns:
            return 0
        _, pending = await asyncio.wait(list(self.conns), timeout=grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        return len(pending)
