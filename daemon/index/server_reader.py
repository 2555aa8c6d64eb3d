"""The reading side of the index on a Qdrant server: the search reader's ``IndexReader``.

Owns: ``ServerIndexReader``: ``hybrid``, ``lexical``, ``listing``, ``window_of_event``,
``neighbours``, ``window_counts``, ``cursors``, ``room_aliases``, ``read_meta``, ``close``. The
client, filters and shared reads live in ``daemon/index/server_shared.py``.

Must not: import ``daemon.index.server_writer`` or send any write (give it a client on a
read-only API key); apply a filter after ranking instead of before. Its reads raise
qdrant-client's exceptions as they are.

Theory of operation:

- **Hybrid search** is one ``query_batch_points`` round trip holding three requests: the RRF fusion
  of two prefetch legs (dense, bm25; ``RrfQuery(Rrf(k=RRF_K_QDRANT))``, i.e. 1/(60 + rank) with
  1-based ranks, the spec's k=60), and the same two legs again returning ids only, which say which
  legs matched each fused hit. The eligibility filter sits inside every Prefetch (Qdrant local
  mode ignores a top-level filter on a fusion query; on a server it is correct as well), so filters
  apply before ranking, never after.
- **Ordered reads** (``listing``, ``neighbours``) are exact on ``(ts_start, chunk_id)`` across
  page boundaries; ``daemon/index/server_shared.py`` says how.
"""

from __future__ import annotations

from typing import Any, Sequence

from qdrant_client import QdrantClient
from qdrant_client import models

from daemon.index import schema
from daemon.index.server_shared import (
    DEFAULT_COLLECTION,
    _Collection,
    _eligible,
    _HAS_MESSAGES,
    _IS_WINDOW,
    _match,
    _match_any,
    _order_key,
    _require_room,
    _sparse,
    _windows,
)
from daemon.ports import IndexMeta, RoomCursor, ScoredWindow, SearchFilter, SparseVector


def _require_limit(limit: int, name: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {limit!r}")
    return limit


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
        depth = schema.prefetch_depth(limit)
        dense_query = [float(x) for x in dense]
        legs: list[tuple[str, models.Prefetch]] = [
            (schema.LEG_DENSE, models.Prefetch(query=dense_query, using=schema.DENSE, filter=leg_filter, limit=depth))
        ]
        sparse_query = _sparse(sparse)
        if sparse_query is not None:  # a query with no known terms has no lexical leg
            legs.append(
                (schema.LEG_LEXICAL, models.Prefetch(query=sparse_query, using=schema.SPARSE, filter=leg_filter, limit=depth))
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
            for (name, _), answer in zip(legs, answers[1:]) if name == schema.LEG_LEXICAL
            for rank, point in enumerate(answer.points, start=1)
        }
        ranked = sorted(
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
            for point in ranked
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
            ScoredWindow(point_id=str(p.id), score=float(p.score), payload=p.payload or {}, legs=(schema.LEG_LEXICAL,))
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
        return self._room_window_counts()

    def cursors(self) -> dict[str, RoomCursor]:
        """Every room cursor in the collection."""
        if not self._client.collection_exists(self._collection):
            return {}
        return schema.cursors_from_meta(self._meta_payloads())

    def room_aliases(self) -> dict[str, str]:
        """room_id -> its alias as its newest window records it; rooms without an alias are left out."""
        if not self._client.collection_exists(self._collection):
            return {}
        rooms = list(self._room_window_counts())
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
