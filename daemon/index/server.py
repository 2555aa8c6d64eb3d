"""The index on a Qdrant server (or cluster), through qdrant-client's REST transport.

Owns: ``connect`` (the client for ``HUGINN_CHAT_QDRANT_URL``), ``ServerIndexWriter`` (the
refresher's ``IndexWriter``) and ``ServerIndexReader`` (the reader's ``IndexReader``): the mapping
of the data model in ``daemon/index/schema.py`` and of ``SearchFilter`` onto ``qdrant_client.models``.

Must not: invent field or vector names (schema.py has them), retry a failed write behind the
caller's back, let a write pass unacknowledged, or put the API key in any error text.

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
  failure to handle; the reader's reads raise qdrant-client's exceptions as they are.
- **Meta points** carry no vectors, ``kind="meta"`` and ``key``/``value``; their ids are
  ``schema.meta_point_id(key)``. Every window query filters ``kind="window"``; every search and
  listing also filters ``n_messages >= 1`` (empty windows are layout records only).
- **Hybrid search** is one ``query_batch_points`` round trip holding three requests: the RRF fusion
  of two prefetch legs (dense, bm25; ``RrfQuery(Rrf(k=RRF_K_QDRANT))``, i.e. 1/(60 + rank) with
  1-based ranks, the spec's k=60), and the same two legs again returning ids only, which say which
  legs matched each fused hit. The eligibility filter sits inside every Prefetch (Qdrant local
  mode ignores a top-level filter on a fusion query; on a server it is correct as well), so filters
  apply before ranking, never after.
- **Ordered reads** (``listing``, ``neighbours``) use ``scroll(order_by=ts_start)`` and then make
  the order exact on ``(ts_start, chunk_id)``: if a page is full, every window sharing the page's
  last ``ts_start`` is fetched (a plain filtered scroll) and the union is sorted in Python. So a
  page boundary inside a run of equal ``ts_start`` neither repeats nor skips a window.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ApiException, ResponseHandlingException, UnexpectedResponse

from daemon.index import schema
from daemon.ports import (
    IndexMeta,
    IndexWriteError,
    RoomCursor,
    ScoredWindow,
    SearchFilter,
    SparseVector,
    WindowPoint,
)

DEFAULT_COLLECTION = "huginn_chat"

# Points fetched per scroll request when a read must see every match.
_SCROLL_PAGE = 256
# Event ids per MatchAny condition, so one request body stays small.
_IDS_PER_QUERY = 512
# Enough distinct rooms for any deployment; facet answers are capped by this.
_MAX_ROOMS = 100_000
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


def connect(url: str, api_key: str | None, *, timeout: float = 10.0) -> QdrantClient:
    """A qdrant-client over REST (httpx) for ``url``; no request is made here."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError("qdrant url must start with http:// or https:// (HUGINN_CHAT_QDRANT_URL)")
    if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
        raise ValueError("qdrant api_key must be a non-empty string or None")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError("qdrant timeout must be a positive number of seconds")
    return QdrantClient(
        url=url,
        api_key=api_key,
        prefer_grpc=False,
        # qdrant-client takes whole seconds; round up so a short timeout never becomes 0.
        timeout=math.ceil(timeout),
        # The version check is a request at construction; the first real call reports faults instead.
        check_compatibility=False,
    )


# --- filters ---------------------------------------------------------------------------------


def _match(key: str, value: Any) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: Sequence[Any]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _range(key: str, **bounds: int) -> models.FieldCondition:
    return models.FieldCondition(key=key, range=models.Range(**bounds))


_IS_WINDOW = _match(schema.KIND, schema.KIND_WINDOW)
_HAS_MESSAGES = _range(schema.N_MESSAGES, gte=1)


def _windows(*conditions: models.Condition, should: Sequence[models.Condition] = ()) -> models.Filter:
    return models.Filter(must=[_IS_WINDOW, *conditions], should=list(should) or None)


