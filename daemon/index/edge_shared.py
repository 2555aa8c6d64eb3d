"""What both sides of the embedded index (Qdrant Edge, qdrant-edge-py) share: reads, not writes.

Owns: the on-disk names both sides agree on (``WORK_DIR``, ``GENERATIONS_DIR``, ``CURRENT_FILE``)
and ``read_current`` (which generation ``generations/CURRENT`` names); the ``qdrant_edge`` filter
builders (``_match``, ``_range``, ``_IS_WINDOW``, ``_eligible`` — the mapping of
``schema.eligibility`` ...), the paged and ordered scrolls (``_scroll_exact``: exact
``(ts_start, chunk_id)`` order across equal ts_start values); the meta point reads (``_get_meta``,
``_meta_payloads``) and the per-room window counts (``_room_window_counts``); and
``_copy_tree``, the hole-keeping copy of a shard directory that the writer publishes with and the
reader takes its private copy with.

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
from daemon.ports import SearchFilter, SparseVector

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
    """``schema.eligibility`` as Edge conditions, or None when the filter matches nothing."""
    conditions = schema.eligibility(flt)
    if conditions is None:
        return None
    return [_condition(*condition) for condition in conditions]


def _condition(kind: str, field: str, argument: Any) -> qe.FieldCondition:
    if kind == "any":
        return _match_any(field, argument)
    if kind == "range":
        return _range(field, **argument)
    return _match(field, argument)


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


def _scroll_exact(
    shard: qe.EdgeShard, conditions: list[Any], bound: dict[str, int] | None, descending: bool, limit: int
) -> list[qe.Record]:
    """Up to ``limit`` windows matching ``conditions`` and ``bound`` (on ts_start), exactly in
    ``schema.listing_key`` order. Edge orders by ts_start alone, so when the page is full the run
    of its last ts_start is read whole and the order settled here: a page boundary inside equal
    ts_start values neither repeats nor skips a window, and never picks one by chance."""
    if limit <= 0:
        return []
    ranged = [*conditions, _range(schema.TS_START, **bound)] if bound else conditions
    page = _scroll_ordered(shard, ranged, schema.TS_START, descending, limit)
    if len(page) >= limit:
        starts = [schema.listing_key(r.payload, r.id)[0] for r in page]
        edge_ts = min(starts) if descending else max(starts)
        page = [r for r, start in zip(page, starts) if start != edge_ts]
        page += _scroll_all(shard, [*conditions, _range(schema.TS_START, gte=edge_ts, lte=edge_ts)])
    page.sort(key=lambda r: schema.listing_key(r.payload, r.id), reverse=descending)
    return page[:limit]


def _get_meta(shard: qe.EdgeShard, key: str) -> Any | None:
    records = shard.retrieve([schema.meta_point_id(key)], with_payload=True, with_vector=False)
    return schema.meta_value_of((record.payload for record in records), key)


def _meta_payloads(shard: qe.EdgeShard) -> list[dict[str, Any]]:
    """The payloads of every meta point (cursors, purge records, run summary, index meta)."""
    return [record.payload or {} for record in _scroll_all(shard, [_IS_META])]


def _room_window_counts(shard: qe.EdgeShard) -> dict[str, int]:
    """{room_id: windows stored} (empty layout windows included), exact, through the room_id
    keyword index."""
    limit = 1024
    while True:
        response = shard.facet(
            qe.FacetRequest(schema.ROOM_ID, limit=limit, exact=True, filter=qe.Filter(must=[_IS_WINDOW]))
        )
        hits = list(response.hits)
        if len(hits) < limit:
            return {str(hit.value): int(hit.count) for hit in hits}
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
