"""What both sides of the embedded index (Qdrant Edge, qdrant-edge-py) share: reads, not writes.

Owns: the on-disk names both sides agree on (``WORK_DIR``, ``GENERATIONS_DIR``, ``CURRENT_FILE``)
and ``read_current`` (which generation ``generations/CURRENT`` names); ``EdgeQueries``, the
primitives of ``daemon.index.queries.IndexQueries`` over one ``qdrant_edge`` shard (plain
conditions mapped by ``conditions``); and ``copy_tree``, the hole-keeping copy of a shard
directory that the writer publishes with and the reader takes its private copy with.

Must not: write, load or lock a shard, or change anything under an index root. The one thing
here that writes files is ``copy_tree``, and only into a directory it creates itself (or one its
caller just made); it follows no link (``daemon.safe_files``). It must not
import ``daemon.index.edge_writer`` or ``daemon.index.edge_reader``: both import it.

Layout under an index root::

    work/                  the working shard (writer only)
    work.lock              flock held by the one writer
    work.unpublished       exists while work has writes no generation holds yet
    rebuild/               a full rebuild built beside work (writer only), swapped in when complete
    work.next, work.old, work.compact   transient during a swap or a compaction (writer only)
    generations/<n>/       immutable published copies of work (only CURRENT's is kept)
    generations/CURRENT    "<n>\\n", replaced atomically
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Sequence

import qdrant_edge as qe

from daemon import native
from daemon.index import schema
from daemon.index.port import SparseVector
from daemon.index.queries import IndexQueries
from daemon.index.reflink import clone_file
from daemon.safe_files import DIR_MODE, FILE_MODE, PlantedLinkError, fsync_dir, make_dir, open_no_follow, read_text

WORK_DIR = "work"
GENERATIONS_DIR = "generations"
CURRENT_FILE = "CURRENT"

_SCROLL_PAGE = 1000
# 64 KB writes, not larger: the page cache keeps a copy's pages in folios of the size they were
# written in, and a reader's fault on a mapped file maps the whole folio. Copied in 1 MB writes,
# each float32 vector a search rescored mapped ~700 KB into the reader; in 64 KB ones, what the
# kernel's fault-around maps anyway (bench: reader_peak_rss_mb_100k).
_COPY_CHUNK = 1 << 16


# --------------------------------------------------------------------------------------------
# Conditions and the primitives of ``IndexQueries``


# ``list[Any]``: qe.Filter takes an invariant list of its own condition union, which a list of one
# condition class does not satisfy for the type checker.
def conditions(plain: Iterable[schema.Condition]) -> list[Any]:
    """Plain ``schema.Condition`` values as Edge field conditions."""
    out = []
    for kind, field, argument in plain:
        if kind == "any":
            out.append(qe.FieldCondition(field, match=qe.MatchAny(list(argument))))
        elif kind == "range":
            out.append(qe.FieldCondition(field, range=qe.RangeFloat(**argument)))
        else:
            out.append(qe.FieldCondition(field, match=qe.MatchValue(argument)))
    return out


def _filter(must: list[schema.Condition], should: list[schema.Condition] | None = None) -> qe.Filter:
    return qe.Filter(must=conditions(must), should=conditions(should) if should else None)


def edge_sparse(sparse: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(sparse.indices), [float(v) for v in sparse.values])


class EdgeQueries(IndexQueries):
    """``IndexQueries``' primitives over the one shard ``_require_shard()`` returns."""

    def _require_shard(self) -> qe.EdgeShard:
        raise NotImplementedError

    def _present(self) -> bool:
        self._require_shard()  # a closed or never-reset index is an error, not an empty one
        return True

    def _scroll(self, must: list[schema.Condition], should: list[schema.Condition] | None = None) -> list[qe.Record]:
        shard, flt = self._require_shard(), _filter(must, should)
        records: list[qe.Record] = []
        offset = None
        while True:
            page, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=_SCROLL_PAGE, filter=flt, with_payload=True, with_vector=False)
            )
            records.extend(page)
            if offset is None:
                return records

    def _scroll_fields(self, must: list[schema.Condition], fields: Sequence[str]) -> list[qe.Record]:
        shard, flt = self._require_shard(), _filter(must)
        records: list[qe.Record] = []
        offset = None
        while True:
            page, offset = shard.scroll(
                qe.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=flt, with_payload=list(fields), with_vector=False
                )
            )
            records.extend(page)
            if offset is None:
                return records

    def _scroll_by_ts(
        self, must: list[schema.Condition], descending: bool, limit: int, field: str = schema.TS_START
    ) -> list[qe.Record]:
        direction = qe.Direction.Desc if descending else qe.Direction.Asc
        page, _ = self._require_shard().scroll(
            qe.ScrollRequest(
                limit=limit,
                filter=_filter(must),
                with_payload=True,
                with_vector=False,
                order_by=qe.OrderBy(field, direction=direction),
            )
        )
        return page

    def _count(self, must: list[schema.Condition]) -> int:
        return self._require_shard().count(qe.CountRequest(exact=True, filter=_filter(must)))

    def _room_counts(self) -> dict[str, int]:
        shard, limit = self._require_shard(), 1024
        while True:
            response = shard.facet(
                qe.FacetRequest(schema.ROOM_ID, limit=limit, exact=True, filter=_filter([schema.IS_WINDOW]))
            )
            hits = list(response.hits)
            if len(hits) < limit:
                return {str(hit.value): int(hit.count) for hit in hits}
            limit *= 4

    def _retrieve(self, ids: Sequence[str]) -> list[qe.Record]:
        return self._require_shard().retrieve(list(ids), with_payload=True, with_vector=False)

    def _retrieve_dense(self, ids: Sequence[str]) -> list[tuple[Any, dict[str, Any] | None, Any]]:
        records = self._require_shard().retrieve(list(ids), with_payload=True, with_vector=[schema.DENSE])
        return [
            (r.id, r.payload, (r.vector or {}).get(schema.DENSE) if isinstance(r.vector, dict) else None)
            for r in records
        ]


