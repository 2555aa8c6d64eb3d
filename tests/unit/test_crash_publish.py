"""kill -9 during a publish, between a generation's last write and the ``CURRENT`` switch.

A refresh (the real refresher and the embedded index, a fake homeserver) is killed by SIGKILL at
the writer's ``publish`` fault point: the new generation is whole on disk, ``CURRENT`` still names
the last one. A reader must keep serving that last good generation (never less), and the next run
must converge: publish a generation holding exactly what an uninterrupted run stores, and prune
the orphan.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.index import edge
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import SearchFilter

# Child processes killed at random moments: `slow`, as the other kill -9 tests.
pytestmark = pytest.mark.slow


REPO = Path(__file__).resolve().parents[2]
ROOMS = ("!a:hs.test", "!b:hs.test")

CHILD = textwrap.dedent("""
    import asyncio, os, signal, sys
    from pathlib import Path
    from chunker.fold import Bounds
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy
    from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

    state, stage, kill_at_publish = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "kill"
    A, B = "!a:hs.test", "!b:hs.test"
    hs = FakeMatrix()
    hs.add_room(A); hs.add_room(B)
    for i in range(40):
        hs.send(A, "@alice:hs.test", f"a{i}: the lighthouse keeper logs the tide at {i}")
        hs.send(B, "@bob:hs.test", f"b{i}: the choir rehearses hymn {i}")
    if stage == 1:
        for i in range(25):
            hs.send(A, "@bob:hs.test", f"a-new{i}: the tide turned at {i}")
            hs.send(B, "@alice:hs.test", f"b-new{i}: the organ needs tuning {i}")

    def fault(boundary, subject):
        if kill_at_publish and boundary == "publish":
            os.kill(os.getpid(), signal.SIGKILL)
        return False

    writer = EdgeIndexWriter(state / "index", fail_writes=fault)
    try:
        summary = asyncio.run(Refresher(
            matrix=hs, index=writer, embedder=FakeEmbedder(), policy=Policy.build(allowed=(A, B)), log=ListLog(),
            options=RefreshOptions(bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000), page_size=7,
                                   checkpoint_events=12, state_dir=state),
        ).run())
    finally:
        writer.close()
    sys.exit(summary.exit_code)
""")


def _run(state: Path, stage: int, kill: bool = False) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(state), str(stage), "kill" if kill else "-"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr[-3000:]
    return proc.returncode


def _stored(index: EdgeIndexWriter) -> dict[str, list[tuple[str, str]]]:
    """Every window the writer holds: point id -> its messages (event id, text)."""
    return {
        p["chunk_id"]: [(m["event_id"], m["body"]) for m in p["messages"]]
        for room in ROOMS
        for p in index.windows_in_span(room, 0, 10**14)
    }


def _served(root: Path, private: Path) -> tuple[int, dict[str, list[tuple[str, str]]]]:
    """The generation a reader opening now serves, and every window it can list."""
    reader = EdgeIndexReader.open_latest(root, private)
    assert reader is not None and reader.current_generation is not None
    try:
        windows = reader.listing(SearchFilter(), None, 10_000)
        return reader.current_generation, {w.chunk_id: [(m.event_id, m.body) for m in w.messages] for w in windows}
    finally:
        reader.close()


def test_kill_9_between_a_generations_last_write_and_current_never_serves_less_and_converges(tmp_path: Path):
    reference = tmp_path / "reference"
    assert _run(reference, 0) == 0
    assert _run(reference, 1) == 0
    with EdgeIndexWriter(reference / "index") as index:
        expected = _stored(index)

    state, private = tmp_path / "state", tmp_path / "reader"
    root = state / "index"
    assert _run(state, 0) == 0
    last_good, before = _served(root, private)
    serving = EdgeIndexReader.open_latest(root, private)  # a reader already serving it
    assert serving is not None
    try:
        assert _run(state, 1, kill=True) == -signal.SIGKILL
        # The new generation was written whole, but CURRENT was never switched to it.
        assert edge.read_current(root) == last_good
        assert (edge.generations_dir(root) / str(last_good + 1)).is_dir()
        assert not serving.newer_available()
        assert _served(root, private) == (last_good, before)  # a reader starting now: the same

        assert _run(state, 1) == 0
        assert serving.newer_available()
    finally:
        serving.close()
    generation, after = _served(root, private)
    assert generation > last_good
    assert after == expected
    assert set(before) <= set(after) and len(after) > len(before)
    # Only CURRENT's generation is kept: the orphan of the killed publish is gone.
    numbered = [p.name for p in edge.generations_dir(root).iterdir() if p.is_dir()]
    assert numbered == [str(generation)]
