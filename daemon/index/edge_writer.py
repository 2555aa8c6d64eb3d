"""The writing side of the embedded index: the refresher's working shard and its published generations.

Owns: ``EdgeIndexWriter`` (the working shard ``<root>/work``, the lock ``<root>/work.lock``, a
full rebuild built beside it in ``<root>/rebuild``, the compaction that rewrites ``work`` without
the bytes of deleted points, publishing ``generations/<n>`` + ``CURRENT`` and pruning every other
generation) and ``IndexLockedError``. It maps the plain data model of ``daemon/index/schema.py`` onto
``qdrant_edge`` points; its reads are ``daemon/index/queries.py`` over ``daemon/index/edge.py``.

Must not: open a shard another process may hold. Edge has no read-only open, and a second
``load()`` of a held shard can break the holder's next ``flush()`` (docs: shared/notes/index.md),
so the writer takes ``<root>/work.lock`` (``fcntl.flock``) for its whole life. Nothing on the read
side (``daemon.reader.service``, ``daemon.index.edge_reader``) may import this module. It does not decide
what to write.

Theory of operation:

- **Never serve less than the last good generation.** ``reset(meta)`` on an index that has a
  published generation creates a fresh shard in ``<root>/rebuild`` and writes go there; ``work``
  and the published generations stay as they are. ``commit(complete=True)`` swaps the rebuild in
  as ``work`` and publishes it; ``commit(complete=False)`` flushes it and publishes nothing, so the
  reader keeps the old generation and the next run resumes the rebuild from its cursors.
- **Swaps** (a finished rebuild, a compaction) go through one crash-safe sequence: the finished
  shard is renamed ``work.next``, ``work`` -> ``work.old``, ``work.next`` -> ``work``, then
  ``work.old`` is removed. Opening the writer completes or rolls back a half-done swap: a
  ``work.next`` is always complete (nothing else gets that name), so it wins.
- **Deleted text leaves the disk.** Edge keeps a deleted or overwritten point's payload in its
  segment files and its WAL until they are rewritten (measured: a deleted point's payload stayed
  in ``wal/open-1`` and ``payload_storage/page_0.dat`` after delete, flush and ``optimize()``).
  ``commit(compact=True)`` (the refresher asks for it after a run that redacted, purged or
  deleted anything) scrolls every live point into a fresh shard and swaps it in. Only
  ``CURRENT``'s generation is kept (a reader needs a generation only until it has copied it;
  ``edge_reader.open_latest`` retries with the newest when one is pruned under it), pruned on
  every commit, no-op runs too.
- **Sealed segments, bounded memory**. Edge writes into one appendable segment whose
  vectors are mmap'd chunks written in place and whose payload, BM25 and id indexes live on the
  heap, so a shard that is never optimised grows the writer (and every reader of its copies) by
  ~2.4 MB per 1,000 messages. ``SegmentLayout`` creates shards whose optimiser seals data into
  immutable segments of bounded size: no HNSW graph (``m=0``: the search stays a scan, exact but
  for the quantised first pass), 1-bit TurboQuant copies pinned in RAM for that scan
  (``SegmentLayout.scan_copy``; int8 before, ~6.5 times the RAM), the float32
  originals, sparse postings, payload, payload indexes and id tracker on disk (``Memory.Cold``:
  mapped, read on demand). The writer seals every ``seal_rows`` message vectors written (optimise,
  flush, close, load again: the reload drops the pages the optimiser touched, which otherwise stay
  resident in this process) and before every publish, so each optimisation rewrites what changed
  since the last one (or merges segments up to ``max_segment_kb``), never the whole shard. A shard
  created before this layout (no ``m=0`` in its ``edge_config.json``) is never optimised: Edge's
  defaults would build a graph over all of it in one go. Deleted points' bytes in sealed segments
  are no different from the appendable one's: ``commit(compact=True)`` rewrites every segment.
  A sealed shard whose scan copies are not the layout's (int8, made before the 1-bit copies) is
  rewritten by the next ``commit`` the same way, once; readers serve it as it is until then.

Fault injection (the crash tests): the constructor's ``fail_writes(boundary, subject)`` callback
is asked before every write boundary (``reset``, ``write_windows``, ``set_cursor``, ``purge_room``, ``set_meta_entry``,
``commit``; ``subject`` is the room id, meta key or root; and ``publish``, between a generation's last
write and the ``CURRENT`` switch, with the generation's number) and makes it raise when it returns
True.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import qdrant_edge as qe

from daemon import native
from daemon.index import schema
from daemon.index.edge import (
    CURRENT_FILE,
    WORK_DIR,
    EdgeQueries,
    conditions,
    copy_tree,
    edge_sparse,
    generations_dir,
    read_current,
)
from daemon.index.port import IndexMeta, IndexWriteError, RoomCursor, WindowPoint
from daemon.index.queries import WriterQueries
from daemon.safe_files import DIR_MODE, fsync_dir, make_dir, open_no_follow, refuse_link, write_atomically

LOCK_FILE = "work.lock"
UNPUBLISHED_MARKER = "work.unpublished"
REBUILD_DIR = "rebuild"  # a full rebuild, built beside the served work shard
NEXT_DIR = "work.next"  # a finished shard about to become work (complete by construction)
OLD_DIR = "work.old"  # the work shard being swapped out
COMPACT_DIR = "work.compact"  # a compaction being written
_COMPACT_PAGE = 512

EDGE_CONFIG_FILE = "edge_config.json"  # Edge's own record of a shard's config


@dataclass(frozen=True)
class SegmentLayout:
    """How a shard's segments are laid out (see "Sealed segments" above). Sizes in KB of vector
    data, Edge's unit: one message row is 384 x 4 bytes = 1.5 KB."""

    indexing_threshold_kb: int = 8_192  # an appendable segment past this is sealed by optimize()
    max_segment_kb: int = 65_536  # no optimisation writes a segment larger than this
    segment_number: int = 16  # segments merged (up to max_segment_kb) only past this many
    seal_rows: int = 20_000  # message vectors written between two seals during a long run
    scan_copy: str = "tq1"  # the in-RAM copy the dense leg scans: a name in SCAN_COPIES


