"""Publication by reflink: a generation (and the reader's private copy) cloned from the working
shard on a filesystem that offers copy on write, falling back to the hole-keeping copy elsewhere.

The proof needs a reflink filesystem: the module loop-mounts a fresh XFS (``mkfs.xfs -m
reflink=1``) when it runs as root with xfsprogs and loop devices, and skips with the reason
printed when it cannot. The fallback test runs everywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from daemon import native
from daemon.index import edge, edge_reader, edge_writer
from daemon.index.port import IndexMeta, WindowPoint
from tests.reader_fakes import ALICE, ROOM_A, FakeEmbedder, make_window, message_vectors

EMBEDDER = FakeEmbedder()


def _points(start: int, count: int) -> list[WindowPoint]:
    points = []
    for n in range(start, start + count):
        event_id = f"$e{n}"
        chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, ROOM_A + event_id))
        body = f"message number {n} about the build server, the release branch and the weekend {n * 7919}"
        payload = make_window(ROOM_A, [(event_id, ALICE, 1_000 + n, body)], alias="#dev:x", chunk_id=chunk_id)
        points.append(WindowPoint(chunk_id, message_vectors(payload), EMBEDDER.sparse_query(payload["text"]), payload))
    return points


def _hashes(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _written_bytes() -> int:
    """This process's ``write_bytes`` (/proc/self/io): what it caused to be written to storage,
    counted as pages are dirtied, mmap'd writes included; a clone dirties no data pages. (A
    filesystem's free blocks would not do: the prune of the previous generation frees blocks,
    and XFS frees them in the background.)"""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes")


def _why_no_loop_xfs() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot loop-mount a filesystem"
    if shutil.which("mkfs.xfs") is None:
        return "mkfs.xfs not installed (apt-get install -y xfsprogs)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices here"
    return None


@pytest.fixture(scope="module")
def xfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    reason = _why_no_loop_xfs()
    if reason is None:
        base = tmp_path_factory.mktemp("xfs")
        image, mount = base / "reflink.img", base / "mnt"
        mount.mkdir()
        with open(image, "wb") as fh:
            fh.truncate(1 << 30)
        made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True, text=True)
        mounted = made.returncode == 0 and (
            subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True).returncode
            == 0
        )
        if mounted:
            try:
                yield mount
            finally:
                subprocess.run(["umount", str(mount)], capture_output=True)
            return
        reason = f"could not make or mount a loop XFS: {made.stderr.strip()[:200]}"
    print(f"skipped: {reason}")
    pytest.skip(reason)


def test_where_the_filesystem_cannot_clone_the_copy_is_the_hole_keeping_one(tmp_path, monkeypatch):
    monkeypatch.setattr(edge, "clone_file", lambda src, dst: False)
    source = tmp_path / "src"
    source.mkdir()
    with open(source / "sparse", "wb") as fh:
        fh.write(b"head")
        fh.seek(8 << 20)
        fh.write(b"tail")
    assert edge.copy_tree(source, tmp_path / "dst", durable=False) == "copy"
    assert (tmp_path / "dst" / "sparse").read_bytes() == (source / "sparse").read_bytes()


def _small_tree(root: Path) -> Path:
    """Three files in three directories, shaped as a shard's nesting."""
    (root / "segments" / "s1").mkdir(parents=True)
    (root / "edge_config.json").write_text("{}")
    (root / "segments" / "s1" / "segment.json").write_text("{}")
    (root / "segments" / "s1" / "page_0.dat").write_bytes(b"payload")
    return root


def _count_syncs(monkeypatch: pytest.MonkeyPatch, syncfs_available: bool) -> dict[str, int]:
    counts = {"fsync": 0, "syncfs": 0}
    real_fsync, real_syncfs = os.fsync, native.sync_filesystem

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def sync_filesystem(fd: int) -> bool:
        counts["syncfs"] += 1
        return real_syncfs(fd) if syncfs_available else False

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(native, "sync_filesystem", sync_filesystem)
    return counts


def test_a_durable_copy_syncs_its_filesystem_once_not_each_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = _small_tree(tmp_path / "src")
    counts = _count_syncs(monkeypatch, syncfs_available=True)
    edge.copy_tree(source, tmp_path / "dst")
    assert counts == {"fsync": 0, "syncfs": 1}
    assert _hashes(tmp_path / "dst") == _hashes(source)


