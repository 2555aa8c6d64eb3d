"""What both sides of the embedded index (Qdrant Edge, qdrant-edge-py) share: reads, not writes.

Owns: the on-disk names both sides agree on (``WORK_DIR``, ``GENERATIONS_DIR``, ``CURRENT_FILE``)
and ``read_current`` (which generation ``generations/CURRENT`` names); the ``qdrant_edge`` filter
builders (``_match``, ``_range``, ``_IS_WINDOW``, ``_eligible`` ...), the paged and ordered scrolls
and the ``(ts_start, chunk_id)`` listing key; the meta point reads (``_get_meta``, ``_meta_from``);
and ``_copy_tree``, the hole-keeping copy of a shard directory that the writer publishes with and
the reader takes its private copy with.

Must not: write, load or lock a shard, or change anything under an index root. The one thing
here that writes files is ``_copy_tree``, and only into a directory it creates itself. It must not
import ``daemon.index.edge_writer`` or ``daemon.index.edge_reader``: both import it.

Layout under an index root::

    work/                  the working shard (writer only)
    work.lock              flock held by the one writer
    work.unpublished       exists while work has writes no generation holds yet
    generations/<n>/       immutable published copies of work (newest 3 kept)
    generations/CURRENT    "<n>\\n", replaced atomically
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

import qdrant_edge as qe

from daemon.index import schema
from daemon.ports import IndexMeta, SearchFilter, SparseVector

WORK_DIR = "work"
GENERATIONS_DIR = "generations"
CURRENT_FILE = "CURRENT"

_SCROLL_PAGE = 1000
_COPY_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------
# Filters and queries


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
