"""The embedded index on a full disk: a small tmpfs mounted by the test holds the index root. The
disk fills during a run's writes, or between its writes and its publish. Either way the run fails,
the last good generation keeps serving (CURRENT unchanged, the reader loads it with the same
content), no numbered generation appears half-written, and once space returns the next run
converges to what a run on a roomy disk stores (docs: "Full disk" in the test below).

Each refresh runs in a child process: Edge maps its files, and a write into a mapped page of a
full tmpfs is a SIGBUS, which must not take pytest down (it is just another way to die mid-run).
Skipped, with the reason, where the test cannot mount (not root, no CAP_SYS_ADMIN).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.index import schema
from daemon.index.edge import generations_dir, read_current
from daemon.index.edge_reader import EdgeIndexReader

# Mounts a tmpfs and fills it in child processes: `slow`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy
    from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

    root, n = Path(sys.argv[1]), int(sys.argv[2])
    hs = FakeMatrix()
    hs.add_room("!r:hs.test")
    for i in range(n):  # the same events, ids and times in every child: a timeline that grows
        hs.send("!r:hs.test", "@a:hs.test", f"message {i}: the harbour crane is back in service " * 3)
    log = ListLog()
    writer = EdgeIndexWriter(root)
    try:
        summary = asyncio.run(Refresher(matrix=hs, index=writer, embedder=FakeEmbedder(),
                                        policy=Policy.build(allowed=("!r:hs.test",)), log=log,
                                        options=RefreshOptions(page_size=50, checkpoint_events=100)).run())
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
    finally:
        writer.close()
    print(json.dumps({"failed": summary.rooms_failed, "why": log.events("room_failed")}, default=str))
    sys.exit(summary.exit_code)
""")


def _refresh(root: Path, n: int) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(n)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout + proc.stderr[-2000:]


def _served(root: Path, private: Path) -> tuple[int, dict[str, str]]:
    reader = EdgeIndexReader.open_latest(root, private)
    assert reader is not None
    try:
        records = reader._scroll([schema.IS_WINDOW])
        return reader.current_generation, {str(r.id): json.dumps(r.payload, sort_keys=True) for r in records}
    finally:
        reader.close()


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    _mount(mount, "96m")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path, leave: int) -> Path:
    """Take all free space on the mount but ``leave`` bytes."""
    filler = mount / "filler"
    stat = os.statvfs(mount)
    size = max(stat.f_bavail * stat.f_frsize - leave, 0)
    with open(filler, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, size)
    return filler


def _generations(root: Path) -> set[str]:
    return {p.name for p in generations_dir(root).iterdir() if p.name.isdigit()}


@pytest.fixture(scope="module")
def roomy(tmp_path_factory):
    """What each run stores on a disk with room: (n messages) -> served content."""
    out = {}
    for n in (60, 90):
        root = tmp_path_factory.mktemp(f"roomy{n}") / "index"
        code, text = _refresh(root, n)
        assert code == 0, text
        out[n] = _served(root, root.parent / "private")[1]
    return out


def _mount(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {done.stderr.strip() or done.returncode}")


def _remount(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


@pytest.mark.parametrize("where", ["write", "publish"])
def test_a_full_disk_keeps_the_last_good_generation_serving(small_disk, tmp_path, roomy, where):
    """write: the whole disk fills before the run, so its first writes fail (Edge maps its files:
    the child dies by SIGBUS). publish: ``generations/`` is its own small disk with room for one
    generation, so the run's writes succeed and its copy for the new generation fails."""
    root, private = small_disk / "index", tmp_path / "private"
    gens = generations_dir(root)
    if where == "publish":
        _mount(gens, "32m")
    try:
        code, text = _refresh(root, 60)
        assert code == 0, text
        generation, content = _served(root, private)
        assert content == roomy[60]

        if where == "publish":
            _remount(small_disk, "400m")  # room for the writes (see below), none for the copy
        filler = _fill(small_disk, 0) if where == "write" else None
        code, text = _refresh(root, 90)
        assert code != 0, text  # the run failed (exit 1, or killed by SIGBUS mid-write)
        if where == "publish":
            assert "publishing a generation" in text and "No space left" in text, text
        assert read_current(root) == generation
        assert _generations(root) == {str(generation)}  # nothing half-published under a real number
        assert _served(root, private) == (generation, content)

        # Space returns. More than the filler gave back: on tmpfs every reopened shard appends a
        # new segment whose mapped pages are real memory, measured: work grows from ~20 MiB after
        # the first run to ~100 MiB after the second (on a disk with holes it stays small), and with
        # one vector per message the copy no longer fits a 128 MiB generations disk.
        if filler is not None:
            filler.unlink()
        _remount(small_disk, "400m")
        if where == "publish":
            _remount(gens, "256m")
        code, text = _refresh(root, 90)
        assert code == 0, text
        newer, content = _served(root, private)
        assert newer > generation and content == roomy[90]
    finally:
        if where == "publish":
            subprocess.run(["umount", "-l", str(gens)], check=False)
        shutil.rmtree(private, ignore_errors=True)
