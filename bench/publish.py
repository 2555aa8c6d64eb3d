"""Publication after a small change: what a generation costs when 100 messages were added.

Owns: ``bench_publish`` — a synthetic index of n windows (``write_synthetic_index``, as the reader
part builds it), then 100 more windows and the commit that publishes them, timed
(``publish_after_100_s``) and the bytes this process wrote for it (``write_bytes`` of
/proc/self/io: ``publish_after_100_bytes_written``), the reader's side of it (its private copy of
the new generation, loaded: ``publish_reader_open_s`` and ``_bytes_written``), beside a full
copy of the same shard with cloning turned off (``publish_full_copy_s`` and ``_bytes``: today's
cost on a filesystem without reflinks). It runs on
a loop-mounted XFS with ``reflink=1`` when the bench runs as root with xfsprogs and loop devices
(``publish_fs: xfs-reflink``), else in the work directory (``publish_fs`` names that filesystem).

Must not: be imported by the product, or leave a mount behind (unmounted in ``finally``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator


def _written_bytes() -> int:
    """This process's ``write_bytes`` (/proc/self/io): what it caused to be written to storage,
    counted as pages are dirtied, mmap'd writes included; a clone dirties no data pages. (A
    filesystem's free blocks would not do: the prune of the previous generation frees blocks,
    and XFS frees them in the background.)"""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes")


def _fs_type(path: Path) -> str:
    proc = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


@contextmanager
def publish_dir(work: Path, size_gb: int) -> Iterator[tuple[Path, str]]:
    """A directory on a reflink XFS when one can be loop-mounted, else under ``work``."""
    image, mount = work / "publish-xfs.img", work / "publish-xfs"
    can = os.geteuid() == 0 and shutil.which("mkfs.xfs") and Path("/dev/loop-control").exists()
    if can:
        mount.mkdir(exist_ok=True)  # the previous size's mount point, unmounted
        with open(image, "wb") as fh:
            fh.truncate(size_gb << 30)
        made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True)
        if made.returncode == 0 and subprocess.run(["mount", "-o", "loop", str(image), str(mount)]).returncode == 0:
            try:
                yield mount, "xfs-reflink"
            finally:
                subprocess.run(["umount", str(mount)])
                image.unlink(missing_ok=True)
            return
    plain = work / "publish-plain"
    plain.mkdir(exist_ok=True)
    yield plain, _fs_type(plain)


ROOM = "!bench00:huginn.test"


def _new_points(count: int, rng: random.Random) -> list[Any]:
    """``count`` new one-message windows in the first synthetic room, shaped as the reader part's."""
    import numpy as np

    from chunker import chat_version
    from chunker.fold import Bounds
    from chunker.windows import StoredMessage, Window, embed_text
    from daemon.embedder import Bm25Sparse
    from daemon.index.port import WindowPoint
    from daemon.index.schema import window_payload

    version, bm25 = chat_version(Bounds()), Bm25Sparse()
    gen = np.random.default_rng(rng.randrange(1 << 30))
    points = []
    for n in range(count):
        message = StoredMessage(f"$new{n}", "@user1:huginn.test", 1_900_000_000_000 + n * 1000, f"new message {n}")
        window = Window(room_id=ROOM, anchor_id=message.event_id, messages=[message], closed=True)
        vector = gen.standard_normal((1, 384)).astype("float32")
        vector /= np.linalg.norm(vector, axis=1, keepdims=True)
        points.append(
            WindowPoint(
                point_id=window.point_id,
                dense=vector.tolist(),
                sparse=bm25.sparse([embed_text(window)])[0],
                payload=window_payload(window, room_alias=None, chat_version=version),
            )
        )
    return points


def bench_publish(
    work: Path,
    figures: dict[str, Any],
    n_windows: int,
    suffix: str,
    *,
    write_synthetic_index: Callable[[Path, int, random.Random], Any],
    say: Callable[[str], None],
) -> None:
    from daemon.index import edge
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.index.edge_writer import EdgeIndexWriter

    rng = random.Random(3)
    # Sparse images: ~9.3 KB of shard per window, the full copy as much again, plus headroom.
    size_gb = 4 if n_windows <= 10_000 else max(16, n_windows * 40 // 1_000_000)
    with publish_dir(work, size_gb) as (base, fs):
        state = base / f"state{suffix}"
        say(f"publish: {n_windows} windows on {fs}")
        write_synthetic_index(state, n_windows, rng)
        writer = EdgeIndexWriter(state / "index")
        try:
            writer.write_windows(ROOM, _new_points(100, rng), [])
            before = _written_bytes()
            tick = time.perf_counter()
            writer.commit()
            figures[f"publish_after_100_s{suffix}"] = round(time.perf_counter() - tick, 3)
            figures[f"publish_after_100_bytes_written{suffix}"] = _written_bytes() - before
            figures[f"publish_method{suffix}"] = (writer.last_publish or {}).get("copy")
            # The reader's side of the same publication: its private copy of the new generation,
            # loaded (``open_latest``), as ``huginn-chat serve`` swaps to it.
            before = _written_bytes()
            tick = time.perf_counter()
            reader = EdgeIndexReader.open_latest(state / "index", base / f"private{suffix}")
            figures[f"publish_reader_open_s{suffix}"] = round(time.perf_counter() - tick, 3)
            figures[f"publish_reader_open_bytes_written{suffix}"] = _written_bytes() - before
            if reader is not None:
                reader.close()
            source_dir = writer.work
            original = edge.clone_file
            edge.clone_file = lambda src, dst: False  # type: ignore[assignment]
            try:
                before = _written_bytes()
                tick = time.perf_counter()
                edge.copy_tree(source_dir, base / f"full-copy{suffix}")
                figures[f"publish_full_copy_s{suffix}"] = round(time.perf_counter() - tick, 3)
                figures[f"publish_full_copy_bytes{suffix}"] = _written_bytes() - before
            finally:
                edge.clone_file = original  # type: ignore[assignment]
        finally:
            writer.close()
        figures["publish_fs"] = fs
