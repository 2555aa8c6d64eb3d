"""The idle check's decisions (``daemon.refresher.idle``) and the stored sync state, with a fake
homeserver that answers ``changes_since`` only; the real /sync is in
tests/integration/test_idle_refresh_synapse.py."""

from __future__ import annotations

import asyncio
import http.server
import json
import stat
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from daemon import wiring
from daemon.index import edge
from daemon.ports import MatrixError, SyncChanges
from daemon.refresher.idle import refresh_cycle
from daemon.refresher.summary import RunSummary
from daemon.refresher.sync_probe import SyncProbe, sync_changes
from daemon.refresher.sync_state import RunMarks, SyncState, load_sync_state, save_sync_state, sync_state_path

MARKS = RunMarks(settings="s1", purges=None, index="i1")
NOW = 1_800_000_000.0


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    def events(self) -> list[str]:
        return [event for event, _ in self.lines]


class Homeserver:
    """Answers one incremental /sync; any other call would be an AttributeError."""

    def __init__(self, changes: SyncChanges | Exception | None = None):
        self.changes = changes or SyncChanges([], [], [])
        self.asked: list[str] = []

    async def changes_since(self, since: str) -> SyncChanges:
        self.asked.append(since)
        if isinstance(self.changes, Exception):
            raise self.changes
        return self.changes


class FullRun:
    def __init__(self, summary: RunSummary | None = None, next_batch: str | None = "t2", fail: bool = False):
        self.calls = 0
        self.summary, self.next_batch, self.fail = summary or RunSummary(), next_batch, fail

    async def __call__(self) -> tuple[RunSummary, str | None]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("crashed half way")
        return self.summary, self.next_batch


def _cycle(
    state_dir: Path, hs: Homeserver, full: FullRun, *, marks: RunMarks = MARKS, recheck: float = 300, now: float = NOW
):
    log = Log()
    outcome = asyncio.run(
        refresh_cycle(
            hs,  # type: ignore[arg-type]
            state_dir=state_dir,
            marks=marks,
            index_mark=lambda: "i2",
            scope_recheck_s=recheck,
            full_run=full,
            log=log,
            clock=lambda: now,
        )
    )
    return outcome, log


def _stored(state_dir: Path, finished: float = NOW - 10, marks: RunMarks = MARKS) -> None:
    save_sync_state(state_dir, SyncState("t1", int(finished * 1000), marks))


def test_no_change_is_idle_after_one_request_and_writes_nothing(tmp_path):
    _stored(tmp_path)
    before = sync_state_path(tmp_path).stat().st_mtime_ns
    hs, full = Homeserver(), FullRun()
    outcome, log = _cycle(tmp_path, hs, full)
    assert outcome.idle and full.calls == 0 and hs.asked == ["t1"]
    assert outcome.summary.homeserver_requests == 1
    assert log.events() == ["run_idle"]
    assert sync_state_path(tmp_path).stat().st_mtime_ns == before  # the token only moves after a full run


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (SyncChanges(["!a:hs"], [], []), "new_events"),
        (SyncChanges([], ["!b:hs"], []), "invited"),
        (SyncChanges([], [], ["!c:hs"]), "room_left"),
        (MatrixError("changes_since", 400, "M_UNKNOWN_POS"), "sync_failed"),
    ],
)
def test_what_the_sync_shows_starts_a_full_run_that_stores_its_token(tmp_path, changes, why):
    _stored(tmp_path)
    full = FullRun()
    outcome, log = _cycle(tmp_path, Homeserver(changes), full)
    assert not outcome.idle and outcome.why == why and full.calls == 1
    assert log.events() == ["full_run_started"]
    state = load_sync_state(tmp_path)
    assert state is not None and state.next_batch == "t2" and state.marks.index == "i2"
    assert outcome.summary.homeserver_requests == 1  # the probe, beside the full run's own


