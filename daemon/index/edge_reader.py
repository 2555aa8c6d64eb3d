"""The reading side of the embedded index: one published generation, from a private copy.

Owns: ``EdgeIndexReader``: ``open_latest`` (copy ``generations/<CURRENT>`` into the reader's own
directory and load the copy), ``discard_copies``, ``newer_available``, and the queries the search
reader and the operator commands ask (``hybrid``, ``lexical``, ``listing``, ``window_of_event``,
``neighbours``, ``room_aliases``, ``window_counts``, ``cursors``, ``read_meta``: the engine's own
``hybrid`` and ``lexical``, the rest from ``daemon/index/queries.py`` over the primitives of
``daemon/index/edge.py``); ``release_pages`` (what searches mapped in, dropped between them);
``close`` deletes the copy.

Must not: import ``daemon.index.edge_writer`` or write any shard; it loads only its private copy,
never the working shard or a published generation (Edge has no read-only open, and a second
``load()`` of a held shard can break the holder's next ``flush()``: shared/notes/index.md). It
does not decide what to search for.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import qdrant_edge as qe

from daemon import native
from daemon.index import schema
from daemon.index.edge import (
    CURRENT_FILE,
    EdgeQueries,
    conditions,
    copy_tree,
    edge_sparse,
    generations_dir,
    read_current,
)
from daemon.index.port import IndexMeta, IndexUnreadableError, RoomEntry, ScoredWindow, SearchFilter, SparseVector
from daemon.index.queries import fuse_legs, message_scores, raw_leg_scores
from daemon.safe_files import PlantedLinkError, make_configured_dir

_OPEN_ATTEMPTS = 5
# The dense leg scans the quantised copies of the message vectors (daemon.index.edge_writer's
# sealed layout), keeps RESCORE_OVERSAMPLING times its depth, and ranks those by the float32
# originals: the leg's order and scores are the exact ones whenever the exact top lies within the
# kept candidates. The same request serves a shard of any scan copy (one made with int8 before
# the 1-bit copies is served as it is until the writer rewrites it).
RESCORE_OVERSAMPLING = schema.RESCORE_OVERSAMPLING
_RESCORE = qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=True))
# The prefetch ranks by the quantised copies alone. Said, not left to Edge: its default rescores a
# binary or TurboQuant scan inside each segment with the originals, which read every segment's own
# candidates' float32 rows (~300 MB of mapped pages for one max-size search at 100k windows, 16
# segments, measured) before the outer rescore read the merged candidates' again.
_SCAN = qe.SearchParams(quantization=qe.QuantizationSearchParams(rescore=False))
WAL_DIR = "wal"  # Edge's write-ahead log inside a shard directory


def dense_leg_request(
    vector: Sequence[float], leg_filter: qe.Filter | None, depth: int, oversampling: float = RESCORE_OVERSAMPLING
) -> qe.QueryRequest:
    """The dense leg: the quantised scan as a prefetch of ``oversampling`` x ``depth`` windows,
    ranked again by the float32 originals (``_RESCORE``). The quantisation harness
    (bench/quantisation.py) asks the same request."""
    nearest = qe.Query.Nearest(list(vector), using=schema.DENSE)
    candidates = qe.Prefetch(limit=int(depth * oversampling), query=nearest, filter=leg_filter, params=_SCAN)
    return qe.QueryRequest(limit=depth, prefetches=[candidates], query=nearest, params=_RESCORE, with_payload=False)


def read_page_mappings(copy_dir: Path) -> list[tuple[int, int]]:
    """The address ranges of this process's shared ("s") mappings of files under ``copy_dir``
    (every file of the loaded copy: vectors, payloads, payload indexes, BM25 postings, id
    trackers), adjacent ones joined, from /proc/self/maps. Read in one call and searched as bytes
    for the copy's path, so only the lines that name it are split in Python: the reader releases
    pages on a thread of its own beside the requests, and a loop over every line (~800 in a
    reader) held the interpreter lock that the next request needed."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            table = maps.read()
    except OSError:
        return []
    prefix = os.fsencode(str(copy_dir) + "/")
    ranges: list[tuple[int, int]] = []
    found = table.find(prefix)
    while found >= 0:
        line_start = table.rfind(b"\n", 0, found) + 1
        # start-end perms offset dev inode, then the path: five fields exactly when the path
        # itself starts with the copy's directory (not a longer path that holds it further in)
        head = table[line_start:found].split()
        if len(head) == 5 and head[1].endswith(b"s"):
            start, end = (int(part, 16) for part in head[0].split(b"-"))
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end)
            else:
                ranges.append((start, end))
        line_end = table.find(b"\n", found)
        found = -1 if line_end < 0 else table.find(prefix, line_end)
    return ranges


