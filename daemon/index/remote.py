"""What both sides of the index on a Qdrant server share: the client, conditions and primitives.

Owns: ``connect`` (the client for ``HUGINN_CHAT_QDRANT_URL``), ``DEFAULT_COLLECTION``, the
mapping of plain ``schema.Condition`` values onto ``qdrant_client.models`` (``conditions``), and
``RemoteQueries``, the primitives of ``daemon.index.queries.IndexQueries`` over one collection:
the base of ``RemoteIndexWriter`` (``daemon/index/remote_writer.py``) and ``RemoteIndexReader``
(``daemon/index/remote_reader.py``).

Must not: write to the collection (no upsert, delete or collection change), invent field or
vector names (schema.py has them), or put the API key in any error text. It must not import
``daemon.index.remote_writer`` or ``daemon.index.remote_reader``: both import it.

Theory of operation:

- **Meta points** carry no vectors, ``kind="meta"`` and ``key``/``value``; their ids are
  ``schema.meta_point_id(key)``. Every window query filters ``kind="window"``; every search and
  listing also filters ``n_messages >= 1`` (empty windows are layout records only).
- **Ordered reads** (``listing``, ``neighbours``) are ``scroll(order_by=ts_start)`` pages made
  exact on ``(ts_start, chunk_id)`` by ``IndexQueries._ordered``.
- The reads here raise qdrant-client's exceptions as they are; the writer turns them into
  ``IndexWriteError``, the reader passes them on.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from qdrant_client import QdrantClient, models

from daemon.index import schema
from daemon.index.port import SparseVector
from daemon.index.queries import IndexQueries

DEFAULT_COLLECTION = "huginn_chat"

# Points fetched per scroll request when a read must see every match.
_SCROLL_PAGE = 256
# Enough distinct rooms for any deployment; facet answers are capped by this.
_MAX_ROOMS = 100_000


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


# --- conditions and the primitives of IndexQueries --------------------------------------------


def conditions(plain: Iterable[schema.Condition]) -> list[models.Condition]:
    """Plain ``schema.Condition`` values as qdrant-client field conditions."""
    out: list[models.Condition] = []
    for kind, key, argument in plain:
        if kind == "any":
            out.append(models.FieldCondition(key=key, match=models.MatchAny(any=list(argument))))
        elif kind == "range":
            out.append(models.FieldCondition(key=key, range=models.Range(**argument)))
        else:
            out.append(models.FieldCondition(key=key, match=models.MatchValue(value=argument)))
    return out


def to_filter(must: Iterable[schema.Condition], should: Iterable[schema.Condition] | None = None) -> models.Filter:
    return models.Filter(must=conditions(must), should=conditions(should) if should else None)


def remote_sparse(vector: SparseVector | None) -> models.SparseVector | None:
    if vector is None:
        return None
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


class RemoteQueries(IndexQueries):
    """``IndexQueries``' primitives over one collection. Raises qdrant-client's exceptions; the
    writer turns them into ``IndexWriteError``."""

    def __init__(self, client: QdrantClient, collection: str):
        if not isinstance(collection, str) or not collection:
            raise ValueError("collection must be a non-empty string")
        self._client = client
        self._collection = collection

    def _present(self) -> bool:
        """The collection exists, as a collection or as an alias of one (the writer switches a
        rebuilt collection in by moving the alias the reader reads; see remote_writer)."""
        if self._client.collection_exists(self._collection):
            return True
        return any(a.alias_name == self._collection for a in self._client.get_aliases().aliases)

    def _scroll(self, must: list[schema.Condition], should: list[schema.Condition] | None = None) -> list[Any]:
        flt = to_filter(must, should)
        records: list[Any] = []
        offset = None
        while True:
            page, offset = self._client.scroll(
                self._collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=True
            )
            records.extend(page)
            if offset is None:
                return records

    def _scroll_fields(self, must: list[schema.Condition], fields: Sequence[str]) -> list[Any]:
        flt = to_filter(must)
        records: list[Any] = []
        offset = None
        while True:
            page, offset = self._client.scroll(
                self._collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=list(fields)
            )
            records.extend(page)
            if offset is None:
                return records

    def _scroll_by_ts(
        self, must: list[schema.Condition], descending: bool, limit: int, field: str = schema.TS_START
    ) -> list[Any]:
        direction = models.Direction.DESC if descending else models.Direction.ASC
        page, _ = self._client.scroll(
            self._collection,
            scroll_filter=to_filter(must),
            limit=limit,
            order_by=models.OrderBy(key=field, direction=direction),
            with_payload=True,
        )
        return page

    def _count(self, must: list[schema.Condition]) -> int:
        return int(self._client.count(self._collection, count_filter=to_filter(must), exact=True).count)

    def _room_counts(self) -> dict[str, int]:
        answer = self._client.facet(
            self._collection, schema.ROOM_ID, facet_filter=to_filter([schema.IS_WINDOW]), limit=_MAX_ROOMS, exact=True
        )
        return {str(hit.value): int(hit.count) for hit in answer.hits}

    def _retrieve(self, ids: Sequence[str]) -> list[Any]:
        return self._client.retrieve(self._collection, list(ids), with_payload=True)

    def _retrieve_dense(self, ids: Sequence[str]) -> list[tuple[Any, dict[str, Any] | None, Any]]:
        records = self._client.retrieve(self._collection, list(ids), with_payload=True, with_vectors=[schema.DENSE])
        return [(r.id, r.payload, r.vector.get(schema.DENSE) if isinstance(r.vector, dict) else None) for r in records]

    def _newest_each(self, rooms: Sequence[str]) -> list[Any | None]:
        """One round trip for every room (the alias map would otherwise cost a request per room)."""
        if not rooms:
            return []
        newest_first = models.OrderByQuery(
            order_by=models.OrderBy(key=schema.TS_START, direction=models.Direction.DESC)
        )
        requests = [
            models.QueryRequest(
                query=newest_first,
                filter=to_filter([schema.IS_WINDOW, schema.in_room(room)]),
                limit=1,
                with_payload=[schema.ROOM_ID, schema.ROOM_ALIAS],
            )
            for room in rooms
        ]
        answers = self._client.query_batch_points(self._collection, requests)
        return [answer.points[0] if answer.points else None for answer in answers]

    def close(self) -> None:
        self._client.close()
