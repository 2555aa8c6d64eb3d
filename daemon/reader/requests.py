"""Answering one request line: parse, run it on a worker thread, reply, audit.

Owns: turning a request line into its reply line (``answer``): the protocol's parse, the reader's
``status``, running a search, listing, window, thread or rooms request on a worker thread against
the generation current when it began (with citations, the search's warnings and its ``degraded``
mark), the error each failure becomes, and the audit line every answer waits for: a request whose
line cannot be written is answered with an ``internal`` error instead.

Must not: decide what a search means (``daemon.reader.search`` does), log a query text, read a
connection (``daemon.reader.connections`` hands lines in), or let one failed request end anything
but itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from concurrent.futures import Executor
from typing import Any, Callable

from daemon.reader.audit import audited_filters
from daemon.reader.audit_log import AuditLog, AuditUnwritable, operation
from daemon.reader.citations import cite, rooms_of
from daemon.reader.embedders import Embedders
from daemon.reader.filter_warnings import filter_warnings
from daemon.reader.generations import Generations, IndexLease
from daemon.reader.memory import Tidying
from daemon.reader.protocol import (
    BAD_REQUEST,
    INTERNAL,
    NOT_FOUND,
    PROTOCOL_VERSION,
    UNAVAILABLE,
    ProtocolError,
    RoomsRequest,
    SearchRequest,
    StatusRequest,
    ThreadRequest,
    WindowRequest,
    error_reply,
    ok_reply,
    parse_request,
)
from daemon.reader.room_list import list_rooms
from daemon.reader.search import EmbedderUnavailable, QueryError, execute_search, execute_thread, execute_window


class Requests:
    """The answers of one reader: on ``generations``' current lease, with ``embedders``' embedder
    unless the lease has its own, each request's memory given back through ``tidying``, each
    answer audited through ``audit``, every index and embedder call on ``pool``."""

    def __init__(
        self,
        generations: Generations,
        embedders: Embedders,
        tidying: Tidying,
        audit: AuditLog,
        pool: Executor,
        log: Any,
    ):
        self._generations = generations
        self._embedders = embedders
        self._tidying = tidying
        self._audit = audit
        self._pool = pool
        self._log = log

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
                functools.partial(self._audit.refusal, exc.code, exc.field, started),
            )
        self._generations.check_soon()
        if isinstance(request, StatusRequest):
            status = await self._status()
            return self._audited(
                ok_reply(request.id, status), request.id, functools.partial(self._audit.request, request, started)
            )
        lease = self._generations.acquire()
        if lease is None:
            return self._audited(
                error_reply(request.id, UNAVAILABLE, self._generations.no_index_message()),
                request.id,
                functools.partial(self._audit.request, request, started, error=UNAVAILABLE),
            )
        self._tidying.in_flight += 1
        pages_released: list[bool] = []
        try:
            result, extra = await asyncio.get_running_loop().run_in_executor(
                self._pool,
                functools.partial(
                    self._tidying.run_then_drop,
                    lease,
                    functools.partial(self._execute, lease, request),
                    pages_released,
                ),
            )
        except QueryError as exc:
            code = exc.code or (NOT_FOUND if exc.not_found else BAD_REQUEST)
            return self._audited(
                error_reply(request.id, code, exc.message, exc.field),
                request.id,
                functools.partial(self._audit.request, request, started, error=code, field=exc.field),
            )
        except EmbedderUnavailable:
            return self._audited(
                error_reply(request.id, UNAVAILABLE, "the embedder is not available and no lexical leg could run"),
                request.id,
                functools.partial(self._audit.request, request, started, error=UNAVAILABLE),
            )
        except Exception as exc:  # noqa: BLE001 - one failed request must not end the connection
            with contextlib.suppress(Exception):
                self._log.error("request_failed", op=operation(request), error=type(exc).__name__)
            return self._audited(
                error_reply(request.id, INTERNAL, f"the reader failed: {type(exc).__name__}"),
                request.id,
                functools.partial(self._audit.request, request, started, error=INTERNAL),
            )
        finally:
            self._tidying.in_flight -= 1
            self._tidying.release_after(lease, pages=not pages_released)
        return self._audited(
            ok_reply(request.id, result),
            request.id,
            functools.partial(self._audit.request, request, started, result=result, extra=extra),
        )

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
        """Runs on a worker thread: the reply's result and what only the audit line gets."""
        if isinstance(request, RoomsRequest):
            return list_rooms(lease.index), {}
        if isinstance(request, SearchRequest):
            return self._search(lease, request)
        if isinstance(request, ThreadRequest):
            result = _cited(lease, execute_thread(lease.index, request.query))
        else:
            result = _cited(lease, execute_window(lease.index, request.query))
        returned = [{"chunk_id": chunk_id} for chunk_id in result.get("chunk_ids", [])]
        event_ids = [m.get("event_id") for m in result.get("messages", [])]
        return result, {"returned": returned, "event_ids": event_ids}

    def _search(self, lease: IndexLease, request: SearchRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        found = execute_search(lease.index, lease.embedder or self._embedders.embedder, request.query)
        result = _cited(lease, found.to_json())
        if lease.degraded and request.query.texts:
            result["degraded"] = lease.degraded
        query = request.query
        directory = lease.index.room_directory() if query.rooms is not None else {}
        senders = (m.get("sender") for hit in found.hits for m in hit.get("messages") or ())
        filters = audited_filters(query.filters(), directory, senders, self._audit.key)
        result["warnings"] = filter_warnings(lease.index, query.rooms, query.senders)
        return result, {
            "returned": list(found.attribution),
            "excluded": found.excluded,
            "candidates": found.candidates,
            "filters": filters,
        }

    async def _status(self) -> dict[str, Any]:
        lease = self._generations.acquire()
        meta = None
        if lease is not None:
            try:
                with contextlib.suppress(Exception):
                    meta = await asyncio.get_running_loop().run_in_executor(self._pool, lease.index.read_meta)
            finally:
                self._generations.release(lease)
        return {
            "protocol": PROTOCOL_VERSION,
            "index_ready": lease is not None,
            "generation": lease.generation if lease is not None else None,
            "model": meta.model if meta is not None else None,
            "chat_version": meta.chat_version if meta is not None else None,
            "embedder": self._embedders.state,
            "degraded": lease.degraded if lease is not None else None,
        }


def _cited(lease: IndexLease, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with room names, display names and permalinks (``daemon.reader.citations``)."""
    rooms = rooms_of(result)
    return cite(result, lease.index.room_directory(rooms) if rooms else {})