DEFAULT_LAYOUT = SegmentLayout()


def _index_params(kind: str) -> Any:
    # Cold: a sealed segment's payload index is mapped from disk, not held on the heap.
    if kind == "integer":
        return qe.IntegerIndexParams(lookup=True, range=True, memory=qe.Memory.Cold)
    return qe.KeywordIndexParams(memory=qe.Memory.Cold)


class IndexLockedError(RuntimeError):
    """Another writer holds this index root. Opening it too could corrupt the working shard."""


# --------------------------------------------------------------------------------------------
# Files: publishing


def _numbered_dirs(generations: Path) -> list[int]:
    """The generation numbers present, links among them too: a link is never a generation, but
    its number must not be handed out again (the rename onto it would refuse)."""
    if not generations.is_dir():
        return []
    return sorted(int(p.name) for p in generations.iterdir() if p.name.isdigit() and (p.is_symlink() or p.is_dir()))


# --------------------------------------------------------------------------------------------
# Writer


class EdgeIndexWriter(EdgeQueries, WriterQueries):
    """The refresher's side: the working shard ``<root>/work``, published by ``commit()``.

    Holds ``<root>/work.lock`` from construction to ``close()``; a second writer on the same
    root raises ``IndexLockedError``. A work directory that exists but does not load (a crash in
    the middle of ``reset``) reads as "no meta", so the refresher rebuilds it with ``reset``;
    ``load_error`` then says why, for the journal.
    """

    def __init__(
        self,
        root: Path,
        fail_writes: Callable[[str, str], bool] | None = None,
        layout: SegmentLayout = DEFAULT_LAYOUT,
    ):
        self.root = Path(root)
        self.layout = layout
        self._rows_since_seal = 0
        self.work = self.root / WORK_DIR
        self._fail_writes = fail_writes
        self._shard: qe.EdgeShard | None = None
        self._meta: IndexMeta | None = None
        self.load_error: str | None = None  # why an existing work dir did not load, for the journal
        # The last publication of this writer's life: generation, copy (reflink|copy|mixed), seconds.
        self.last_publish: dict[str, Any] | None = None
        self.rebuild = self.root / REBUILD_DIR
        self.rebuilding = False  # writes go to <root>/rebuild until commit(complete=True)
        make_dir(self.root, parents=True)
        self._lock_fd: int | None = self._acquire_lock()
        try:
            # Every name the writer renames, loads, removes or writes under the root: a link there
            # would make Edge load, or a swap publish, something outside the index.
            for name in (WORK_DIR, REBUILD_DIR, NEXT_DIR, OLD_DIR, COMPACT_DIR, UNPUBLISHED_MARKER):
                refuse_link(self.root / name)
            refuse_link(generations_dir(self.root))
            self._unpublished = os.path.lexists(self.root / UNPUBLISHED_MARKER)
            self._recover_swap()
            shutil.rmtree(self.root / COMPACT_DIR, ignore_errors=True)  # an unfinished compaction
            self._shard = self._load_rebuild() or self._load_work()
            if self._shard is not None:
                self._meta = self._index_meta()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------

    def _acquire_lock(self) -> int:
        path = self.root / LOCK_FILE
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise IndexLockedError(
                f"index at {self.root} is held by another writer ({path} is locked); "
                "only one refresher may run at a time"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        return fd

    def _recover_swap(self) -> None:
        """Finish (or undo) a swap a crash interrupted; see "Swaps" above."""
        nxt, old = self.root / NEXT_DIR, self.root / OLD_DIR
        if nxt.is_dir():
            if self.work.exists() and not old.exists():
                os.rename(self.work, old)
            elif self.work.exists():
                shutil.rmtree(self.work)
            os.rename(nxt, self.work)
            self._mark_unpublished()
        elif old.exists() and not self.work.exists():
            os.rename(old, self.work)
        shutil.rmtree(old, ignore_errors=True)
        fsync_dir(self.root)

    def _load_rebuild(self) -> qe.EdgeShard | None:
        if not self.rebuild.is_dir():
            return None
        try:
            shard = qe.EdgeShard.load(str(self.rebuild))
        except Exception:  # noqa: BLE001 — a half-made rebuild: drop it, the refresher starts it again
            shutil.rmtree(self.rebuild, ignore_errors=True)
            return None
        self.rebuilding = True
        return shard

    def _swap_in(self, finished: Path) -> None:
        """Make the finished, flushed and closed shard at ``finished`` the work shard."""
        self._mark_unpublished()
        nxt, old = self.root / NEXT_DIR, self.root / OLD_DIR
        shutil.rmtree(old, ignore_errors=True)
        os.rename(finished, nxt)
        fsync_dir(self.root)
        if self.work.exists():
            os.rename(self.work, old)
        os.rename(nxt, self.work)
        fsync_dir(self.root)
        shutil.rmtree(old, ignore_errors=True)

    def _load_work(self) -> qe.EdgeShard | None:
        if not self.work.is_dir() or not any(self.work.iterdir()):
            return None
        try:
            return qe.EdgeShard.load(str(self.work))
        except Exception as exc:  # noqa: BLE001 — a half-made shard: read_meta() says None and reset() rebuilds it
            self.load_error = str(exc)
            return None

    def close(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        if self._lock_fd is not None:
            fd = self._lock_fd
            self._lock_fd = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- guards ----------------------------------------------------------------------------

    def _require_shard(self) -> qe.EdgeShard:
        if self._lock_fd is None:
            raise RuntimeError(f"index writer for {self.root} is closed")
        if self._shard is None:
            raise RuntimeError(f"index at {self.work} has no shard yet: call reset(meta) first")
        return self._shard

    def _check_injected(self, boundary: str, subject: str) -> None:
        if self._fail_writes is not None and self._fail_writes(boundary, subject):
            raise IndexWriteError(f"{boundary} for {subject} failed (injected)")

    def _mark_unpublished(self) -> None:
        """Record, before touching the shard, that work now differs from the published copy,
        so a crash before commit() still gets published by the next run's commit(). Writes to a
        rebuild do not count: work is untouched until the swap, which marks it."""
        if not self._unpublished and not self.rebuilding:
            os.close(open_no_follow(self.root / UNPUBLISHED_MARKER, os.O_WRONLY | os.O_CREAT))
            fsync_dir(self.root)
            self._unpublished = True

    def _apply(self, boundary: str, subject: str, operations: Sequence[qe.UpdateOperation]) -> None:
        shard = self._require_writable(boundary, subject)
        self._mark_unpublished()
        try:
            for operation in operations:
                shard.update(operation)
        except Exception as exc:
            raise IndexWriteError(f"{boundary} for {subject} was not acknowledged by Qdrant Edge: {exc}") from exc

    def _require_writable(self, boundary: str, subject: str) -> qe.EdgeShard:
        try:
            return self._require_shard()
        except RuntimeError as exc:
            raise IndexWriteError(f"{boundary} for {subject}: {exc}") from exc

    # -- meta ------------------------------------------------------------------------------

    def read_meta(self) -> IndexMeta | None:
        return self._meta if self._shard is not None else None

    def reset(self, meta: IndexMeta) -> None:
        schema.require_meta(meta)
        if self._lock_fd is None:
            raise RuntimeError(f"index writer for {self.root} is closed")
        self._check_injected("reset", str(self.root))
        # Build beside what is served: with a published generation the new index goes to
        # <root>/rebuild and is swapped in only by commit(complete=True). With nothing
        # published there is nothing to keep, and work is rebuilt in place.
        beside = read_current(self.root) is not None
        if not beside:
            self._mark_unpublished()
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        self._meta = None
        self.rebuilding = False
        target = self.rebuild if beside else self.work
        shutil.rmtree(self.rebuild, ignore_errors=True)
        if not beside:
            shutil.rmtree(self.work, ignore_errors=True)
        config = _edge_config(meta.dim, self.layout)
        self._rows_since_seal = 0
        try:
            shard = qe.EdgeShard.create(str(target), config)
            for field, kind in schema.PAYLOAD_INDEXES.items():
                shard.update(qe.UpdateOperation.create_field_index(field, _index_params(kind)))
            shard.update(
                qe.UpdateOperation.upsert_points([_meta_point(schema.META_INDEX, schema.index_meta_value(meta))])
            )
            shard.flush()
        except Exception as exc:
            raise IndexWriteError(f"reset of {target} failed: {exc}") from exc
        self._shard = shard
        self._meta = meta
        self.rebuilding = beside

    def set_meta_entry(self, key: str, value: Any) -> None:
        schema.require_meta_entry(key, value)
        self._check_injected("set_meta_entry", key)
        self._apply("set_meta_entry", key, [qe.UpdateOperation.upsert_points([_meta_point(key, value)])])

    # -- cursors ---------------------------------------------------------------------------

    def set_cursor(self, cursor: RoomCursor) -> None:
        schema.require_cursor(cursor)
        self._check_injected("set_cursor", cursor.room_id)
        point = _meta_point(schema.cursor_key(cursor.room_id), schema.cursor_value(cursor))
        self._apply("set_cursor", cursor.room_id, [qe.UpdateOperation.upsert_points([point])])

    # -- windows ---------------------------------------------------------------------------

    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None:
        schema.require_room_id(room_id)
        self._check_injected("write_windows", room_id)
        self._require_writable("write_windows", room_id)
        if self._meta is None:
            raise IndexWriteError(f"write_windows for {room_id}: index has no meta, call reset(meta) first")
        # Validate everything first: Edge applies a batch point by point and stops at the first
        # bad one, so a late error would leave the earlier points written.
        points = [_edge_point(schema.checked_point(room_id, i, p, self._meta.dim)) for i, p in enumerate(upserts)]
        deletes = schema.checked_deletes(room_id, delete_ids)
        operations = []
        if points:
            operations.append(qe.UpdateOperation.upsert_points(points))
        if deletes:
            # Scoped to this room's windows: a stray id can never remove meta or another room.
            scope: list[Any] = [qe.HasIdCondition(set[Any](deletes)), *_room_windows(room_id)]
            operations.append(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=scope)))
        if operations:
            self._apply("write_windows", room_id, operations)
        self._rows_since_seal += sum(len(p.dense) for p in upserts if p.dense is not None)
        if self._rows_since_seal >= self.layout.seal_rows:
            try:
                self._seal()
            except Exception as exc:  # the write itself was acknowledged; a failed seal fails the room
                raise IndexWriteError(f"write_windows for {room_id}: sealing segments failed: {exc}") from exc

    def purge_room(self, room_id: str) -> int:
        schema.require_room_id(room_id)
        self._check_injected("purge_room", room_id)
        self._require_writable("purge_room", room_id)
        try:
            doomed = self._count([schema.IS_WINDOW, schema.in_room(room_id)])
        except Exception as exc:
            raise IndexWriteError(f"purge_room for {room_id}: count failed: {exc}") from exc
        self._apply(
            "purge_room",
            room_id,
            [  # the cursor first (the spec's order): a crash after it re-reads the room from the start
                qe.UpdateOperation.delete_points(list[Any](schema.room_meta_point_ids(room_id))),
                qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=_room_windows(room_id))),
            ],
        )
        return doomed

    def drop_cursor(self, room_id: str) -> None:
        schema.require_room_id(room_id)
        self._check_injected("drop_cursor", room_id)
        point = schema.meta_point_id(schema.cursor_key(room_id))
        self._apply("drop_cursor", room_id, [qe.UpdateOperation.delete_points([point])])

    def prune_room(self, room_id: str, keep_ids: Sequence[str]) -> int:
        """Delete the room's windows whose ids are not in ``keep_ids``; returns how many."""
        schema.require_room_id(room_id)
        self._check_injected("prune_room", room_id)
        shard = self._require_writable("prune_room", room_id)
        keep = set[Any](schema.checked_deletes(room_id, list(keep_ids)))
        flt = qe.Filter(must=_room_windows(room_id), must_not=[qe.HasIdCondition(keep)] if keep else None)
        try:
            doomed = shard.count(qe.CountRequest(exact=True, filter=flt))
        except Exception as exc:
            raise IndexWriteError(f"prune_room for {room_id}: count failed: {exc}") from exc
        if doomed:
            self._apply("prune_room", room_id, [qe.UpdateOperation.delete_points_by_filter(flt)])
        return doomed

    # -- sealing ---------------------------------------------------------------------------

    def _shard_dir(self) -> Path:
        return self.rebuild if self.rebuilding else self.work

    def _seal(self) -> None:
        """Seal what was written since the last seal into immutable segments and load the shard
        again (see "Sealed segments, bounded memory" above)."""
        self._rows_since_seal = 0
        directory = self._shard_dir()
        if not sealed_layout(directory):
            return
        shard = self._require_shard()
        if not shard.optimize():  # nothing past the thresholds: nothing sealed, nothing to drop
            return
        shard.flush()
        self._shard = None
        shard.close()
        self._shard = qe.EdgeShard.load(str(directory))
        # An optimisation frees its working memory in the middle of the heap, which without a
        # trim the refresher would keep for the rest of the run.
        native.malloc_trim()

    # -- publishing ------------------------------------------------------------------------

    def commit(self, *, complete: bool = True, compact: bool = False) -> None:
        """Flush. A rebuild is swapped in only when ``complete`` (every admitted room finished);
        ``compact`` rewrites work without the bytes of deleted points. Then, if work differs from
        the published copy, publish a generation; and always prune every generation but CURRENT's."""
        self._check_injected("commit", str(self.root))
        shard = self._require_writable("commit", str(self.root))
        try:
            shard.flush()
        except Exception as exc:
            raise IndexWriteError(f"flush of {self.work} failed: {exc}") from exc
        try:
            if self.rebuilding and complete:
                self._finish_rebuild()
            if (compact or self._scan_copy_outdated()) and not self.rebuilding:
                self._compact()
            if self._unpublished and not self.rebuilding:
                self._seal()  # a generation is served sealed: its copies map, not hold, its data
                self._publish()
            self._prune_generations()
        except Exception as exc:  # OSError from the files, or Qdrant Edge failing to create or load
            raise IndexWriteError(f"publishing a generation of {self.work} failed: {exc}") from exc

    def _finish_rebuild(self) -> None:
        shard, self._shard = self._require_shard(), None
        shard.close()
        self.rebuilding = False  # first: the swap marks work unpublished, so commit publishes it
        self._swap_in(self.rebuild)
        self._shard = qe.EdgeShard.load(str(self.work))

    def _scan_copy_outdated(self) -> bool:
        """True when work is a sealed shard whose scan copies are not the layout's (a shard made
        before the 1-bit copies holds int8 ones, ~6.5 times the RAM in every reader). The
        compaction rewrites it with this layout's config once; until then readers serve it as it
        is (the rescored dense leg is exact for either copy)."""
        if self._meta is None or not sealed_layout(self.work):
            return False
        return recorded_scan_copy(self.work) != _scan_copy_record(self.layout.scan_copy)

    def _compact(self) -> None:
        """Rewrite work into a fresh shard holding only the live points, and swap it in (see
        "Deleted text leaves the disk" above)."""
        meta = self._meta
        if meta is None:
            return
        source = self._require_shard()
        target = self.root / COMPACT_DIR
        shutil.rmtree(target, ignore_errors=True)
        fresh = qe.EdgeShard.create(str(target), _edge_config(meta.dim, self.layout))
        rows = 0
        try:
            for field, kind in schema.PAYLOAD_INDEXES.items():
                fresh.update(qe.UpdateOperation.create_field_index(field, _index_params(kind)))
            offset = None
            while True:
                page, offset = source.scroll(
                    qe.ScrollRequest(offset=offset, limit=_COMPACT_PAGE, with_payload=True, with_vector=True)
                )
                if page:
                    points = [qe.Point(r.id, r.vector or {}, r.payload) for r in page]
                    fresh.update(qe.UpdateOperation.upsert_points(points))
                    rows += sum(_dense_rows(r) for r in page)
                    if rows >= self.layout.seal_rows:  # bounded, as a long run's writes are
                        rows = 0
                        fresh.optimize()
                if offset is None:
                    break
            fresh.flush()
        finally:
            fresh.close()
        self._shard = None
        source.close()
        self._swap_in(target)
        self._shard = qe.EdgeShard.load(str(self.work))

    def _prune_generations(self) -> None:
        """Keep only CURRENT's generation: a reader copies a generation and loads the copy, so
        an older one serves no one (a reader copying it when it goes retries with the newest)."""
        generations = generations_dir(self.root)
        current = read_current(self.root)
        for number in _numbered_dirs(generations):
            if number != current:
                shutil.rmtree(generations / str(number), ignore_errors=True)

    def _publish(self) -> None:
        generations = make_dir(generations_dir(self.root))
        for stale in generations.glob("*.tmp"):  # left by a crash; we hold the lock, so not in use
            if stale.is_dir() and not stale.is_symlink():  # a link is removed, never followed
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        numbers = _numbered_dirs(generations)
        current = read_current(self.root) or 0
        number = max([current, *numbers]) + 1
        staging = Path(tempfile.mkdtemp(prefix=f"{number}.", suffix=".tmp", dir=generations))
        os.chmod(staging, DIR_MODE)
        tick = time.perf_counter()
        method = copy_tree(self.work, staging)
        os.rename(staging, generations / str(number))
        fsync_dir(generations)
        # The generation is whole on disk and CURRENT still names the last one. A crash here
        # leaves work.unpublished in place: the next commit publishes a newer number and prunes
        # this one, and readers keep the last good generation meanwhile.
        self._check_injected("publish", str(number))
        write_atomically(generations / CURRENT_FILE, f"{number}\n")
        (self.root / UNPUBLISHED_MARKER).unlink(missing_ok=True)
        fsync_dir(self.root)
        self._unpublished = False
        # For the run's journal: how the generation was made (reflink: in proportion to change).
        self.last_publish = {"generation": number, "copy": method, "seconds": round(time.perf_counter() - tick, 3)}


