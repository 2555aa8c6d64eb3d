"""The embedded index: Qdrant Edge (qdrant-edge-py), one writer process, readers on private copies.

Owns: ``EdgeIndexWriter`` (the refresher's working shard ``<root>/work`` and the published
generations ``<root>/generations/<n>`` + ``CURRENT``) and ``EdgeIndexReader`` (a private copy of
one published generation). Both map the plain data model of ``daemon/index/schema.py`` onto
``qdrant_edge`` types.

Must not: open a shard another process may hold. Edge has no read-only open, and a second
``load()`` of a held shard can break the holder's next ``flush()`` (docs: shared/notes/index.md),
so the writer takes ``<root>/work.lock`` (``fcntl.flock``) for its whole life, and the reader only
ever loads a copy it made itself. Neither decides what to write or search for.

Layout under ``root``::

    work/                  the working shard (writer only)
    work.lock              flock held by the one writer
    work.unpublished       exists while work has writes no generation holds yet
    generations/<n>/       immutable published copies of work (newest 3 kept)
    generations/CURRENT    "<n>\\n", replaced atomically

Fault injection (tests, and the refresher's tests): ``EdgeIndexWriter.inject_write_failure`` is
the number of next ``write_windows`` calls that raise ``IndexWriteError`` before touching the
shard; the constructor's ``fail_writes(boundary, subject)`` callback is asked before every write
boundary (``reset``, ``write_windows``, ``set_cursor``, ``purge_room``, ``set_meta_entry``,
``commit``; ``subject`` is the room id, meta key or root) and makes it raise when it returns True.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import math
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import qdrant_edge as qe

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

WORK_DIR = "work"
LOCK_FILE = "work.lock"
UNPUBLISHED_MARKER = "work.unpublished"
GENERATIONS_DIR = "generations"
CURRENT_FILE = "CURRENT"
KEEP_GENERATIONS = 3

LEG_DENSE = "dense"
LEG_LEXICAL = "lexical"

_SCROLL_PAGE = 1000
_PREFETCH_FLOOR = 50
_COPY_CHUNK = 1 << 20
_OPEN_ATTEMPTS = 5

_SCHEMA_TYPES = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
}


class IndexLockedError(RuntimeError):
    """Another writer holds this index root. Opening it too could corrupt the working shard."""


# --------------------------------------------------------------------------------------------
# Filters and queries shared by the writer and the reader


def _match(field: str, value: str | int) -> qe.FieldCondition:
    return qe.FieldCondition(field, match=qe.MatchValue(value))


def _match_any(field: str, values: Iterable[str]) -> qe.FieldCondition:
    return qe.FieldCondition(field, match=qe.MatchAny(list(values)))


def _range(field: str, **bounds: int) -> qe.FieldCondition:
    return qe.FieldCondition(field, range=qe.RangeFloat(**bounds))


_IS_WINDOW = _match(schema.KIND, schema.KIND_WINDOW)
_IS_META = _match(schema.KIND, schema.KIND_META)


def _room_windows(room_id: str) -> list[qe.FieldCondition]:
    return [_IS_WINDOW, _match(schema.ROOM_ID, room_id)]


def _eligible(flt: SearchFilter) -> list[qe.FieldCondition] | None:
    """The search eligibility conditions, or None when the filter matches nothing."""
    if flt.room_ids is not None and len(flt.room_ids) == 0:
        return None
    conditions = [_IS_WINDOW, _range(schema.N_MESSAGES, gte=1)]
    if flt.room_ids is not None:
        conditions.append(_match_any(schema.ROOM_ID, flt.room_ids))
    if flt.senders:
        conditions.append(_match_any(schema.SENDERS, flt.senders))
    if flt.after_ms is not None:
        conditions.append(_range(schema.TS_END, gte=flt.after_ms))
    if flt.before_ms is not None:
        conditions.append(_range(schema.TS_START, lte=flt.before_ms))
    return conditions


def _scroll_all(shard: qe.EdgeShard, conditions: list[Any], any_of: list[Any] | None = None) -> list[qe.Record]:
    """Every point matching all ``conditions`` and at least one of ``any_of`` (when given), all
    pages, payloads included."""
    records: list[qe.Record] = []
    offset = None
    while True:
        page, offset = shard.scroll(
            qe.ScrollRequest(
                offset=offset,
                limit=_SCROLL_PAGE,
                filter=qe.Filter(must=conditions, should=any_of),
                with_payload=True,
                with_vector=False,
            )
        )
        records.extend(page)
        if offset is None:
            return records


def _scroll_ordered(
    shard: qe.EdgeShard, conditions: list[Any], key: str, descending: bool, limit: int
) -> list[qe.Record]:
    page, _ = shard.scroll(
        qe.ScrollRequest(
            limit=limit,
            filter=qe.Filter(must=conditions),
            with_payload=True,
            with_vector=False,
            order_by=qe.OrderBy(key, direction=qe.Direction.Desc if descending else qe.Direction.Asc),
        )
    )
    return page


def _listing_key(payload: dict[str, Any], point_id: Any) -> tuple[int, str]:
    return (int(payload.get(schema.TS_START, 0)), str(payload.get(schema.CHUNK_ID) or point_id))


def _get_meta(shard: qe.EdgeShard, key: str) -> Any | None:
    records = shard.retrieve([schema.meta_point_id(key)], with_payload=True, with_vector=False)
    for record in records:
        payload = record.payload or {}
        if payload.get(schema.KIND) == schema.KIND_META and payload.get(schema.META_KEY) == key:
            return payload.get(schema.META_VALUE)
    return None


def _meta_from(value: Any) -> IndexMeta | None:
    if not isinstance(value, dict):
        return None
    try:
        return IndexMeta(
            model=str(value["model"]),
            dim=int(value["dim"]),
            chat_version=str(value["chat_version"]),
            corpus=str(value.get("corpus", schema.CORPUS_CHAT)),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _distinct_rooms(shard: qe.EdgeShard) -> set[str]:
    """Room ids of all stored windows, through the room_id keyword index."""
    limit = 1024
    while True:
        response = shard.facet(
            qe.FacetRequest(schema.ROOM_ID, limit=limit, exact=True, filter=qe.Filter(must=[_IS_WINDOW]))
        )
        hits = list(response.hits)
        if len(hits) < limit:
            return {str(hit.value) for hit in hits}
        limit *= 4


def _edge_sparse(sparse: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(sparse.indices), [float(v) for v in sparse.values])


# --------------------------------------------------------------------------------------------
# Files: generations, sparse copies, fsync


def _generations(root: Path) -> Path:
    return root / GENERATIONS_DIR


def read_current(root: Path) -> int | None:
    """The published generation number CURRENT names, or None when nothing is published."""
    try:
        text = (_generations(root) / CURRENT_FILE).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise RuntimeError(f"{_generations(root) / CURRENT_FILE} holds {text!r}, not a generation number")
    return int(text)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_file_sparse(src: Path, dst: Path, durable: bool) -> None:
    """Copy a file keeping its holes: Edge preallocates 32 MiB mmap pages and WAL segments that
    are mostly holes, and a plain copy would write every one of those zero bytes."""
    src_fd = os.open(src, os.O_RDONLY)
    try:
        size = os.fstat(src_fd).st_size
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for start, end in _data_extents(src_fd, size):
                position = start
                while position < end:
                    chunk = os.pread(src_fd, min(_COPY_CHUNK, end - position), position)
                    if not chunk:
                        break
                    os.pwrite(dst_fd, chunk, position)
                    position += len(chunk)
            os.ftruncate(dst_fd, size)
            if durable:
                os.fsync(dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    shutil.copymode(src, dst)


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    extents: list[tuple[int, int]] = []
    position = 0
    try:
        while position < size:
            try:
                start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole remains
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            extents.append((start, end))
            position = end
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
        return [(0, size)]  # the filesystem cannot report holes: copy everything
    return extents


def _copy_tree(src: Path, dst: Path, durable: bool = True) -> None:
    """Copy a shard directory, holes kept; ``durable`` fsyncs every file and directory (a
    published generation must survive a power cut; a reader's throwaway copy need not).
    ``dst`` must not exist."""
    if not src.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such shard directory", str(src))
    dst.mkdir(parents=True)

    def fail(exc: OSError) -> None:  # os.walk skips unreadable or vanished dirs unless told
        raise exc

    for dirpath, dirnames, filenames in os.walk(src, onerror=fail):
        relative = Path(dirpath).relative_to(src)
        target_dir = dst / relative
        for name in dirnames:
            (target_dir / name).mkdir()
        for name in filenames:
            _copy_file_sparse(Path(dirpath) / name, target_dir / name, durable)
    if durable:
        for dirpath, _, _ in os.walk(dst):
            _fsync_dir(Path(dirpath))


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _numbered_dirs(generations: Path) -> list[int]:
    if not generations.is_dir():
        return []
    return sorted(int(p.name) for p in generations.iterdir() if p.is_dir() and p.name.isdigit())


# --------------------------------------------------------------------------------------------
# Writer


class EdgeIndexWriter:
    """The refresher's side: the working shard ``<root>/work``, published by ``commit()``.

    Holds ``<root>/work.lock`` from construction to ``close()``; a second writer on the same
    root raises ``IndexLockedError``. A work directory that exists but does not load (a crash in
    the middle of ``reset``) reads as "no meta", so the refresher rebuilds it with ``reset``;
    ``load_error`` then says why, for the journal.
    """

    def __init__(self, root: Path, fail_writes: Callable[[str, str], bool] | None = None):
        self.root = Path(root)
        self.work = self.root / WORK_DIR
        self.inject_write_failure = 0
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
                self._meta = _meta_from(_get_meta(self._shard, schema.META_INDEX))
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

    def __enter__(self) -> EdgeIndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            _fsync_dir(self.root)
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
        if not isinstance(meta.dim, int) or meta.dim <= 0:
            raise ValueError(f"IndexMeta.dim must be a positive integer, got {meta.dim!r}")
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
            shard.update(qe.UpdateOperation.upsert_points([_meta_point(schema.META_INDEX, dataclasses.asdict(meta))]))
            shard.flush()
        except Exception as exc:
            raise IndexWriteError(f"reset of {self.work} failed: {exc}") from exc
        self._shard = shard
        self._meta = meta

    def get_meta_entry(self, key: str) -> Any | None:
        return _get_meta(self._require_shard(), key)

    def set_meta_entry(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"meta key must be a non-empty string, got {key!r}")
        if key == schema.META_INDEX:
            raise ValueError("meta key 'index' is written only by reset()")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"meta entry {key!r}: value is not JSON-serialisable: {exc}") from None
        self._check_injected("set_meta_entry", key)
        self._apply("set_meta_entry", key, [qe.UpdateOperation.upsert_points([_meta_point(key, value)])])

    # -- cursors ---------------------------------------------------------------------------

    def get_cursor(self, room_id: str) -> RoomCursor | None:
        return schema.cursor_from_value(_get_meta(self._require_shard(), schema.cursor_key(room_id)), room_id)

    def set_cursor(self, cursor: RoomCursor) -> None:
        if not cursor.room_id:
            raise ValueError("RoomCursor.room_id must not be empty")
        self._check_injected("set_cursor", cursor.room_id)
        point = _meta_point(schema.cursor_key(cursor.room_id), schema.cursor_value(cursor))
        self._apply("set_cursor", cursor.room_id, [qe.UpdateOperation.upsert_points([point])])

    # -- windows ---------------------------------------------------------------------------

    def write_windows(self, room_id: str, upserts: Sequence[WindowPoint], delete_ids: Sequence[str]) -> None:
        if self.inject_write_failure > 0:
            self.inject_write_failure -= 1
            raise IndexWriteError(f"write_windows for {room_id} failed (injected)")
        self._check_injected("write_windows", room_id)
        self._require_writable("write_windows", room_id)
        dim = self._meta.dim if self._meta is not None else None
        if dim is None:
            raise IndexWriteError(f"write_windows for {room_id}: index has no meta, call reset(meta) first")
        # Validate everything first: Edge applies a batch point by point and stops at the first
        # bad one, so a late error would leave the earlier points written.
        points = [_window_point(room_id, point, dim) for point in upserts]
        deletes = [_parse_uuid(room_id, "delete_ids", pid) for pid in delete_ids]
        operations = []
        if points:
            operations.append(qe.UpdateOperation.upsert_points(points))
        if deletes:
            # Scoped to this room's windows: a stray id can never remove meta or another room.
            scope = [qe.HasIdCondition(set(deletes)), *_room_windows(room_id)]
            operations.append(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=scope)))
        if operations:
            self._apply("write_windows", room_id, operations)

    def get_windows(self, point_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not point_ids:
            return []
        wanted = [str(uuid.UUID(str(pid))) for pid in point_ids]
        records = self._require_shard().retrieve(wanted, with_payload=True, with_vector=False)
        by_id = {str(r.id): r.payload for r in records if (r.payload or {}).get(schema.KIND) == schema.KIND_WINDOW}
        return [by_id[pid] for pid in wanted if pid in by_id]

    def windows_with_events(self, room_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not event_ids:
            return []
        ids = list(dict.fromkeys(event_ids))
        records = _scroll_all(
            self._require_shard(),
            _room_windows(room_id),
            any_of=[_match_any(schema.EVENT_IDS, ids), _match_any(schema.REDACTED_IDS, ids)],
        )
        return [r.payload for r in sorted(records, key=lambda r: _listing_key(r.payload, r.id))]

    def windows_in_span(self, room_id: str, ts_from: int, ts_to: int) -> list[dict[str, Any]]:
        conditions = [*_room_windows(room_id), _range(schema.TS_END, gte=ts_from), _range(schema.TS_START, lte=ts_to)]
        records = _scroll_all(self._require_shard(), conditions)
        return [r.payload for r in sorted(records, key=lambda r: _listing_key(r.payload, r.id))]

    def rooms_with_data(self) -> set[str]:
        shard = self._require_shard()
        rooms = _distinct_rooms(shard)
        prefix = schema.cursor_key("")
        for record in _scroll_all(shard, [_IS_META]):
            key = (record.payload or {}).get(schema.META_KEY, "")
            if isinstance(key, str) and key.startswith(prefix) and len(key) > len(prefix):
                rooms.add(key[len(prefix) :])
        return rooms

    def count_windows(self, room_id: str | None = None) -> int:
        conditions = [_IS_WINDOW] if room_id is None else _room_windows(room_id)
        return self._require_shard().count(qe.CountRequest(exact=True, filter=qe.Filter(must=conditions)))

    def purge_room(self, room_id: str) -> int:
        self._check_injected("purge_room", room_id)
        shard = self._require_writable("purge_room", room_id)
        try:
            doomed = shard.count(qe.CountRequest(exact=True, filter=qe.Filter(must=_room_windows(room_id))))
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

    def published_generation(self) -> int | None:
        return read_current(self.root)

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
        generations = _generations(self.root)
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
        _copy_tree(self.work, staging)
        os.rename(staging, generations / str(number))
        _fsync_dir(generations)
        _write_atomically(generations / CURRENT_FILE, f"{number}\n")
        (self.root / UNPUBLISHED_MARKER).unlink(missing_ok=True)
        _fsync_dir(self.root)
        self._unpublished = False
        for old in _numbered_dirs(generations)[:-KEEP_GENERATIONS]:
            shutil.rmtree(generations / str(old), ignore_errors=True)


def _meta_point(key: str, value: Any) -> qe.Point:
    payload = {schema.KIND: schema.KIND_META, schema.META_KEY: key, schema.META_VALUE: value}
    return qe.Point(schema.meta_point_id(key), {}, payload)


def _parse_uuid(room_id: str, field: str, value: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"write_windows for {room_id}: {field} holds {value!r}, not a UUID string") from None


def _window_point(room_id: str, point: WindowPoint, dim: int) -> qe.Point:
    point_id = _parse_uuid(room_id, "point_id", point.point_id)
    payload = dict(point.payload)
    where = f"write_windows for {room_id}: window {point_id}"
    if payload.get(schema.ROOM_ID) != room_id:
        raise ValueError(f"{where}: payload.room_id is {payload.get(schema.ROOM_ID)!r}, expected {room_id!r}")
    if payload.setdefault(schema.KIND, schema.KIND_WINDOW) != schema.KIND_WINDOW:
        raise ValueError(f"{where}: payload.kind is {payload[schema.KIND]!r}, expected 'window'")
    payload.setdefault(schema.CORPUS, schema.CORPUS_CHAT)
    vectors: dict[str, Any] = {}
    if point.dense is not None:
        dense = [float(x) for x in point.dense]
        if len(dense) != dim:
            raise ValueError(f"{where}: dense has {len(dense)} dimensions, the index has {dim}")
        if not all(math.isfinite(x) for x in dense):
            raise ValueError(f"{where}: dense holds a NaN or infinite value")
        vectors[schema.DENSE] = dense
        sparse = point.sparse
        if sparse is not None and sparse.indices:
            if len(sparse.indices) != len(sparse.values):
                raise ValueError(f"{where}: sparse has {len(sparse.indices)} indices but {len(sparse.values)} values")
            if len(set(sparse.indices)) != len(sparse.indices) or min(sparse.indices) < 0:
                raise ValueError(f"{where}: sparse indices must be distinct and non-negative")
            vectors[schema.SPARSE] = _edge_sparse(sparse)
    return qe.Point(point_id, vectors, payload)


# --------------------------------------------------------------------------------------------
# Reader


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
        self._meta = _meta_from(_get_meta(shard, schema.META_INDEX))
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
            return cls(shard, root, copy_dir, number)
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
        leg_limit = max(limit * 4, _PREFETCH_FLOOR)
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
        """Eligible windows in (ts_start, chunk_id) order, strictly after ``after``. Exact with
        any number of equal ts_start: Edge orders by ts_start only, so each ts_start group that
        the page touches at its edges is read whole and ordered by chunk_id here."""
        conditions = _eligible(flt)
        if conditions is None or limit <= 0:
            return []
        shard = self._require_shard()
        rows: list[tuple[tuple[int, str], dict[str, Any]]] = []
        later = conditions
        if after is not None:
            after_key = (int(after[0]), str(after[1]))
            tied = _scroll_all(shard, [*conditions, _range(schema.TS_START, gte=after_key[0], lte=after_key[0])])
            rows += [(k, r.payload) for r in tied if (k := _listing_key(r.payload, r.id)) > after_key]
            later = [*conditions, _range(schema.TS_START, gt=after_key[0])]
        if len(rows) < limit:
            batch = _scroll_ordered(shard, later, schema.TS_START, descending=False, limit=limit - len(rows))
            if batch:
                edge_ts = max(_listing_key(r.payload, r.id)[0] for r in batch)
                rows += [(k, r.payload) for r in batch if (k := _listing_key(r.payload, r.id))[0] < edge_ts]
                edge_group = _scroll_all(shard, [*conditions, _range(schema.TS_START, gte=edge_ts, lte=edge_ts)])
                rows += [(_listing_key(r.payload, r.id), r.payload) for r in edge_group]
        rows.sort(key=lambda row: row[0])
        return [payload for _, payload in rows[:limit]]

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
        starting after it, oldest first."""
        shard = self._require_shard()
        base = [*_room_windows(room_id), _range(schema.N_MESSAGES, gte=1)]
        rows: list[qe.Record] = []
        if before > 0:
            rows += _scroll_ordered(shard, [*base, _range(schema.TS_START, lt=ts)], schema.TS_START, True, before)
        if after > 0:
            rows += _scroll_ordered(shard, [*base, _range(schema.TS_START, gt=ts)], schema.TS_START, False, after)
        return [r.payload for r in sorted(rows, key=lambda r: _listing_key(r.payload, r.id))]

    def window_counts(self) -> dict[str, int]:
        """{room_id: windows stored} (empty layout windows included), exact."""
        shard = self._require_shard()
        is_window = qe.Filter(must=[qe.FieldCondition(schema.KIND, match=qe.MatchValue(schema.KIND_WINDOW))])
        limit = 1024
        while True:
            hits = list(shard.facet(qe.FacetRequest(schema.ROOM_ID, limit=limit, exact=True, filter=is_window)).hits)
            if len(hits) < limit:
                return {str(hit.value): int(hit.count) for hit in hits}
            limit *= 4

    def cursors(self) -> dict[str, RoomCursor]:
        """Every room cursor in this generation."""
        shard = self._require_shard()
        is_meta = qe.Filter(must=[qe.FieldCondition(schema.KIND, match=qe.MatchValue(schema.KIND_META))])
        payloads: list[Any] = []
        offset = None
        while True:
            page, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=1000, filter=is_meta, with_payload=True, with_vector=False)
            )
            payloads.extend(record.payload for record in page)
            if offset is None:
                return schema.cursors_from_meta(payloads)

    def room_aliases(self) -> dict[str, str]:
        """{room_id: alias} for every stored room whose newest window carries an alias."""
        shard = self._require_shard()
        if self._aliases is None:
            aliases: dict[str, str] = {}
            for room_id in sorted(_distinct_rooms(shard)):
                newest = _scroll_ordered(shard, _room_windows(room_id), schema.TS_START, True, 1)
                alias = newest[0].payload.get(schema.ROOM_ALIAS) if newest else None
                if alias:
                    aliases[room_id] = str(alias)
            self._aliases = aliases
        return dict(self._aliases)