def release_read_pages(copy_dir: Path) -> None:
    """Drop the resident pages of the copy's mapped files under ``copy_dir`` from this process.
    Why: Edge maps a generation's files and never unmaps what a search touched, and each touch
    maps far more than the few bytes read (the kernel's fault-around, 64 KB, or a whole large
    folio where the page cache holds one: ~700 KB a hit measured here), so after a few hundred
    searches every float32 message vector of a 100k-window generation (~600 MB) counted in the
    reader's RSS although it scans the quantised copies. The payload indexes, BM25 postings and id
    trackers are mapped the same way and were ~100 MB of a 100k-window reader (most of it the
    empty appendable segment's preallocated index pages, resident from the load on; bench/smaps.py,
    bench/results.md). ``MADV_DONTNEED`` on a *shared* file mapping drops only this process's page
    table entries: the next read faults the page back in from the page cache, unchanged. The
    ranges are read from /proc/self/maps at each call, never remembered: ``MADV_DONTNEED`` on an
    address that had since been unmapped and reused by the heap would zero live memory. Elsewhere
    than Linux and glibc it does nothing."""
    for start, end in read_page_mappings(copy_dir):
        native.drop_mapped_pages(start, end)


def drop_wal(shard_dir: Path) -> None:
    """Empty the write-ahead log of a private copy before it is loaded. A generation is
    published only after ``flush()`` (``EdgeIndexWriter.commit``), so its segments hold every
    operation and the log holds nothing a reader needs; loaded, it is mapped and replayed, which
    kept ~30 MB of the reader resident per generation (bench: reader_rss_after_start_mb). Edge
    starts an empty log in its place; the reader never writes to it."""
    wal = shard_dir / WAL_DIR
    if wal.is_dir():
        for entry in wal.iterdir():
            entry.unlink()


def _current_or_unreadable(root: Path) -> int | None:
    try:
        return read_current(root)
    except (OSError, RuntimeError, PlantedLinkError) as exc:
        raise IndexUnreadableError(None, str(generations_dir(root) / CURRENT_FILE), _reason(exc)) from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