def scan_copy_config(name: str) -> Any:
    """The in-RAM copy of the message vectors that the dense leg scans (``Memory.Pinned``: the
    scan never pages from disk), by its name in ``SCAN_COPIES``. The float32 originals stay cold
    on disk for the rescore (``edge_reader.dense_leg_request``)."""
    return SCAN_COPIES[name]()


def _edge_config(dim: int, layout: SegmentLayout) -> qe.EdgeConfig:
    # One row per message, MaxSim: a single query vector scores a window by its best message
    # (schema.DENSE). m=0: sealing builds no HNSW graph, so the search stays a scan; its first
    # pass reads the quantised copies (pinned in RAM), and the reader rescores what it keeps with
    # the float32 originals (cold on disk: edge_reader.hybrid).
    multivector = qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
    return qe.EdgeConfig(
        vectors={
            schema.DENSE: qe.EdgeVectorParams(
                size=dim,
                distance=qe.Distance.Cosine,
                multivector_config=multivector,
                memory=qe.Memory.Cold,
                quantization_config=scan_copy_config(layout.scan_copy),
            )
        },
        sparse_vectors={schema.SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cold)},
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10, payload_m=0),
        optimizers=qe.EdgeOptimizersConfig(
            default_segment_number=layout.segment_number,
            max_segment_size=layout.max_segment_kb,
            indexing_threshold=layout.indexing_threshold_kb,
        ),
        payload_memory=qe.Memory.Cold,
        id_tracker_memory=qe.Memory.Cold,
    )


