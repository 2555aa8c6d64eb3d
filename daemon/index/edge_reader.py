"""The reading side of the embedded index: one published generation, from a private copy.

Owns: ``EdgeIndexReader``: ``open_latest`` (copy ``generations/<CURRENT>`` into the reader's own
directory and load the copy), ``discard_copies``, ``newer_available``, and the queries the search
reader and the operator commands ask (``hybrid``, ``lexical``, ``listing``, ``window_of_event``,
``neighbours``, ``room_aliases``, ``window_counts``, ``cursors``, ``read_meta``); ``close``
deletes the copy. Helpers both sides use live in ``daemon/index/edge_shared.py``.

Must not: import ``daemon.index.edge_writer`` or write any shard; it loads only its private copy,
never the working shard or a published generation (Edge has no read-only open, and a second
``load()`` of a held shard can break the holder's next ``flush()``: shared/notes/index.md). It
does not decide what to search for.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import qdrant_edge as qe

from daemon.index import schema
from daemon.index.edge_shared import (
    _copy_tree,
    _edge_sparse,
    _eligible,
    _generations,
    _get_meta,
    _IS_WINDOW,
    _match,
    _meta_payloads,
    _range,
    _room_window_counts,
    _room_windows,
    _scroll_all,
    _scroll_exact,
    _scroll_ordered,
    read_current,
)
from daemon.index.schema import LEG_DENSE, LEG_LEXICAL, listing_key
from daemon.ports import IndexMeta, RoomCursor, ScoredWindow, SearchFilter, SparseVector

_OPEN_ATTEMPTS = 5


def _record_key(record: qe.Record) -> tuple[int, str]:
    return listing_key(record.payload, record.id)


class EdgeIndexReader:
    """The reader's side: one published generation, loaded from a private copy.

    Use ``open_latest`` to make one; ``newer_available()`` tells the serving process when to
    open a fresh reader, swap it in and ``close()`` the old one (which deletes its copy).
    """

    def __init__(self, shard: qe.EdgeShard, root: Path, copy_dir: Path, generation: int):
        self._shard: qe.EdgeShard | None = shard
        self.root = Path(root)
        self.copy_dir = Path(copy_dir)
        self.current_generation = generation
        self._meta = schema.index_meta_from_value(_get_meta(shard, schema.META_INDEX))
        self._aliases: dict[str, str] | None = None  # a generation never changes: computed once

    @staticmethod
    def discard_copies(private_dir: Path) -> None:
        """Remove copies left by a reader process that died without ``close()``. Call it once at
        start-up, only when this process is the sole user of ``private_dir``."""
        for leftover in Path(private_dir).glob("gen-*"):
            shutil.rmtree(leftover, ignore_errors=True)

    @classmethod
    def open_latest(cls, root: Path, private_dir: Path) -> EdgeIndexReader | None:
        """Copy ``generations/<CURRENT>`` into a fresh subdirectory of ``private_dir`` and load
        the copy. None when nothing is published yet. If the generation is pruned while being
        copied, start over with the newest one."""
        root, private_dir = Path(root), Path(private_dir)
        private_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(_OPEN_ATTEMPTS):
            number = read_current(root)
            if number is None:
                return None
            source = _generations(root) / str(number)
            copy_dir = Path(tempfile.mkdtemp(prefix=f"gen-{number}-", dir=private_dir))
            shard_dir = copy_dir / "shard"
            try:
                _copy_tree(source, shard_dir, durable=False)
                if not source.is_dir():  # pruned while we copied: the copy may be partial
                    raise FileNotFoundError(errno.ENOENT, "generation pruned during copy", str(source))
            except OSError:
                shutil.rmtree(copy_dir, ignore_errors=True)
                if source.is_dir() and read_current(root) == number:
                    raise  # not a prune race: a real failure to copy
                continue
            try:
                shard = qe.EdgeShard.load(str(shard_dir))
            except Exception as exc:
                shutil.rmtree(copy_dir, ignore_errors=True)
                if not source.is_dir():
                    continue
                raise RuntimeError(f"generation {number} under {root} does not load: {exc}") from exc
            try:
                return cls(shard, root, copy_dir, number)
            except BaseException:  # the copy is ours alone: leave neither it nor the shard open
                shard.close()
                shutil.rmtree(copy_dir, ignore_errors=True)
                raise
        raise RuntimeError(f"generations under {root} kept vanishing while being copied")

    def newer_available(self) -> bool:
        """True when CURRENT names a generation other than the one loaded (generation numbers
        only grow, so a different one is a newer one)."""
        number = read_current(self.root)
        return number is not None and number != self.current_generation

    def close(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        shutil.rmtree(self.copy_dir, ignore_errors=True)

    def __enter__(self) -> EdgeIndexReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_shard(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"index reader for generation {self.current_generation} is closed")
        return self._shard

    # -- queries ---------------------------------------------------------------------------

    def read_meta(self) -> IndexMeta | None:
        return self._meta

    def _check_dense(self, dense: Sequence[float]) -> list[float]:
        vector = [float(x) for x in dense]
        if self._meta is not None and len(vector) != self._meta.dim:
            raise ValueError(f"dense query has {len(vector)} dimensions, the index has {self._meta.dim}")
        return vector

    def hybrid(self, dense: Sequence[float], sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        """Both legs filtered before ranking, fused by RRF: score = sum 1/(RRF_K_SPEC + rank),
        rank 1-based (Qdrant's Fusion.Rrf(k=RRF_K_QDRANT) ranks the same; fusing here lets each
        result say which legs found it)."""
        conditions = _eligible(flt)
        if conditions is None or limit <= 0:
            return []
        shard = self._require_shard()
        leg_limit = schema.prefetch_depth(limit)
        legs: list[tuple[str, qe.Query]] = [(LEG_DENSE, qe.Query.Nearest(self._check_dense(dense), using=schema.DENSE))]
        if sparse.indices:
            legs.append((LEG_LEXICAL, qe.Query.Nearest(_edge_sparse(sparse), using=schema.SPARSE)))
        requests = [
            qe.QueryRequest(limit=leg_limit, query=query, filter=qe.Filter(must=conditions), with_payload=False)
            for _, query in legs
        ]
        results = shard.query_batch(qe.QueryBatchRequest(requests))
        scores: dict[str, float] = {}
        found_by: dict[str, list[str]] = {}
        lexical_rank: dict[str, int] = {}
        for (leg, _), hits in zip(legs, results):
            for rank, hit in enumerate(hits, start=1):
                pid = str(hit.id)
                scores[pid] = scores.get(pid, 0.0) + 1.0 / (schema.RRF_K_SPEC + rank)
                found_by.setdefault(pid, []).append(leg)
                if leg == LEG_LEXICAL:
                    lexical_rank[pid] = rank
        top = sorted(scores, key=lambda pid: schema.fused_order(scores[pid], lexical_rank.get(pid), pid))[:limit]
        payloads = {str(r.id): r.payload for r in shard.retrieve(top, with_payload=True, with_vector=False)}
        return [
            ScoredWindow(point_id=pid, score=scores[pid], payload=payloads[pid], legs=tuple(found_by[pid]))
            for pid in top
            if pid in payloads
        ]

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        conditions = _eligible(flt)
        if conditions is None or limit <= 0 or not sparse.indices:
            return []
        hits = self._require_shard().query(
            qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(_edge_sparse(sparse), using=schema.SPARSE),
                filter=qe.Filter(must=conditions),
                with_payload=True,
            )
        )
        return [ScoredWindow(point_id=str(h.id), score=h.score, payload=h.payload, legs=(LEG_LEXICAL,)) for h in hits]

    def listing(self, flt: SearchFilter, after: tuple[int, str] | None, limit: int) -> list[dict[str, Any]]:
        """Eligible windows in (ts_start, chunk_id) order, strictly after ``after``; exact with any
        number of equal ts_start (``_scroll_exact``)."""
        conditions = _eligible(flt)
        if conditions is None or limit <= 0:
            return []
        shard = self._require_shard()
        if after is None:
            return [r.payload for r in _scroll_exact(shard, conditions, None, False, limit)]
        after_key = (int(after[0]), str(after[1]))
        tied = _scroll_all(shard, [*conditions, _range(schema.TS_START, gte=after_key[0], lte=after_key[0])])
        rows = sorted((r for r in tied if listing_key(r.payload, r.id) > after_key), key=_record_key)[:limit]
        rows += _scroll_exact(shard, conditions, {"gt": after_key[0]}, False, limit - len(rows))
        return [r.payload for r in rows]

    def window_of_event(self, event_id: str) -> dict[str, Any] | None:
        page, _ = self._require_shard().scroll(
            qe.ScrollRequest(
                limit=1,
                filter=qe.Filter(must=[_IS_WINDOW, _match(schema.EVENT_IDS, event_id)]),
                with_payload=True,
                with_vector=False,
            )
        )
        return page[0].payload if page else None

    def neighbours(self, room_id: str, ts: int, before: int, after: int) -> list[dict[str, Any]]:
        """Up to ``before`` non-empty windows of the room starting before ``ts`` and ``after``
        starting after it, the nearest by (ts_start, chunk_id), oldest first."""
        shard = self._require_shard()
        base = [*_room_windows(room_id), _range(schema.N_MESSAGES, gte=1)]
        earlier = _scroll_exact(shard, base, {"lt": ts}, True, before)
        later = _scroll_exact(shard, base, {"gt": ts}, False, after)
        return [r.payload for r in reversed(earlier)] + [r.payload for r in later]

    def window_counts(self) -> dict[str, int]:
        """{room_id: windows stored} (empty layout windows included), exact."""
        return _room_window_counts(self._require_shard())

    def cursors(self) -> dict[str, RoomCursor]:
        """Every room cursor in this generation."""
        return schema.cursors_from_meta(_meta_payloads(self._require_shard()))

    def room_aliases(self) -> dict[str, str]:
        """{room_id: alias} for every stored room whose newest window carries an alias."""
        shard = self._require_shard()
        if self._aliases is None:
            aliases: dict[str, str] = {}
            for room_id in sorted(_room_window_counts(shard)):
                newest = _scroll_ordered(shard, _room_windows(room_id), schema.TS_START, True, 1)
                alias = newest[0].payload.get(schema.ROOM_ALIAS) if newest else None
                if alias:
                    aliases[room_id] = str(alias)
            self._aliases = aliases
        return dict(self._aliases)