def _eligible(flt: SearchFilter) -> list[models.Condition] | None:
    """The conditions a searchable window must meet, or None when ``flt`` matches nothing."""
    if not isinstance(flt, SearchFilter):
        raise TypeError("flt must be a daemon.ports.SearchFilter")
    for field in ("room_ids", "senders"):
        if isinstance(getattr(flt, field), str):
            raise TypeError(f"SearchFilter.{field} must be a tuple of strings, not a single string")
    if flt.room_ids is not None and len(flt.room_ids) == 0:
        return None  # an unknown room resolves to nothing, never to everything
    conditions: list[models.Condition] = [_IS_WINDOW, _HAS_MESSAGES]
    if flt.room_ids:
        conditions.append(_match_any(schema.ROOM_ID, flt.room_ids))
    if flt.senders:  # senders=() is "no constraint", as ports.SearchFilter says; only room_ids=() is empty
        conditions.append(_match_any(schema.SENDERS, flt.senders))
    if flt.after_ms is not None:
        conditions.append(_range(schema.TS_END, gte=int(flt.after_ms)))
    if flt.before_ms is not None:
        conditions.append(_range(schema.TS_START, lte=int(flt.before_ms)))
    return conditions


def _sparse(vector: SparseVector | None) -> models.SparseVector | None:
    if vector is None or not vector.indices:
        return None
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _require_limit(limit: int, name: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {limit!r}")
    return limit


def _require_uuid(value: Any, field: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"{field} must be a UUID string, got {value!r}") from None


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _order_key(record: Any) -> tuple[int, str]:
    payload = record.payload or {}
    return (int(payload.get(schema.TS_START, 0)), str(payload.get(schema.CHUNK_ID, record.id)))


def _describe_fault(exc: BaseException) -> str:
    """What went wrong, without request headers (where the api key travels)."""
    if isinstance(exc, UnexpectedResponse):
        content = (exc.content or b"")[:_QUOTE_BYTES].decode("utf-8", "replace")
        return f"HTTP {exc.status_code} {exc.reason_phrase}: {content}".strip()
    if isinstance(exc, ResponseHandlingException):
        exc = exc.source
    text = str(exc)[:_QUOTE_BYTES]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- shared reads ----------------------------------------------------------------------------


class _Collection:
    """Reads both sides need. Raises qdrant-client's exceptions; the writer wraps them."""

    def __init__(self, client: QdrantClient, collection: str):
        if not isinstance(collection, str) or not collection:
            raise ValueError("collection must be a non-empty string")
        self._client = client
        self._collection = collection

    def _scroll_all(self, flt: models.Filter, with_payload: Any = True) -> list[Any]:
        records: list[Any] = []
        offset = None
        while True:
            page, offset = self._client.scroll(
                self._collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=with_payload
            )
            records.extend(page)
            if offset is None:
                return records

    def _ordered(
        self, conditions: list[models.Condition], bound: models.Range | None, descending: bool, limit: int
    ) -> list[Any]:
        """Up to ``limit`` windows in ``bound`` (on ts_start), exactly ordered by (ts_start, chunk_id)."""
        if limit <= 0:
            return []
        direction = models.Direction.DESC if descending else models.Direction.ASC
        ranged = list(conditions)
        if bound is not None:
            ranged.append(models.FieldCondition(key=schema.TS_START, range=bound))
        page, _ = self._client.scroll(
            self._collection,
            scroll_filter=models.Filter(must=ranged),
            limit=limit,
            order_by=models.OrderBy(key=schema.TS_START, direction=direction),
            with_payload=True,
        )
        if len(page) >= limit:
            # The last ts_start of a full page may continue beyond it: fetch that whole run.
            edge_ts = int(page[-1].payload[schema.TS_START])
            page = [r for r in page if int(r.payload[schema.TS_START]) != edge_ts]
            page += self._scroll_all(models.Filter(must=[*conditions, _match(schema.TS_START, edge_ts)]))
        page.sort(key=_order_key, reverse=descending)
        return page[:limit]

    def _meta_value(self, key: str) -> Any | None:
        if not self._client.collection_exists(self._collection):
            return None
        found = self._client.retrieve(self._collection, [schema.meta_point_id(key)], with_payload=True)
        for record in found:
            payload = record.payload or {}
            if payload.get(schema.KIND) == schema.KIND_META and payload.get(schema.META_KEY) == key:
                return payload.get(schema.META_VALUE)
        return None

    def _index_meta(self) -> IndexMeta | None:
        value = self._meta_value(schema.META_INDEX)
        if not isinstance(value, dict):
            return None
        try:
            return IndexMeta(**{name: value[name] for name in _field_names(IndexMeta) if name in value})
        except TypeError:
            return None  # an unreadable meta is no meta: the refresher rebuilds

    def _room_ids(self) -> list[str]:
        answer = self._client.facet(
            self._collection, schema.ROOM_ID, facet_filter=_windows(), limit=_MAX_ROOMS, exact=True
        )
        return [str(hit.value) for hit in answer.hits]


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

    def _meta_point(self, key: str, value: Any, **extra: Any) -> models.PointStruct:
        payload = {schema.KIND: schema.KIND_META, schema.META_KEY: key, schema.META_VALUE: value, **extra}
        return models.PointStruct(id=schema.meta_point_id(key), vector={}, payload=payload)

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
        value = dataclasses.asdict(meta)
        self._put_meta(schema.META_INDEX, value, "reset (index meta)")

    def get_meta_entry(self, key: str) -> Any | None:
        self._require_key(key)
        with self._fault_is_write_error(f"get_meta_entry {key!r}"):
            return self._meta_value(key)

    def set_meta_entry(self, key: str, value: Any) -> None:
        self._require_key(key)
        self._put_meta(key, value, f"set_meta_entry {key!r}")

    @staticmethod
    def _require_key(key: str) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"meta key must be a non-empty string, got {key!r}")

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
        payload = dict(point.payload)
        if payload.get(schema.ROOM_ID) != room_id:
            raise ValueError(f"upserts[{i}].payload.room_id is {payload.get(schema.ROOM_ID)!r}, expected {room_id!r}")
        if payload.setdefault(schema.KIND, schema.KIND_WINDOW) != schema.KIND_WINDOW:
            raise ValueError(f"upserts[{i}].payload.kind must be {schema.KIND_WINDOW!r}")
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
            rooms = set(self._room_ids())
            metas = self._scroll_all(
                models.Filter(must=[_match(schema.KIND, schema.KIND_META)]), with_payload=[schema.META_KEY]
            )
        prefix = schema.cursor_key("")
        for record in metas:
            key = str((record.payload or {}).get(schema.META_KEY, ""))
            if key.startswith(prefix) and len(key) > len(prefix):
                rooms.add(key[len(prefix) :])
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


