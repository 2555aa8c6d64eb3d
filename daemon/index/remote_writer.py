"""The writing side of the index on a Qdrant server: the refresher's ``IndexWriter``.

Owns: ``RemoteIndexWriter``: creating the collection and its payload indexes (``reset``), meta
entries, cursors, window upserts and deletes, ``purge_room``, and the refresher's own reads (meta,
cursors, windows to provide to the fold: ``daemon/index/queries.py`` over the primitives of
``daemon/index/remote.py``), through qdrant-client's REST transport.

Must not: retry a failed write behind the caller's back, let a write pass unacknowledged, or put
the API key in any error text. Nothing on the read side (``daemon.reader.service``,
``daemon.index.remote_reader``) may import this module.

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

Never serve less than the last good collection: the reader reads ``collection`` (the configured
name), which is a Qdrant collection alias; the data lives in ``<name>__v<n>`` collections.
``reset(meta)`` creates the next ``<name>__v<n>`` beside the served one and every write goes
there; ``commit(complete=True)`` moves the alias to it in one ``update_collection_aliases`` request
(Qdrant applies the alias changes of one request atomically) and then drops the old collection.
``commit(complete=False)`` leaves the alias where it was, so the reader keeps the old collection;
the next writer finds the unswitched ``__v<n>`` (the newest one the alias does not name) and
resumes it from its cursors. A collection an older version made under the plain name is served
until the first switch, which must delete it before the alias can take its name (the one
non-atomic step). With nothing served, the first ``reset`` points the alias at once.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ApiException, ResponseHandlingException, UnexpectedResponse

from daemon.index import schema
from daemon.index.port import IndexMeta, IndexWriteError, RoomCursor, WindowPoint
from daemon.index.queries import WriterQueries
from daemon.index.remote import DEFAULT_COLLECTION, RemoteQueries, conditions, remote_sparse, to_filter

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


_VERSION_SEP = "__v"


class RemoteIndexWriter(RemoteQueries, WriterQueries):
    """The refresher's side. Every write waits for the server's acknowledgement."""

    def __init__(
        self,
        client: QdrantClient,
        collection: str = DEFAULT_COLLECTION,
        *,
        shard_number: int | None = None,
        replication_factor: int | None = None,
    ):
        super().__init__(client, collection)
        self._dim: int | None = None  # the collection's, once read_meta() or reset() saw it
        # How a cluster spreads the collection, fixed when reset() creates it (None: the server's
        # default, one shard, one copy). Changing them later needs a new collection: a reset.
        for name, value in (("shard_number", shard_number), ("replication_factor", replication_factor)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        self._shard_number = shard_number
        self._replication_factor = replication_factor
        self.alias = collection
        self.rebuilding = False
        self._served: str | None = None  # the collection the alias (or legacy name) serves
        self._found = False  # no request at construction: _find() runs at the first entry point

    def _find(self, operation: str, room_id: str | None = None) -> None:
        """Which collection to write: an unswitched rebuild if one is pending, else the served
        one. Until this runs, writes go through the alias name, which Qdrant resolves."""
        if self._found:
            return
        with self._fault_is_write_error(f"{operation} (finding the collections)", room_id):
            self._served, pending = self._find_collections()
        if pending is not None:
            self._collection, self.rebuilding = pending, True
        elif self._served is not None:
            self._collection = self._served
        self._found = True

    def _versions(self) -> dict[int, str]:
        prefix = self.alias + _VERSION_SEP
        found: dict[int, str] = {}
        for description in self._client.get_collections().collections:
            tail = description.name[len(prefix) :] if description.name.startswith(prefix) else ""
            if tail.isdigit():
                found[int(tail)] = description.name
        return found

    def _aliased(self) -> str | None:
        for alias in self._client.get_aliases().aliases:
            if alias.alias_name == self.alias:
                return str(alias.collection_name)
        return None

    def _find_collections(self) -> tuple[str | None, str | None]:
        """(served, pending rebuild): the alias's collection (or a legacy one under the plain
        name), and the newest ``__v<n>`` newer than it that the alias does not name."""
        served = self._aliased()
        if served is None and self._client.collection_exists(self.alias):
            served = self.alias
        versions = self._versions()
        served_n = next((n for n, name in versions.items() if name == served), 0)
        newer = [n for n in versions if n > served_n]
        return served, (versions[max(newer)] if newer else None)

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

    _reading = _fault_is_write_error  # the writer's reads fail as IndexWriteError too

    # meta

    def read_meta(self) -> IndexMeta | None:
        self._find("read_meta")
        with self._fault_is_write_error("read_meta"):
            meta = self._index_meta()
        self._dim = meta.dim if meta is not None else None
        return meta

    def reset(self, meta: IndexMeta) -> None:
        schema.require_meta(meta)
        self._dim = None
        self._find("reset")
        with self._fault_is_write_error("reset"):
            # Build beside what is served: the next __v<n>; stale unswitched ones go first.
            versions = self._versions()
            for name in versions.values():
                if name != self._served and not self._client.delete_collection(name):
                    raise IndexWriteError(f"index reset: stale collection {name!r} was not deleted")
            target = f"{self.alias}{_VERSION_SEP}{max(versions, default=0) + 1}"
            created = self._client.create_collection(
                target,
                vectors_config={schema.DENSE: _message_vectors(meta.dim)},
                sparse_vectors_config={schema.SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                shard_number=self._shard_number,
                replication_factor=self._replication_factor,
            )
            if not created:
                raise IndexWriteError(f"index reset: collection {target!r} was not created")
            self._collection = target
            for field, kind in schema.PAYLOAD_INDEXES.items():
                result = self._client.create_payload_index(
                    self._collection, field, field_schema=_PAYLOAD_SCHEMA[kind], wait=True
                )
                self._acknowledged(result, f"reset (payload index {field})")
        self.rebuilding = True
        self._put_meta(schema.META_INDEX, schema.index_meta_value(meta), "reset (index meta)")
        self._dim = meta.dim
        if self._served is None:  # nothing served: nothing to keep, so the reader sees it as it grows
            self._switch()

    def set_meta_entry(self, key: str, value: Any) -> None:
        schema.require_meta_entry(key, value)
        self._put_meta(key, value, f"set_meta_entry {key!r}")

    # windows

    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None:
        """Deletes then upserts, one batch request; deletes only ever touch this room's windows."""
        schema.require_room_id(room_id)
        points = [_remote_point(schema.checked_point(room_id, i, p, self._dim)) for i, p in enumerate(upserts)]
        doomed = schema.checked_deletes(room_id, delete_ids)
        operations: list[Any] = []
        if doomed:
            scope = models.Filter(
                must=[*conditions([schema.IS_WINDOW, schema.in_room(room_id)]), models.HasIdCondition(has_id=[*doomed])]
            )
            operations.append(models.DeleteOperation(delete=models.FilterSelector(filter=scope)))
        if points:
            operations.append(models.UpsertOperation(upsert=models.PointsList(points=points)))
        if not operations:
            return
        with self._fault_is_write_error("write_windows", room_id):
            results = self._client.batch_update_points(self._collection, operations, wait=True)
        self._acknowledged(results, "write_windows", room_id)

    def purge_room(self, room_id: str) -> int:
        """Drops the room's windows, cursor and directory entry (its purge record stays); returns
        windows dropped."""
        schema.require_room_id(room_id)
        windows = models.FilterSelector(filter=to_filter([schema.IS_WINDOW, schema.in_room(room_id)]))
        cursor = models.PointIdsList(points=list[models.ExtendedPointId](schema.room_meta_point_ids(room_id)))
        # The cursor (and directory entry) first (the spec's order): a crash after it re-reads the room from the start.
        operations = [models.DeleteOperation(delete=cursor), models.DeleteOperation(delete=windows)]
        self._find("purge_room", room_id)
        with self._fault_is_write_error("purge_room", room_id):
            if not self._client.collection_exists(self._collection):
                return 0
            dropped = self._count([schema.IS_WINDOW, schema.in_room(room_id)])
            results = self._client.batch_update_points(self._collection, operations, wait=True)
        self._acknowledged(results, "purge_room", room_id)
        return dropped

    def drop_cursor(self, room_id: str) -> None:
        schema.require_room_id(room_id)
        self._find("drop_cursor", room_id)
        cursor = models.PointIdsList(points=[schema.meta_point_id(schema.cursor_key(room_id))])
        with self._fault_is_write_error("drop_cursor", room_id):
            result = self._client.delete(self._collection, cursor, wait=True)
        self._acknowledged(result, "drop_cursor", room_id)

    def prune_room(self, room_id: str, keep_ids: Sequence[str]) -> int:
        """Delete the room's windows whose ids are not in ``keep_ids``; returns how many."""
        schema.require_room_id(room_id)
        keep = schema.checked_deletes(room_id, list(keep_ids))
        self._find("prune_room", room_id)
        flt = to_filter([schema.IS_WINDOW, schema.in_room(room_id)])
        if keep:
            flt.must_not = [models.HasIdCondition(has_id=[*keep])]
        with self._fault_is_write_error("prune_room", room_id):
            doomed = int(self._client.count(self._collection, count_filter=flt, exact=True).count)
            if not doomed:
                return 0
            result = self._client.delete(self._collection, models.FilterSelector(filter=flt), wait=True)
        self._acknowledged(result, "prune_room", room_id)
        return doomed

    def rooms_with_data(self) -> set[str]:
        self._find("rooms_with_data")
        return super().rooms_with_data()

    # cursors

    def set_cursor(self, cursor: RoomCursor) -> None:
        schema.require_cursor(cursor)
        self._put_meta(schema.cursor_key(cursor.room_id), schema.cursor_value(cursor), "set_cursor", cursor.room_id)

    # lifecycle

    def commit(self, *, complete: bool = True, compact: bool = False) -> None:
        """Nothing to flush: the server acknowledged every write (wait=True) before it returned.
        A finished rebuild (``complete``) is switched in by moving the alias; ``compact`` is
        Qdrant's own business on a server (its optimizers vacuum deleted points)."""
        self._find("commit")
        if self.rebuilding and complete:
            self._switch()

    def _switch(self) -> None:
        target, old = self._collection, self._served
        with self._fault_is_write_error("switch"):
            if old == self.alias:  # a legacy collection holds the name the alias needs
                if not self._client.delete_collection(old):
                    raise IndexWriteError(f"index switch: legacy collection {old!r} was not deleted")
                old = None
            changes: list[Any] = []
            if self._aliased() is not None:
                changes.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.alias)))
            changes.append(
                models.CreateAliasOperation(
                    create_alias=models.CreateAlias(collection_name=target, alias_name=self.alias)
                )
            )
            if not self._client.update_collection_aliases(changes):
                raise IndexWriteError(f"index switch: alias {self.alias!r} was not moved to {target!r}")
            self._served, self.rebuilding = target, False
            if old is not None and old != target:
                self._client.delete_collection(old)


def _message_vectors(dim: int) -> models.VectorParams:
    """One row per message, compared by MaxSim: a single query vector scores a window by its best
    message (schema.DENSE). As the embedded index stores them (``edge_writer.SegmentLayout.scan_copy``): 1-bit
    TurboQuant copies in RAM for the scan, the float32 originals on disk, which the server
    rescores its candidates with (``remote_reader``: ``RESCORE_OVERSAMPLING`` x the depth). The
    server's defaults decide HNSW."""
    return models.VectorParams(
        size=dim,
        distance=models.Distance.COSINE,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
        on_disk=True,
        quantization_config=models.TurboQuantization(
            turbo=models.TurboQuantQuantizationConfig(bits=models.TurboQuantBitSize.BITS1, always_ram=True)
        ),
    )


def _remote_point(point: WindowPoint) -> models.PointStruct:
    vector: dict[str, Any] = {}
    if point.dense is not None:
        vector[schema.DENSE] = [list(row) for row in point.dense]
    sparse = remote_sparse(point.sparse)
    if sparse is not None:
        vector[schema.SPARSE] = sparse
    return models.PointStruct(id=point.point_id, vector=vector, payload=point.payload)
