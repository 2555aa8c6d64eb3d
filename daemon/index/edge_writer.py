"""The writing side of the embedded index: the refresher's working shard and its published generations.

Owns: ``EdgeIndexWriter`` (the working shard ``<root>/work``, the lock ``<root>/work.lock``,
publishing ``generations/<n>`` + ``CURRENT`` and pruning to the newest three) and
``IndexLockedError``. It maps the plain data model of ``daemon/index/schema.py`` onto
``qdrant_edge`` points; its reads are ``daemon/index/queries.py`` over ``daemon/index/edge.py``.

Must not: open a shard another process may hold. Edge has no read-only open, and a second
``load()`` of a held shard can break the holder's next ``flush()`` (docs: shared/notes/index.md),
so the writer takes ``<root>/work.lock`` (``fcntl.flock``) for its whole life. Nothing on the read
side (``daemon.reader.service``, ``daemon.index.edge_reader``) may import this module. It does not decide
what to write.

Fault injection (the crash tests): the constructor's ``fail_writes(boundary, subject)`` callback
is asked before every write boundary (``reset``, ``write_windows``, ``set_cursor``, ``purge_room``, ``set_meta_entry``,
``commit``; ``subject`` is the room id, meta key or root) and makes it raise when it returns True.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

import qdrant_edge as qe

from daemon.index import schema
from daemon.index.edge import (
    CURRENT_FILE,
    WORK_DIR,
    EdgeQueries,
    conditions,
    copy_tree,
    edge_sparse,
    fsync_dir,
    generations_dir,
    read_current,
)
from daemon.index.port import IndexMeta, IndexWriteError, RoomCursor, WindowPoint
from daemon.index.queries import WriterQueries

LOCK_FILE = "work.lock"
UNPUBLISHED_MARKER = "work.unpublished"
KEEP_GENERATIONS = 3

_SCHEMA_TYPES = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
}


class IndexLockedError(RuntimeError):
    """Another writer holds this index root. Opening it too could corrupt the working shard."""


# --------------------------------------------------------------------------------------------
# Files: publishing


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _numbered_dirs(generations: Path) -> list[int]:
    if not generations.is_dir():
        return []
    return sorted(int(p.name) for p in generations.iterdir() if p.is_dir() and p.name.isdigit())


# --------------------------------------------------------------------------------------------
# Writer


class EdgeIndexWriter(EdgeQueries, WriterQueries):
    """The refresher's side: the working shard ``<root>/work``, published by ``commit()``.

    Holds ``<root>/work.lock`` from construction to ``close()``; a second writer on the same
    root raises ``IndexLockedError``. A work directory that exists but does not load (a crash in
    the middle of ``reset``) reads as "no meta", so the refresher rebuilds it with ``reset``;
    ``load_error`` then says why, for the journal.
    """

    def __init__(self, root: Path, fail_writes: Callable[[str, str], bool] | None = None):
        self.root = Path(root)
        self.work = self.root / WORK_DIR
        self._fail_writes = fail_writes
        self._shard: qe.EdgeShard | None = None
        self._meta: IndexMeta | None = None
        self.load_error: str | None = None  # why an existing work dir did not load, for the journal
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._acquire_lock()
        try:
            self._unpublished = (self.root / UNPUBLISHED_MARKER).exists()
            self._shard = self._load_work()
            if self._shard is not None:
                self._meta = self._index_meta()
        except BaseException:
            self.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------

    def _acquire_lock(self) -> int:
        path = self.root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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

    def _load_work(self) -> qe.EdgeShard | None:
        if not self.work.is_dir() or not any(self.work.iterdir()):
            return None
        try:
            return qe.EdgeShard.load(str(self.work))
        except Exception as exc:  # a half-made shard: read_meta() says None and reset() rebuilds it
            self.load_error = str(exc)
            return None

    def close(self) -> None:
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
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
        so a crash before commit() still gets published by the next run's commit()."""
        if not self._unpublished:
            marker = self.root / UNPUBLISHED_MARKER
            marker.touch()
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
        self._mark_unpublished()
        if self._shard is not None:
            shard, self._shard = self._shard, None
            shard.close()
        self._meta = None
        shutil.rmtree(self.work, ignore_errors=True)
        config = qe.EdgeConfig(
            vectors={schema.DENSE: qe.EdgeVectorParams(size=meta.dim, distance=qe.Distance.Cosine)},
            sparse_vectors={schema.SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )
        try:
            shard = qe.EdgeShard.create(str(self.work), config)
            for field, kind in schema.PAYLOAD_INDEXES.items():
                shard.update(qe.UpdateOperation.create_field_index(field, _SCHEMA_TYPES[kind]))
            shard.update(qe.UpdateOperation.upsert_points([_meta_point(schema.META_INDEX, schema.index_meta_value(meta))]))
            shard.flush()
        except Exception as exc:
            raise IndexWriteError(f"reset of {self.work} failed: {exc}") from exc
        self._shard = shard
        self._meta = meta

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
            scope = [qe.HasIdCondition(set(deletes)), *_room_windows(room_id)]
            operations.append(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=scope)))
        if operations:
            self._apply("write_windows", room_id, operations)

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
            [
                qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=_room_windows(room_id))),
                qe.UpdateOperation.delete_points([schema.meta_point_id(schema.cursor_key(room_id))]),
            ],
        )
        return doomed

    # -- publishing ------------------------------------------------------------------------

    def commit(self) -> None:
        """Flush; then, if anything was written since the last publish, publish a generation."""
        self._check_injected("commit", str(self.root))
        shard = self._require_writable("commit", str(self.root))
        try:
            shard.flush()
        except Exception as exc:
            raise IndexWriteError(f"flush of {self.work} failed: {exc}") from exc
        if not self._unpublished:
            return
        try:
            self._publish()
        except OSError as exc:
            raise IndexWriteError(f"publishing a generation of {self.work} failed: {exc}") from exc

    def _publish(self) -> None:
        generations = generations_dir(self.root)
        generations.mkdir(exist_ok=True)
        for stale in generations.glob("*.tmp"):  # left by a crash; we hold the lock, so not in use
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        numbers = _numbered_dirs(generations)
        current = read_current(self.root) or 0
        number = max([current, *numbers]) + 1
        staging = generations / f"{number}.tmp"
        copy_tree(self.work, staging)
        os.rename(staging, generations / str(number))
        fsync_dir(generations)
        _write_atomically(generations / CURRENT_FILE, f"{number}\n")
        (self.root / UNPUBLISHED_MARKER).unlink(missing_ok=True)
        fsync_dir(self.root)
        self._unpublished = False
        for old in _numbered_dirs(generations)[:-KEEP_GENERATIONS]:
            shutil.rmtree(generations / str(old), ignore_errors=True)


def _meta_point(key: str, value: Any) -> qe.Point:
    return qe.Point(schema.meta_point_id(key), {}, schema.meta_payload(key, value))


def _room_windows(room_id: str) -> list[qe.FieldCondition]:
    return conditions([schema.IS_WINDOW, schema.in_room(room_id)])


def _edge_point(point: WindowPoint) -> qe.Point:
    vectors: dict[str, Any] = {}
    if point.dense is not None:
        vectors[schema.DENSE] = point.dense
    if point.sparse is not None:
        vectors[schema.SPARSE] = edge_sparse(point.sparse)
    return qe.Point(point.point_id, vectors, point.payload)
