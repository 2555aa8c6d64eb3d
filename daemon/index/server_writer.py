"""The writing side of the index on a Qdrant server: the refresher's ``IndexWriter``.

Owns: ``ServerIndexWriter``: creating the collection and its payload indexes (``reset``), meta
entries, cursors, window upserts and deletes, ``purge_room``, and the refresher's own reads (meta,
cursors, windows to provide to the fold), through qdrant-client's REST transport. The client,
filters and shared reads live in ``daemon/index/server_shared.py``.

Must not: retry a failed write behind the caller's back, let a write pass unacknowledged, or put
the API key in any error text. Nothing on the read side (``daemon.reader.service``,
``daemon.index.server_reader``) may import this module.

Theory of operation:

- **Acknowledged writes.** Every write is sent with ``wait=True`` and must come back ``completed``.
  Any transport fault (HTTP error status, timeout, refused connection) or any other status raises
  ``IndexWriteError`` naming the operation and room, so the refresher never advances a cursor past
  an unacknowledged write. There is no retry: the next refresher run is the retry, and a replay is
  harmless because the fold is idempotent. The messages carry the exception type, the HTTP status
  and at most 200 bytes of the server's answer; qdrant-client and httpx keep request headers (where
  the ``api-key`` travels) out of their exception text, and the tests hold that.
  ``commit()`` is a no-op: each write was already acknowledged. The writer's own reads (cursor,
  windows to provide to the fold) fail with ``IndexWriteError`` too, so the refresher has one
  failure to handle.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ApiException, ResponseHandlingException, UnexpectedResponse

from daemon.index import schema
from daemon.index.server_shared import (
    DEFAULT_COLLECTION,
    _Collection,
    _match,
    _match_any,
    _order_key,
    _range,
    _require_room,
    _sparse,
    _windows,
)
from daemon.ports import IndexMeta, IndexWriteError, RoomCursor, WindowPoint

# Event ids per MatchAny condition, so one request body stays small.
_IDS_PER_QUERY = 512
# How much of the server's answer an error message quotes.
_QUOTE_BYTES = 200

# What a transport or server fault looks like through qdrant-client: HTTP status errors
# (UnexpectedResponse), wrapped httpx errors (ResponseHandlingException), 429s
# (QdrantException), and, in local mode, ValueError for a missing collection.
_INDEX_FAULTS = (ApiException, QdrantException, httpx.HTTPError, OSError, ValueError)

_PAYLOAD_SCHEMA = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
}


def _require_uuid(value: Any, field: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"{field} must be a UUID string, got {value!r}") from None


def _describe_fault(exc: BaseException) -> str:
    """What went wrong, without request headers (where the api key travels)."""
    if isinstance(exc, UnexpectedResponse):
        content = (exc.content or b"")[:_QUOTE_BYTES].decode("utf-8", "replace")
        return f"HTTP {exc.status_code} {exc.reason_phrase}: {content}".strip()
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    text = str(exc)[:_QUOTE_BYTES]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- writer ----------------------------------------------------------------------------------


class ServerIndexWriter(_Collection):
    """The refresher's side. Every write waits for the server's acknowledgement."""

    def __init__(self, client: QdrantClient, collection: str = DEFAULT_COLLECTION):
        super().__init__(client, collection)

    @contextmanager
    def _fault_is_write_error(self, operation: str, room_id: str | None = None) -> Iterator[None]:
        try:
            yield
        except _INDEX_FAULTS as exc:
            where = f" for room {room_id}" if room_id else ""
            raise IndexWriteError(
                f"index {operation}{where} on collection {self._collection!r} failed: {_describe_fault(exc)}"
            ) from exc

    def _acknowledged(self, results: Any, operation: str, room_id: str | None = None) -> None:
        for result in results if isinstance(results, list) else [results]:
            status = getattr(result, "status", None)
            if status != models.UpdateStatus.COMPLETED:
                where = f" for room {room_id}" if room_id else ""
                raise IndexWriteError(
                    f"index {operation}{where} on collection {self._collection!r} not acknowledged: status {status}"
                )

    def _meta_point(self, key: str, value: Any) -> models.PointStruct:
        return models.PointStruct(id=schema.meta_point_id(key), vector={}, payload=schema.meta_payload(key, value))

    def _put_meta(self, key: str, value: Any, operation: str, room_id: str | None = None) -> None:
        with self._fault_is_write_error(operation, room_id):
            result = self._client.upsert(self._collection, [self._meta_point(key, value)], wait=True)
        self._acknowledged(result, operation, room_id)

    # meta

    def read_meta(self) -> IndexMeta | None:
        with self._fault_is_write_error("read_meta"):
            return self._index_meta()

    def reset(self, meta: IndexMeta) -> None:
        if not isinstance(meta, IndexMeta):
            raise TypeError("meta must be a daemon.ports.IndexMeta")
        if isinstance(meta.dim, bool) or not isinstance(meta.dim, int) or meta.dim < 1:
            raise ValueError(f"meta.dim must be a positive integer, got {meta.dim!r}")
        with self._fault_is_write_error("reset"):
            if self._client.collection_exists(self._collection):
                if not self._client.delete_collection(self._collection):
                    raise IndexWriteError(f"index reset: collection {self._collection!r} was not deleted")
            created = self._client.create_collection(
                self._collection,
                vectors_config={schema.DENSE: models.VectorParams(size=meta.dim, distance=models.Distance.COSINE)},
                sparse_vectors_config={schema.SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            if not created:
                raise IndexWriteError(f"index reset: collection {self._collection!r} was not created")
            for field, kind in schema.PAYLOAD_INDEXES.items():
                result = self._client.create_payload_index(
                    self._collection, field, field_schema=_PAYLOAD_SCHEMA[kind], wait=True
                )
                self._acknowledged(result, f"reset (payload index {field})")
        self._put_meta(schema.META_INDEX, schema.index_meta_value(meta), "reset (index meta)")

    def get_meta_entry(self, key: str) -> Any | None:
        schema.require_meta_key(key)
        with self._fault_is_write_error(f"get_meta_entry {key!r}"):
            return self._meta_value(key)

    def set_meta_entry(self, key: str, value: Any) -> None:
        schema.require_meta_entry(key, value)
        self._put_meta(key, value, f"set_meta_entry {key!r}")

    # windows

    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None:
        """Deletes then upserts, one batch request; deletes only ever touch this room's windows."""
        _require_room(room_id)
        points = [self._window_point(room_id, i, point) for i, point in enumerate(upserts)]
        doomed = [_require_uuid(pid, f"delete_ids[{i}]") for i, pid in enumerate(delete_ids)]
        operations: list[Any] = []
        if doomed:
            selector = models.FilterSelector(
                filter=_windows(_match(schema.ROOM_ID, room_id), models.HasIdCondition(has_id=doomed))
            )
            operations.append(models.DeleteOperation(delete=selector))
        if points:
            operations.append(models.UpsertOperation(upsert=models.PointsList(points=points)))
        if not operations:
            return
        with self._fault_is_write_error("write_windows", room_id):
            results = self._client.batch_update_points(self._collection, operations, wait=True)
        self._acknowledged(results, "write_windows", room_id)

    @staticmethod
    def _window_point(room_id: str, i: int, point: WindowPoint) -> models.PointStruct:
        if not isinstance(point, WindowPoint):
            raise TypeError(f"upserts[{i}] must be a daemon.ports.WindowPoint")
        point_id = _require_uuid(point.point_id, f"upserts[{i}].point_id")
        payload = schema.window_payload_to_write(room_id, point.payload, f"upserts[{i}].")
        vector: dict[str, Any] = {}
        if point.dense is not None:
            vector[schema.DENSE] = [float(x) for x in point.dense]
        sparse = _sparse(point.sparse)
        if sparse is not None:
            vector[schema.SPARSE] = sparse
        return models.PointStruct(id=point_id, vector=vector, payload=payload)

    def get_windows(self, point_ids: Sequence[str]) -> list[dict[str, Any]]:
        ids = [_require_uuid(pid, f"point_ids[{i}]") for i, pid in enumerate(point_ids)]
        if not ids:
            return []
        with self._fault_is_write_error("get_windows"):
            records = self._client.retrieve(self._collection, ids, with_payload=True)
        by_id = {str(r.id): r.payload for r in records if (r.payload or {}).get(schema.KIND) == schema.KIND_WINDOW}
        return [by_id[pid] for pid in dict.fromkeys(ids) if pid in by_id]

    def windows_with_events(self, room_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The room's windows holding, or recording the redaction of, any of ``event_ids``."""
        _require_room(room_id)
        wanted = list(dict.fromkeys(event_ids))
        found: dict[str, dict[str, Any]] = {}
        with self._fault_is_write_error("windows_with_events", room_id):
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                flt = _windows(
                    _match(schema.ROOM_ID, room_id),
                    should=[_match_any(schema.EVENT_IDS, chunk), _match_any(schema.REDACTED_IDS, chunk)],
                )
                for record in self._scroll_all(flt):
                    found[str(record.id)] = record.payload
        return list(found.values())

    def windows_in_span(self, room_id: str, ts_from: int, ts_to: int) -> list[dict[str, Any]]:
        """The room's windows overlapping [ts_from, ts_to] (inclusive, ms)."""
        _require_room(room_id)
        if ts_from > ts_to:
            raise ValueError(f"ts_from ({ts_from}) must not be after ts_to ({ts_to})")
        flt = _windows(
            _match(schema.ROOM_ID, room_id),
            _range(schema.TS_START, lte=int(ts_to)),
            _range(schema.TS_END, gte=int(ts_from)),
        )
        with self._fault_is_write_error("windows_in_span", room_id):
            records = self._scroll_all(flt)
        return [r.payload for r in sorted(records, key=_order_key)]

    def count_windows(self, room_id: str | None = None) -> int:
        """Window points (empty layout records included), in one room or in all."""
        with self._fault_is_write_error("count_windows", room_id):
            return self._count_windows(room_id)

    def _count_windows(self, room_id: str | None) -> int:
        if not self._client.collection_exists(self._collection):
            return 0
        flt = _windows(_match(schema.ROOM_ID, room_id)) if room_id is not None else _windows()
        return int(self._client.count(self._collection, count_filter=flt, exact=True).count)

    def rooms_with_data(self) -> set[str]:
        """Rooms holding a window or a cursor: everything ``purge_room`` would drop."""
        with self._fault_is_write_error("rooms_with_data"):
            if not self._client.collection_exists(self._collection):
                return set()
            rooms = set(self._room_window_counts())
            metas = self._meta_payloads(with_payload=[schema.META_KEY])
        for payload in metas:
            room_id = schema.room_of_cursor_key(payload.get(schema.META_KEY))
            if room_id is not None:
                rooms.add(room_id)
        return rooms

    def purge_room(self, room_id: str) -> int:
        """Drops the room's windows and cursor (its purge record stays); returns windows dropped."""
        _require_room(room_id)
        windows = models.FilterSelector(filter=_windows(_match(schema.ROOM_ID, room_id)))
        cursor = models.PointIdsList(points=[schema.meta_point_id(schema.cursor_key(room_id))])
        operations = [models.DeleteOperation(delete=windows), models.DeleteOperation(delete=cursor)]
        with self._fault_is_write_error("purge_room", room_id):
            if not self._client.collection_exists(self._collection):
                return 0
            dropped = self._count_windows(room_id)
            results = self._client.batch_update_points(self._collection, operations, wait=True)
        self._acknowledged(results, "purge_room", room_id)
        return dropped

    # cursors

    def get_cursor(self, room_id: str) -> RoomCursor | None:
        _require_room(room_id)
        with self._fault_is_write_error("get_cursor", room_id):
            value = self._meta_value(schema.cursor_key(room_id))
        return schema.cursor_from_value(value, room_id)

    def set_cursor(self, cursor: RoomCursor) -> None:
        if not isinstance(cursor, RoomCursor):
            raise TypeError("cursor must be a daemon.ports.RoomCursor")
        _require_room(cursor.room_id)
        self._put_meta(schema.cursor_key(cursor.room_id), schema.cursor_value(cursor), "set_cursor", cursor.room_id)

    # lifecycle

    def commit(self) -> None:
        """Nothing to flush: the server acknowledged every write (wait=True) before it returned."""

    def close(self) -> None:
        self._client.close()