class EdgeIndexReader(EdgeQueries):
    """The reader's side: one published generation, loaded from a private copy.

    Use ``open_latest`` to make one; ``newer_available()`` tells the serving process when to
    open a fresh reader, swap it in and ``close()`` the old one (which deletes its copy).
    """

    def __init__(self, shard: qe.EdgeShard, root: Path, copy_dir: Path, generation: int):
        self._shard: qe.EdgeShard | None = shard
        self.root = Path(root)
        self.copy_dir = Path(copy_dir)
        self.current_generation = generation
        self.copy_method: str | None = None  # how open_latest made the private copy (edge.copy_tree)
        self._meta = self._index_meta()
        self._aliases: dict[str, str] | None = None  # a generation never changes: computed once
        self._directory: dict[str, RoomEntry] | None = None  # likewise

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
        copied, start over with the newest one. A generation that is there but cannot be copied or
        loaded (corrupt, unreadable, a link inside it), or a CURRENT that cannot be read, raises
        ``IndexUnreadableError`` naming it."""
        root, private_dir = Path(root), Path(private_dir)
        make_configured_dir(private_dir)
        for _ in range(_OPEN_ATTEMPTS):
            number = _current_or_unreadable(root)
            if number is None:
                return None
            source = generations_dir(root) / str(number)
            copy_dir = Path(tempfile.mkdtemp(prefix=f"gen-{number}-", dir=private_dir))
            shard_dir = copy_dir / "shard"
            try:
                copy_method = copy_tree(source, shard_dir, durable=False)
                if not source.is_dir():  # pruned while we copied: the copy may be partial
                    raise FileNotFoundError(errno.ENOENT, "generation pruned during copy", str(source))
                drop_wal(shard_dir)
            except (OSError, PlantedLinkError) as exc:
                shutil.rmtree(copy_dir, ignore_errors=True)
                if os.path.lexists(source) and _current_or_unreadable(root) == number:
                    # not a prune race: the generation itself cannot be copied
                    raise IndexUnreadableError(number, str(source), _reason(exc)) from exc
                continue
            try:
                shard = qe.EdgeShard.load(str(shard_dir))
            except Exception as exc:
                shutil.rmtree(copy_dir, ignore_errors=True)
                if not source.is_dir():
                    continue
                raise IndexUnreadableError(number, str(source), f"it does not load: {exc}") from exc
            try:
                reader = cls(shard, root, copy_dir, number)
                reader.copy_method = copy_method  # reflink: the private copy cost no data
                release_read_pages(copy_dir)  # what the load and the meta read mapped in
                return reader
            except BaseException:  # the copy is ours alone: leave neither it nor the shard open
                shard.close()
                shutil.rmtree(copy_dir, ignore_errors=True)
                raise
        raise RuntimeError(f"generations under {root} kept vanishing while being copied")

    def newer_available(self) -> bool:
        """True when CURRENT names a generation other than the one loaded (generation numbers
        only grow, so a different one is a newer one)."""
        try:
            number = read_current(self.root)
        except (OSError, RuntimeError, PlantedLinkError):
            return True  # open_latest says what is wrong with it
        return number is not None and number != self.current_generation

    def close(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        shutil.rmtree(self.copy_dir, ignore_errors=True)

    def release_pages(self) -> None:
        """Drop the pages the searches since the last call mapped in (``release_read_pages``).
        Not part of a query: the reader service calls it between requests once those pages pass
        its budget (``daemon.reader.memory.GiveBack``: after the reply when no other request is
        in flight, so no search waits for the ~2 ms that reading /proc/self/maps costs a reader,
        before it otherwise), and before each text's search of a request of several. Call it only
        while the shard is open and no other call of this reader runs: a range unmapped by
        ``close`` could be reused."""
        if self._shard is not None:
            release_read_pages(self.copy_dir)

    def _require_shard(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"index reader for generation {self.current_generation} is closed")
        return self._shard

    # -- queries (listing, neighbours, counts, cursors: daemon.index.queries) -------------------

    def read_meta(self) -> IndexMeta | None:
        return self._meta

    def hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        flt: SearchFilter,
        limit: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[ScoredWindow]:
        """Both legs filtered before ranking, fused here by ``fuse_legs`` (weighted min-max
        scores), so each result can say which legs found it."""
        must = schema.eligibility(flt)
        vector = schema.dense_vector(dense, self._meta.dim if self._meta is not None else None)
        lexical = schema.sparse_vector(sparse)
        if must is None or schema.require_limit(limit) == 0:
            return []
        shard = self._require_shard()
        leg_limit = schema.prefetch_depth(limit)
        leg_filter = qe.Filter(must=conditions(must))
        legs = [schema.LEG_DENSE]
        requests = [dense_leg_request(vector, leg_filter, leg_limit)]
        if lexical is not None:
            legs.append(schema.LEG_LEXICAL)
            requests.append(
                qe.QueryRequest(
                    limit=leg_limit,
                    query=qe.Query.Nearest(edge_sparse(lexical), using=schema.SPARSE),
                    filter=leg_filter,
                    with_payload=False,
                )
            )
        results = shard.query_batch(qe.QueryBatchRequest(requests))
        ranked = [(leg, [(str(hit.id), float(hit.score)) for hit in hits]) for leg, hits in zip(legs, results)]
        fused = fuse_legs(ranked, limit, weights)
        raw = raw_leg_scores(ranked)
        # The message vectors of the few fused hits come back with their payloads, so each hit
        # can name the message the dense leg matched without embedding anything again.
        records = shard.retrieve([pid for pid, _, _ in fused], with_payload=True, with_vector=[schema.DENSE])
        found = {
            str(r.id): (r.payload, r.vector.get(schema.DENSE) if isinstance(r.vector, dict) else None) for r in records
        }
        hits = []
        for pid, score, found_by in fused:
            if pid not in found:
                continue
            window = schema.stored_window(found[pid][0], pid)
            context = schema.context_of(found[pid][0], len(window.messages))
            scores = message_scores(vector, found[pid][1], len(window.messages), context)
            hits.append(ScoredWindow(pid, score, window, found_by, scores, raw.get(pid, ())))
        return hits

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        must, lexical = schema.eligibility(flt), schema.sparse_vector(sparse)
        if must is None or lexical is None or schema.require_limit(limit) == 0:
            return []
        hits = self._require_shard().query(
            qe.QueryRequest(
                limit=limit,
                query=qe.Query.Nearest(edge_sparse(lexical), using=schema.SPARSE),
                filter=qe.Filter(must=conditions(must)),
                with_payload=True,
            )
        )
        return [
            ScoredWindow(
                str(h.id),
                h.score,
                schema.stored_window(h.payload, h.id),
                (schema.LEG_LEXICAL,),
                leg_scores=((schema.LEG_LEXICAL, float(h.score)),),
            )
            for h in hits
        ]

    def room_aliases(self) -> dict[str, str]:
        if self._aliases is None:
            self._aliases = super().room_aliases()
        return dict(self._aliases)

    def room_directory(self, room_ids: Sequence[str] | None = None) -> dict[str, RoomEntry]:
        if self._directory is None:
            self._directory = super().room_directory()
        if room_ids is None:
            return dict(self._directory)
        return {room: self._directory[room] for room in room_ids if room in self._directory}
