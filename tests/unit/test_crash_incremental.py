"""kill -9 at random moments of incremental runs (the embedded index) that carry new messages,
edits, redactions, a purge span and a room rebuild: after the interrupted runs, one run to the end
stores exactly what an uninterrupted run stores — the same point ids, the same payloads (hashed),
the same cursors — and no redacted or purged text.

The write-boundary crash tests (an injected failure at each boundary) live beside the refresher's
tests; here the kill lands anywhere: inside Edge's own writes, the publish copy, between a window
write and its cursor. Each run is a child process killed by a timer at a delay drawn (seeded) from
the length of an uninterrupted run. Marked ``slow``: CI runs it (``make test`` runs every marker).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon.index import edge
from daemon.index.edge_writer import EdgeIndexWriter

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("!a:hs.test", "!b:hs.test")
KILLS_PER_TRIAL = 4
TRIALS = 8

CHILD = textwrap.dedent("""
    import asyncio, json, os, signal, sys, threading, time
    from pathlib import Path
    from chunker.fold import Bounds
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.refresher.purges import add_purge
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy
    from tests.fakes import FakeEmbedder, FakeMatrix, ListLog

    state, stage, delay = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    A, B = "!a:hs.test", "!b:hs.test"
    hs = FakeMatrix()
    hs.add_room(A); hs.add_room(B)
    a = [hs.send(A, "@alice:hs.test", f"a{i}: the lighthouse keeper logs the tide at {i}") for i in range(70)]
    b = [hs.send(B, "@bob:hs.test", f"b{i}: the choir rehearses hymn {i}") for i in range(40)]
    edit = hs.edit(A, "@alice:hs.test", a[10], "a10: EDITED-TEXT-LATER-REDACTED")
    if stage == 1:
        for i in range(30):
            hs.send(A, "@bob:hs.test", f"a-new{i}: the tide turned at {i}")
            hs.send(B, "@alice:hs.test", f"b-new{i}: the organ needs tuning {i}")
        hs.edit(A, "@alice:hs.test", a[40], "a40: the lighthouse is closed on Sundays")
        hs.redact(A, "@alice:hs.test", a[50])
        hs.redact(B, "@bob:hs.test", b[5])
        hs.redact(A, "@alice:hs.test", edit)  # an edit folded into a window: room A is rebuilt
        ts = {e["event_id"]: e["origin_server_ts"] for e in hs.rooms[B].timeline}
        add_purge(state, B, ts[b[20]], ts[b[30]])
    if delay > 0:
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
    started = time.monotonic()
    marks = {}
    read = hs.messages
    async def messages(*args):  # when the first read starts: the ingest's window opens
        marks.setdefault("ingest", time.monotonic() - started)
        return await read(*args)
    hs.messages = messages
    writer = EdgeIndexWriter(state / "index")
    commit = writer.commit
    def commit_marked(*args, **kwargs):  # flush and publish follow
        marks["commit"] = time.monotonic() - started
        commit(*args, **kwargs)
    writer.commit = commit_marked
    try:
        summary = asyncio.run(Refresher(
            matrix=hs, index=writer, embedder=FakeEmbedder(), policy=Policy.build(allowed=(A, B)), log=ListLog(),
            options=RefreshOptions(bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000), page_size=7,
                                   checkpoint_events=12, state_dir=state),
        ).run())
    finally:
        writer.close()
    print(json.dumps({"seconds": time.monotonic() - started, **marks, "rebuilt": summary.rooms_rebuilt,
                      "failed": summary.rooms_failed, "purged_text": [b[20], b[25], b[30]], "redacted": [a[50], b[5]]}))
    os._exit(0)  # the timer thread must not outlive a finished run
""")


def _run(state: Path, stage: int, delay: float = 0.0) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(state), str(stage), f"{delay:.3f}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else {"stderr": proc.stderr[-2000:]}
    return proc.returncode, out


def _snapshot(state: Path) -> dict[str, object]:
    """Every window (point id -> payload hash) and every cursor less its write time."""
    with EdgeIndexWriter(state / "index") as index:
        windows = {
            p["chunk_id"]: hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()
            for room in ROOMS
            for p in index.windows_in_span(room, 0, 10**14)
        }
        bodies = " ".join(
            m["body"] for room in ROOMS for p in index.windows_in_span(room, 0, 10**14) for m in p["messages"]
        )
        cursors = {}
        for room in ROOMS:
            cursor = index.get_cursor(room)
            cursors[room] = (
                None
                if cursor is None
                else (cursor.end_token, cursor.last_event_id, cursor.open_window_id, cursor.chat_version)
            )
    return {"windows": windows, "cursors": cursors, "bodies": bodies}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted runs' result, their timings, and the state after stage 0 (which every
    trial starts from: stage 0 is never interrupted, so one run of it serves them all)."""
    state = tmp_path_factory.mktemp("reference")
    code, out = _run(state, 0)
    assert code == 0, out
    stage_0 = tmp_path_factory.mktemp("stage-0") / "state"
    edge.copy_tree(state, stage_0, durable=False)
    code, out = _run(state, 1)
    assert code == 0 and out["failed"] == 0, out
    assert out["rebuilt"] >= 1  # the run really rebuilds a room
    return _snapshot(state), out, stage_0


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_9_at_random_moments_of_an_incremental_run_converges(tmp_path, reference, trial):
    expected, facts, stage_0 = reference
    rng = random.Random(1000 + trial)
    kills, shrink = 0, 1.0
    state = tmp_path / "state"
    while kills == 0 and shrink > 0.1:
        shutil.rmtree(state, ignore_errors=True)
        edge.copy_tree(stage_0, state, durable=False)
        for _ in range(KILLS_PER_TRIAL):
            # While reading, folding and writing (a kill in the publish is the full-disk and
            # write-boundary tests' business): between the first read and the commit.
            start, end = facts["ingest"], facts["commit"]
            code, out = _run(state, 1, delay=start + shrink * rng.uniform(0, end - start))
            if code != -signal.SIGKILL:
                assert code == 0, out  # finished before the timer: nothing left to interrupt
                break
            kills += 1
        shrink /= 2  # this machine ran faster than the reference: start over, kill sooner
    assert kills >= 1  # each trial really killed at least one run
    code, out = _run(state, 1)
    assert code == 0 and out["failed"] == 0, out
    got = _snapshot(state)
    assert got["windows"] == expected["windows"]
    assert got["cursors"] == expected["cursors"]
    assert "EDITED-TEXT-LATER-REDACTED" not in got["bodies"]
    for text in ("a50:", "b5:", "b20:", "b25:", "b30:"):
        assert text not in got["bodies"]
