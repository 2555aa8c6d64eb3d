"""What both sides of the index on a Qdrant server share: the client, filters and plain reads.

Owns: ``connect`` (the client for ``HUGINN_CHAT_QDRANT_URL``), ``DEFAULT_COLLECTION``, the
mapping of ``schema.eligibility`` and of the data model in ``daemon/index/schema.py`` onto
``qdrant_client.models`` filters (``_match``, ``_windows``, ``_eligible`` ...), and ``_Collection``,
the base of ``ServerIndexWriter`` (``daemon/index/server_writer.py``) and ``ServerIndexReader``
(``daemon/index/server_reader.py``) holding the reads both need.

Must not: write to the collection (no upsert, delete or collection change), invent field or
vector names (schema.py has them), or put the API key in any error text. It must not import
``daemon.index.server_writer`` or ``daemon.index.server_reader``: both import it.

Theory of operation:

- **Meta points** carry no vectors, ``kind="meta"`` and ``key``/``value``; their ids are
  ``schema.meta_point_id(key)``. Every window query filters ``kind="window"``; every search and
  listing also filters ``n_messages >= 1`` (empty windows are layout records only).
- **Ordered reads** (``_Collection._ordered``, behind the reader's ``listing`` and ``neighbours``)
  use ``scroll(order_by=ts_start)`` and then make the order exact on ``(ts_start, chunk_id)``: if a
  page is full, every window sharing the page's last ``ts_start`` is fetched (a plain filtered
  scroll) and the union is sorted in Python. So a page boundary inside a run of equal
  ``ts_start`` neither repeats nor skips a window.
- The reads here raise qdrant-client's exceptions as they are; the writer turns them into
  ``IndexWriteError``, the reader passes them on.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from qdrant_client import QdrantClient
from qdrant_client import models

from daemon.index import schema
from daemon.ports import IndexMeta, SearchFilter, SparseVector

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


# --- filters ---------------------------------------------------------------------------------


def _match(key: str, value: Any) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: Sequence[Any]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _range(key: str, **bounds: int) -> models.FieldCondition:
    return models.FieldCondition(key=key, range=models.Range(**bounds))


_IS_WINDOW = _match(schema.KIND, schema.KIND_WINDOW)
_IS_META = _match(schema.KIND, schema.KIND_META)
_HAS_MESSAGES = _range(schema.N_MESSAGES, gte=1)


def _windows(*conditions: models.Condition, should: Sequence[models.Condition] = ()) -> models.Filter:
    return models.Filter(must=[_IS_WINDOW, *conditions], should=list(should) or None)


def _eligible(flt: SearchFilter) -> list[models.Condition] | None:
    """``schema.eligibility`` as qdrant-client conditions, or None when ``flt`` matches nothing."""
    conditions = schema.eligibility(flt)
    if conditions is None:
        return None
    return [_condition(*condition) for condition in conditions]


def _condition(kind: str, key: str, argument: Any) -> models.FieldCondition:
    if kind == "any":
        return _match_any(key, argument)
    if kind == "range":
        return _range(key, **argument)
    return _match(key, argument)


def _sparse(vector: SparseVector | None) -> models.SparseVector | None:
    if vector is None or not vector.indices:
        return None
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _require_room(room_id: str) -> None:
    if not isinstance(room_id, str) or not room_id:
        raise ValueError(f"room_id must be a non-empty string, got {room_id!r}")


def _order_key(record: Any) -> tuple[int, str]:
    return schema.listing_key(record.payload, record.id)


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
        return schema.meta_value_of((record.payload for record in found), key)

    def _index_meta(self) -> IndexMeta | None:
        # An unreadable meta is no meta: the refresher rebuilds.
        return schema.index_meta_from_value(self._meta_value(schema.META_INDEX))

    def _meta_payloads(self, with_payload: Any = True) -> list[dict[str, Any]]:
        """The payloads of every meta point (``with_payload`` may name the fields wanted)."""
        records = self._scroll_all(models.Filter(must=[_IS_META]), with_payload=with_payload)
        return [record.payload or {} for record in records]

    def _room_window_counts(self) -> dict[str, int]:
        """{room_id: windows stored} (empty layout windows included), exact."""
        answer = self._client.facet(
            self._collection, schema.ROOM_ID, facet_filter=_windows(), limit=_MAX_ROOMS, exact=True
        )
        return {str(hit.value): int(hit.count) for hit in answer.hits}