QUANTILE = 0.99  # int8 bounds: the 0.99 quantile of the values, Qdrant's usual choice


def _binary(encoding: Any, query: Any) -> Callable[[], Any]:
    return lambda: qe.BinaryQuantizationConfig(encoding=encoding, query_encoding=query, memory=qe.Memory.Pinned)


def _turbo(bits: Any) -> Callable[[], Any]:
    return lambda: qe.TurboQuantQuantizationConfig(bits=bits, memory=qe.Memory.Pinned)


_BQ, _BQ_QUERY, _TQ = qe.BinaryQuantizationEncoding, qe.BinaryQuantizationQueryEncoding, qe.TurboQuantBitSize
# The copies measured on the dev queries (bench/quantisation.py, bench/results.md). Bytes per
# 384-d row in RAM: int8 384; 1 bit 48 (TurboQuant adds a few per row), 1.5 bits 72, 2 bits 96,
# TurboQuant 4 bits 192. A binary copy's query side is encoded as the name says: plain bits
# ("bq1"), or 4/8-bit scalars against the stored bits ("-q4", "-q8"). Shipped (SegmentLayout):
# "tq1", TurboQuant 1 bit, rescored from RESCORE_OVERSAMPLING (4) x the depth: its rescored top 10
# equalled the exact float32 scan's on all 119 dev queries, at about a seventh of int8's RAM (~23
# MB instead of ~154 MB for 400k message rows). "bq1-q4" did too at 4x with ~10% fewer bytes, but
# its asymmetric scan took ~1.5-2x tq1's time a query.
SCAN_COPIES: dict[str, Callable[[], Any]] = {
    "int8": lambda: qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=QUANTILE, memory=qe.Memory.Pinned),
    "bq1": _binary(_BQ.OneBit, _BQ_QUERY.Binary),
    "bq1-q4": _binary(_BQ.OneBit, _BQ_QUERY.Scalar4Bits),
    "bq1-q8": _binary(_BQ.OneBit, _BQ_QUERY.Scalar8Bits),
    "bq1.5": _binary(_BQ.OneAndHalfBits, _BQ_QUERY.Binary),
    "bq1.5-q8": _binary(_BQ.OneAndHalfBits, _BQ_QUERY.Scalar8Bits),
    "bq2": _binary(_BQ.TwoBits, _BQ_QUERY.Binary),
    "bq2-q8": _binary(_BQ.TwoBits, _BQ_QUERY.Scalar8Bits),
    "tq1": _turbo(_TQ.Bits1),
    "tq1.5": _turbo(_TQ.Bits1_5),
    "tq2": _turbo(_TQ.Bits2),
    "tq4": _turbo(_TQ.Bits4),
}