# --------------------------------------------------------------------------------------------
# Files: generations, sparse copies, fsync


def generations_dir(root: Path) -> Path:
    return root / GENERATIONS_DIR


def read_current(root: Path) -> int | None:
    """The published generation number CURRENT names, or None when nothing is published. A
    link at CURRENT is refused (``PlantedLinkError``), never read through."""
    path = generations_dir(root) / CURRENT_FILE
    try:
        text = read_text(path, encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise RuntimeError(f"{path} is not ASCII text, not a generation number") from None
    if not text.isdigit():
        raise RuntimeError(f"{path} holds {text!r}, not a generation number")
    return int(text)


def _copy_file_sparse(src: Path, dst: Path) -> bool:
    """Copy a regular file keeping its holes: Edge preallocates 32 MiB mmap pages and WAL
    segments that are mostly holes, and a plain copy would write every one of those zero bytes.
    Where the filesystem can, clone it instead (``reflink``: no data written). Neither end is
    opened through a link; the copy gets ``FILE_MODE``, not the source's mode. True when cloned."""
    src_fd = open_no_follow(src, os.O_RDONLY)
    try:
        size = os.fstat(src_fd).st_size
        dst_fd = open_no_follow(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            os.fchmod(dst_fd, FILE_MODE)
            cloned = clone_file(src_fd, dst_fd)
            if not cloned:
                for start, end in _data_extents(src_fd, size):
                    position = start
                    while position < end:
                        chunk = os.pread(src_fd, min(_COPY_CHUNK, end - position), position)
                        if not chunk:
                            break
                        os.pwrite(dst_fd, chunk, position)
                        position += len(chunk)
                # The clone has the source's size already; a truncate of it to a size that ends
                # inside a block would zero that block's tail, a copy on write of it in every file.
                os.ftruncate(dst_fd, size)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return cloned


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


def copy_tree(src: Path, dst: Path, durable: bool = True) -> str:
    """Copy a shard directory, holes kept; ``durable`` makes the copy survive a power cut before
    returning (a published generation must; a reader's throwaway copy need not): one ``syncfs``
    of the target's filesystem, not an fsync a file and a directory. A shard is hundreds of small
    files, and on a filesystem that clones them each fsync is a journal commit and a cache flush
    for a few blocks of metadata: those commits, not the clones, were the time of a publish.
    Where libc has no ``syncfs`` every file and directory is fsynced as before.
    ``dst`` must not exist, or be an empty directory the caller just made (``mkdtemp``).
    A link anywhere in ``src`` is refused (``PlantedLinkError``): Edge makes none, and following
    one would publish or serve a file from outside the index. Modes are ``DIR_MODE`` and
    ``FILE_MODE`` whatever the source's. Returns how: ``reflink`` (every file cloned, see
    ``reflink``), ``copy`` (none could be) or ``mixed``."""
    src, dst = Path(src), Path(dst)
    try:
        source_mode = os.lstat(src).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such shard directory", str(src)) from None
    if stat.S_ISLNK(source_mode):
        raise PlantedLinkError(src)
    if not stat.S_ISDIR(source_mode):
        raise FileNotFoundError(errno.ENOENT, "no such shard directory", str(src))
    if os.path.lexists(dst):
        if any(make_dir(dst).iterdir()):
            raise FileExistsError(errno.EEXIST, "copy target is not empty", str(dst))
        os.chmod(dst, DIR_MODE)
    else:
        dst.mkdir(mode=DIR_MODE, parents=True)
    methods: set[str] = set()
    _copy_dir(src, dst, methods)
    if durable:
        _make_durable(dst)
    return methods.pop() if len(methods) == 1 else ("mixed" if methods else "copy")


def _make_durable(dst: Path) -> None:
    fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if native.sync_filesystem(fd):
            return
    finally:
        os.close(fd)
    for dirpath, _, filenames in os.walk(dst):
        for name in filenames:
            file_fd = open_no_follow(Path(dirpath) / name, os.O_RDONLY)
            try:
                os.fsync(file_fd)
            finally:
                os.close(file_fd)
        fsync_dir(Path(dirpath))


def _copy_dir(src: Path, dst: Path, methods: set[str]) -> None:
    with os.scandir(src) as entries:
        for entry in entries:
            source, target = Path(entry.path), dst / entry.name
            if entry.is_symlink():
                raise PlantedLinkError(source)
            if entry.is_dir(follow_symlinks=False):
                os.mkdir(target, DIR_MODE)
                _copy_dir(source, target, methods)
            elif entry.is_file(follow_symlinks=False):
                methods.add("reflink" if _copy_file_sparse(source, target) else "copy")
            else:
                raise PlantedLinkError(source, "not a regular file or directory")