@pytest.mark.parametrize(
    ("marks", "recheck", "why"),
    [
        (RunMarks("s2", None, "i1"), 300, "settings_changed"),
        (RunMarks("s1", "p1", "i1"), 300, "purges_changed"),
        (RunMarks("s1", None, "gone"), 300, "index_changed"),
        (MARKS, 5, "scope_recheck_due"),
        (MARKS, 0, "scope_recheck_due"),
    ],
)
def test_a_changed_mark_or_old_scope_facts_start_a_full_run_without_asking(tmp_path, marks, recheck, why):
    _stored(tmp_path)
    hs = Homeserver()
    outcome, _ = _cycle(tmp_path, hs, FullRun(), marks=marks, recheck=recheck)
    assert not outcome.idle and outcome.why == why and hs.asked == []


def test_a_failed_room_or_a_pending_rebuild_drops_the_token(tmp_path):
    for summary in (RunSummary(rooms_failed=1), RunSummary(rebuild_pending=True)):
        _stored(tmp_path)
        outcome, log = _cycle(tmp_path, Homeserver(SyncChanges(["!a:hs"], [], [])), FullRun(summary))
        assert load_sync_state(tmp_path) is None
        assert log.events()[-1] == "sync_state_dropped"
        _, log = _cycle(tmp_path, Homeserver(), FullRun())  # so the next run is full again
        assert log.events() == []  # no_sync_state: a full run, journalled by the run itself


def test_a_crashed_full_run_keeps_the_older_token(tmp_path):
    _stored(tmp_path)
    with pytest.raises(RuntimeError):
        _cycle(tmp_path, Homeserver(SyncChanges(["!a:hs"], [], [])), FullRun(fail=True))
    state = load_sync_state(tmp_path)
    assert state is not None and state.next_batch == "t1"  # the next run asks from before the crash


def test_the_state_file_is_private_and_a_bad_one_reads_as_none(tmp_path):
    _stored(tmp_path)
    path = sync_state_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    for bad in ("{", "[]", json.dumps({"version": 99}), json.dumps({"version": 1, "next_batch": ""})):
        path.write_text(bad)
        assert load_sync_state(tmp_path) is None


def test_the_index_mark_names_edges_current_file(tmp_path):
    assert wiring.EDGE_CURRENT == (edge.GENERATIONS_DIR, edge.CURRENT_FILE)


def test_an_incremental_sync_answer_reads_as_changes():
    body = {
        "next_batch": "s2",
        "rooms": {
            "join": {
                "!quiet:hs": {"timeline": {"events": []}, "state": {"events": []}},
                "!talk:hs": {"timeline": {"events": [{"event_id": "$1"}]}},
                "!renamed:hs": {"state": {"events": [{"type": "m.room.name"}]}},
            },
            "invite": {"!new:hs": {}},
            "leave": {"!kicked:hs": {}},
        },
    }
    changes = sync_changes(body)
    assert changes == SyncChanges(["!renamed:hs", "!talk:hs"], ["!new:hs"], ["!kicked:hs"])
    assert sync_changes({"next_batch": "s3"}) == SyncChanges([], [], [])
    for not_a_sync in (None, [], {"rooms": {}}):
        with pytest.raises(MatrixError):
            sync_changes(not_a_sync)


class _Sync(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []
    status = 200

    def do_GET(self) -> None:  # http.server calls it by this name
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"next_batch": "s9"} if self.status == 200 else {"errcode": "M_UNKNOWN_TOKEN"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_probe_asks_one_filtered_sync_with_the_token_only_in_its_header():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Sync)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = "syt_aHVnaW5u_SecretTokenValue_0a1b2c"
    probe = SyncProbe(f"http://127.0.0.1:{server.server_port}", token)
    try:
        assert asyncio.run(probe.changes_since("s1")) == SyncChanges([], [], [])
        [(path, auth)] = _Sync.seen
        query = parse_qs(urlparse(path).query)
        assert urlparse(path).path == "/_matrix/client/v3/sync"
        assert query["since"] == ["s1"] and query["timeout"] == ["0"]
        sync_filter = json.loads(query["filter"][0])
        assert sync_filter["presence"] == {"not_types": ["*"]} and sync_filter["room"]["timeline"]["limit"] == 1
        assert auth == f"Bearer {token}" and token not in path and token not in repr(probe)
        _Sync.status = 401
        with pytest.raises(MatrixError) as refused:
            asyncio.run(probe.changes_since("s1"))
        assert refused.value.status == 401 and token not in str(refused.value)
    finally:
        server.shutdown()
        server.server_close()