def test_without_syncfs_a_durable_copy_fsyncs_every_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    source = _small_tree(tmp_path / "src")
    counts = _count_syncs(monkeypatch, syncfs_available=False)
    edge.copy_tree(source, tmp_path / "dst")
    assert counts == {"fsync": 3 + 3, "syncfs": 1}  # three files, three directories (dst itself too)
    assert _hashes(tmp_path / "dst") == _hashes(source)


def test_a_readers_copy_syncs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    counts = _count_syncs(monkeypatch, syncfs_available=True)
    edge.copy_tree(_small_tree(tmp_path / "src"), tmp_path / "dst", durable=False)
    assert counts == {"fsync": 0, "syncfs": 0}


def test_sync_filesystem_syncs_a_real_filesystem_and_raises_on_a_bad_descriptor(tmp_path: Path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert native.sync_filesystem(fd) is True  # glibc on Linux has syncfs
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        native.sync_filesystem(-1)


def test_a_clone_writes_no_byte_even_where_a_file_ends_inside_a_block(xfs: Path):
    """A shard's small files (configs, status, gaps) end inside a filesystem block: the clone
    alone shares that block too, where a truncate to the same size would zero its tail and so
    copy it on write, one block a file."""
    source = xfs / "odd-sizes"
    source.mkdir()
    (source / "config.json").write_bytes(b"{}" * 50)
    (source / "page_0.dat").write_bytes(os.urandom(5000))
    os.sync()
    before = _written_bytes()
    assert edge.copy_tree(source, xfs / "odd-sizes-copy", durable=False) == "reflink"
    assert _written_bytes() - before == 0
    assert _hashes(xfs / "odd-sizes-copy") == _hashes(source)


def test_a_served_generation_never_changes_when_the_writer_writes_on(xfs: Path, tmp_path: Path):
    root, private = xfs / "served" / "index", xfs / "served" / "private"
    writer = edge_writer.EdgeIndexWriter(root)
    try:
        writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
        writer.write_windows(ROOM_A, _points(0, 2000), [])
        writer.commit()
        assert writer.last_publish is not None and writer.last_publish["copy"] == "reflink"
        first = edge.generations_dir(root) / str(writer.last_publish["generation"])
        reader = edge_reader.EdgeIndexReader.open_latest(root, private)
        assert reader is not None and reader.copy_method == "reflink"
        try:
            generation_before, copy_before = _hashes(first), _hashes(reader.copy_dir)
            work_before = _hashes(writer.work)
            # The writer rewrites windows the generation shares blocks with, then publishes anew.
            writer.write_windows(ROOM_A, _points(0, 200) + _points(2000, 300), [])
            assert _hashes(first) == generation_before  # the published generation, before its prune
            writer.commit()
            assert _hashes(writer.work) != work_before  # the shared files were written
            assert _hashes(reader.copy_dir) == copy_before  # what the reader serves never changed
        finally:
            reader.close()
        assert not first.exists()  # pruned by the second publication; the reader's clone lives on
    finally:
        writer.close()


def test_publishing_a_small_change_writes_in_proportion_to_it(xfs: Path):
    """Bytes written (/proc/self/io) for a publication after 100 new messages on a larger index,
    by reflink and by the full copy (the clone turned off) of the same shard."""
    measured: dict[str, int] = {}
    for method in ("reflink", "copy"):
        root = xfs / f"publish-{method}" / "index"
        writer = edge_writer.EdgeIndexWriter(root)
        try:
            writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
            for start in range(0, 6000, 1000):
                writer.write_windows(ROOM_A, _points(start, 1000), [])
            writer.commit()
            writer.write_windows(ROOM_A, _points(6000, 100), [])
            before = _written_bytes()
            if method == "copy":
                original, edge.clone_file = edge.clone_file, lambda src, dst: False  # type: ignore[assignment]
            try:
                writer.commit()
            finally:
                if method == "copy":
                    edge.clone_file = original  # type: ignore[assignment]
            measured[method] = _written_bytes() - before
            assert writer.last_publish is not None and writer.last_publish["copy"] == method
            shard_bytes = sum(p.stat().st_blocks * 512 for p in writer.work.rglob("*") if p.is_file())
        finally:
            writer.close()
    print(
        f"publication after 100 messages on 6,000: reflink {measured['reflink']} B, copy {measured['copy']} B, shard {shard_bytes} B"
    )
    assert measured["reflink"] * 4 < measured["copy"]