def sealed_layout(shard_dir: Path) -> bool:
    """True when the shard at ``shard_dir`` was created with ``_edge_config``'s graphless layout,
    so ``optimize()`` seals without building a graph. An older shard (Edge's defaults) is not
    optimised: its first optimisation would build HNSW over everything at once."""
    try:
        config = json.loads((shard_dir / EDGE_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    hnsw = config.get("hnsw_config") if isinstance(config, dict) else None
    return isinstance(hnsw, dict) and hnsw.get("m") == 0


def recorded_scan_copy(shard_dir: Path) -> Any:
    """The dense vectors' quantisation as the shard's ``edge_config.json`` records it (None when
    unreadable)."""
    try:
        config = json.loads((shard_dir / EDGE_CONFIG_FILE).read_text(encoding="utf-8"))
        return config["vectors"][schema.DENSE].get("quantization_config")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


_SCAN_COPY_RECORDS: dict[str, Any] = {}


def _scan_copy_record(name: str) -> Any:
    """How Edge records the scan copy ``name`` in a shard's config, learnt once per process from
    an empty shard made with it (Edge's own spelling, never one written out here)."""
    if name not in _SCAN_COPY_RECORDS:
        with tempfile.TemporaryDirectory(prefix="scan-copy-") as probe:
            shard = qe.EdgeShard.create(probe, _edge_config(1, SegmentLayout(scan_copy=name)))
            shard.close()
            _SCAN_COPY_RECORDS[name] = recorded_scan_copy(Path(probe))
    return _SCAN_COPY_RECORDS[name]


def _dense_rows(record: qe.Record) -> int:
    dense = record.vector.get(schema.DENSE) if isinstance(record.vector, dict) else None
    return len(dense) if isinstance(dense, list) else 0


def _meta_point(key: str, value: Any) -> qe.Point:
    return qe.Point(schema.meta_point_id(key), {}, schema.meta_payload(key, value))


def _room_windows(room_id: str) -> list[Any]:
    return conditions([schema.IS_WINDOW, schema.in_room(room_id)])


def _edge_point(point: WindowPoint) -> qe.Point:
    vectors: dict[str, Any] = {}
    if point.dense is not None:
        vectors[schema.DENSE] = point.dense  # checked_point's own fresh lists: no second copy
    if point.sparse is not None:
        vectors[schema.SPARSE] = edge_sparse(point.sparse)
    return qe.Point(point.point_id, vectors, point.payload)