def _require_room(room_id: str) -> None:
    if not isinstance(room_id, str) or not room_id:
        raise ValueError(f"room_id must be a non-empty string, got {room_id!r}")


# --- reader ----------------------------------------------------------------------------------


class ServerIndexReader(_Collection):
    """The reader's side: queries only. Give it a client on a read-only API key."""

    def __init__(self, client: QdrantClient, collection: str = DEFAULT_COLLECTION):
        super().__init__(client, collection)

    def read_meta(self) -> IndexMeta | None:
        return self._index_meta()

    def hybrid(self, dense: Sequence[float], sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        """RRF (k=60 on 1-based ranks) of a dense and a BM25 leg, both filtered before ranking."""
        conditions = _eligible(flt)
        if conditions is None or _require_limit(limit) == 0:
            return []
        leg_filter = models.Filter(must=conditions)
        depth = max(limit * 4, 50)
        dense_query = [float(x) for x in dense]
        legs: list[tuple[str, models.Prefetch]] = [
            ("dense", models.Prefetch(query=dense_query, using=schema.DENSE, filter=leg_filter, limit=depth))
        ]
        sparse_query = _sparse(sparse)
        if sparse_query is not None:  # a query with no known terms has no lexical leg
            legs.append(
                ("lexical", models.Prefetch(query=sparse_query, using=schema.SPARSE, filter=leg_filter, limit=depth))
            )
        fused = models.QueryRequest(
            prefetch=[prefetch for _, prefetch in legs],
            query=models.RrfQuery(rrf=models.Rrf(k=schema.RRF_K_QDRANT)),
            limit=limit,
            with_payload=True,
        )
        # The same legs again, ids only, to say which leg found each hit (same filter, same depth).
        leg_lists = [
            models.QueryRequest(query=p.query, using=p.using, filter=leg_filter, limit=depth, with_payload=False)
            for _, p in legs
        ]
        answers = self._client.query_batch_points(self._collection, [fused, *leg_lists])
        matched = [(name, {str(point.id) for point in answer.points}) for (name, _), answer in zip(legs, answers[1:])]
        lexical_rank = {
            str(point.id): rank
            for (name, _), answer in zip(legs, answers[1:]) if name == "lexical"
            for rank, point in enumerate(answer.points, start=1)
        }
        fused = sorted(
            answers[0].points,
            key=lambda point: schema.fused_order(float(point.score), lexical_rank.get(str(point.id)), str(point.id)),
        )
        return [
            ScoredWindow(
                point_id=str(point.id),
                score=float(point.score),
                payload=point.payload or {},
                legs=tuple(name for name, ids in matched if str(point.id) in ids),
            )
            for point in fused
        ]

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        """BM25 alone (scores as the server gives them), filtered before ranking."""
        conditions = _eligible(flt)
        sparse_query = _sparse(sparse)
        if conditions is None or sparse_query is None or _require_limit(limit) == 0:
            return []
        answer = self._client.query_points(
            self._collection,
            query=sparse_query,
            using=schema.SPARSE,
            query_filter=models.Filter(must=conditions),
            limit=limit,
            with_payload=True,
        )
        return [
            ScoredWindow(point_id=str(p.id), score=float(p.score), payload=p.payload or {}, legs=("lexical",))
            for p in answer.points
        ]

    def listing(self, flt: SearchFilter, after: tuple[int, str] | None, limit: int) -> list[dict[str, Any]]:
        """Eligible windows oldest first, ordered by (ts_start, chunk_id), strictly after ``after``."""
        conditions = _eligible(flt)
        if conditions is None or _require_limit(limit) == 0:
            return []
        if after is None:
            return [r.payload for r in self._ordered(conditions, None, False, limit)]
        try:
            after_ts, after_chunk = int(after[0]), str(after[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"after must be a (ts_start, chunk_id) pair, got {after!r}") from None
        same_ts = self._scroll_all(models.Filter(must=[*conditions, _match(schema.TS_START, after_ts)]))
        rows = sorted((r for r in same_ts if _order_key(r)[1] > after_chunk), key=_order_key)[:limit]
        rows += self._ordered(conditions, models.Range(gt=after_ts), False, limit - len(rows))
        return [r.payload for r in rows]

    def window_of_event(self, event_id: str) -> dict[str, Any] | None:
        """The window holding ``event_id`` as a live message (a redacted id has none)."""
        if not isinstance(event_id, str) or not event_id:
            raise ValueError(f"event_id must be a non-empty string, got {event_id!r}")
        page, _ = self._client.scroll(
            self._collection,
            scroll_filter=_windows(_match_any(schema.EVENT_IDS, [event_id])),
            limit=1,
            with_payload=True,
        )
        return page[0].payload if page else None

    def neighbours(self, room_id: str, ts: int, before: int, after: int) -> list[dict[str, Any]]:
        """Up to ``before`` windows of the room starting strictly before ``ts`` and up to ``after``
        starting strictly after it, oldest first. Empty windows are skipped, so each returned window
        holds at least one message: N windows always cover N messages on that side."""
        _require_room(room_id)
        conditions: list[models.Condition] = [_IS_WINDOW, _HAS_MESSAGES, _match(schema.ROOM_ID, room_id)]
        earlier = self._ordered(conditions, models.Range(lt=int(ts)), True, _require_limit(before, "before"))
        later = self._ordered(conditions, models.Range(gt=int(ts)), False, _require_limit(after, "after"))
        return [r.payload for r in reversed(earlier)] + [r.payload for r in later]

    def window_counts(self) -> dict[str, int]:
        """{room_id: windows stored} (empty layout windows included), exact."""
        if not self._client.collection_exists(self._collection):
            return {}
        answer = self._client.facet(self._collection, schema.ROOM_ID, facet_filter=models.Filter(must=[_match(schema.KIND, schema.KIND_WINDOW)]),
                                    limit=100_000, exact=True)
        return {str(hit.value): int(hit.count) for hit in answer.hits}

    def cursors(self) -> dict[str, RoomCursor]:
        """Every room cursor in the collection."""
        if not self._client.collection_exists(self._collection):
            return {}
        return schema.cursors_from_meta(record.payload for record in self._scroll_all(models.Filter(must=[_match(schema.KIND, schema.KIND_META)])))

    def room_aliases(self) -> dict[str, str]:
        """room_id -> its alias as its newest window records it; rooms without an alias are left out."""
        if not self._client.collection_exists(self._collection):
            return {}
        rooms = self._room_ids()
        if not rooms:
            return {}
        newest_first = models.OrderByQuery(
            order_by=models.OrderBy(key=schema.TS_START, direction=models.Direction.DESC)
        )
        requests = [
            models.QueryRequest(
                query=newest_first,
                filter=_windows(_match(schema.ROOM_ID, room)),
                limit=1,
                with_payload=[schema.ROOM_ID, schema.ROOM_ALIAS],
            )
            for room in rooms
        ]
        aliases: dict[str, str] = {}
        for room, answer in zip(rooms, self._client.query_batch_points(self._collection, requests)):
            alias = (answer.points[0].payload or {}).get(schema.ROOM_ALIAS) if answer.points else None
            if isinstance(alias, str) and alias:
                aliases[room] = alias
        return aliases

    def close(self) -> None:
        self._client.close()
