"""`huginn-chat follow`'s decisions (``daemon.refresher.follow.FollowLoop``) with a scripted long
poll, a fake clock and a cycle that stores what a full run would; and the refresh lock that keeps
its refreshes and the timer's apart. The real /sync and the real forked refresh are in
tests/integration/test_follow_synapse.py."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from bench.reader_process import run_cli
from daemon.ports import MatrixError, SyncChanges
from daemon.refresher.follow import BACKOFF_S, MIN_POLL_GAP_S, FollowConfig, FollowLoop
from daemon.refresher.refresh_lock import REFRESH_LOCK_FILE, RefreshLock
from daemon.refresher.sync_probe import SyncProbe
from daemon.refresher.sync_state import RunMarks, SyncState, load_sync_state, save_sync_state
from daemon.safe_files import PlantedLinkError

MARKS = RunMarks(settings="s1", purges=None, index="i1")
NOTHING = SyncChanges([], [], [])
NEWS = SyncChanges(["!a:hs"], [], [])
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    warning = info

    def events(self) -> list[str]:
        return [event for event, _ in self.lines]


class Poll:
    """Answers each long poll from a script: (changes, next_batch), or an exception; a poll of
    ``held_s`` seconds moves the clock (the homeserver held it open)."""

    def __init__(self, clock: Clock, answers: list[Any], held_s: float = 0.0):
        self.clock, self.answers, self.held_s = clock, list(answers), held_s
        self.asked: list[tuple[str, float]] = []

    def wait_for_changes(self, since: str, wait_s: float) -> tuple[SyncChanges, str]:
        self.asked.append((since, wait_s))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        self.clock.now += min(self.held_s, wait_s) if answer[0] == NOTHING else 0
        return answer


class Cycle:
    """A refresh cycle: stores ``token`` as a full run that finished now would (None: leaves the
    stored state as it is, as an idle run or a failed one does), returns ``code``."""

    def __init__(self, state_dir: Path, clock: Clock, tokens: list[str | None], code: int = 0, drop: bool = False):
        self.state_dir, self.clock, self.tokens, self.code, self.drop = state_dir, clock, list(tokens), code, drop
        self.runs = 0

    def __call__(self) -> int:
        self.runs += 1
        token = self.tokens.pop(0) if self.tokens else None
        if self.drop:
            (self.state_dir / "sync.json").unlink(missing_ok=True)
        elif token is not None:
            save_sync_state(self.state_dir, SyncState(token, int(self.clock.now * 1000), MARKS))
        return self.code


def _loop(
    tmp_path: Path, clock: Clock, poll: Poll, cycle: Cycle, *, recheck: float = 300, poll_s: float = 30, marks=MARKS
):
    log = Log()
    config = FollowConfig(state_dir=tmp_path, probe=poll, marks=lambda: marks, scope_recheck_s=recheck, poll_s=poll_s)
    loop = FollowLoop(config=lambda: config, run_cycle=cycle, log=log, clock=clock, sleep=clock.sleep)
    return loop, log


def _stored(tmp_path: Path, token: str = "t1", age_s: float = 10) -> None:
    save_sync_state(tmp_path, SyncState(token, int((T0 - age_s) * 1000), MARKS))


def test_polls_that_show_nothing_start_no_refresh_and_each_goes_on_from_the_last_answer(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2"), (NOTHING, "t3"), (NOTHING, "t4")], held_s=30)
    cycle = Cycle(tmp_path, clock, [])
    loop, _ = _loop(tmp_path, clock, poll, cycle)
    assert [loop.step() for _ in range(3)] == ["idle", "idle", "idle"]
    assert cycle.runs == 0 and [since for since, _ in poll.asked] == ["t1", "t2", "t3"]
    assert all(0 < wait <= 30 for _, wait in poll.asked)
    assert clock.slept == []  # the homeserver held each poll: no pause of its own


def test_a_change_starts_one_refresh_and_the_next_poll_starts_from_the_token_it_stored(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2"), (NEWS, "t3"), (NOTHING, "t10")], held_s=30)
    cycle = Cycle(tmp_path, clock, ["t9"])
    loop, _ = _loop(tmp_path, clock, poll, cycle)
    assert [loop.step() for _ in range(3)] == ["idle", "cycle", "idle"]
    assert cycle.runs == 1
    assert [since for since, _ in poll.asked] == ["t1", "t2", "t9"]


def test_a_token_the_timers_run_stored_meanwhile_is_where_the_next_poll_starts(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2"), (NOTHING, "t8")], held_s=30)
    loop, _ = _loop(tmp_path, clock, poll, Cycle(tmp_path, clock, []))
    loop.step()
    _stored(tmp_path, "t7", age_s=0)  # a full run of the timer's, between two polls
    loop.step()
    assert [since for since, _ in poll.asked] == ["t1", "t7"]


def test_scope_facts_are_read_again_when_they_reach_the_setting_not_a_poll_later(tmp_path):
    _stored(tmp_path, age_s=290)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2")], held_s=30)
    cycle = Cycle(tmp_path, clock, ["t3"])
    loop, _ = _loop(tmp_path, clock, poll, cycle)
    assert loop.step() == "idle"
    assert poll.asked == [("t1", 10.0)]  # held at most until the facts are 300 s old
    assert loop.step() == "cycle" and len(poll.asked) == 1  # then a full run, asked of no one
    assert load_sync_state(tmp_path).next_batch == "t3"


@pytest.mark.parametrize("marks", [RunMarks("s2", None, "i1"), RunMarks("s1", "p1", "i1"), RunMarks("s1", None, "i2")])
def test_a_changed_setting_purge_list_or_index_starts_a_refresh_without_a_poll(tmp_path, marks):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [])
    cycle = Cycle(tmp_path, clock, [None])
    loop, _ = _loop(tmp_path, clock, poll, cycle, marks=marks)
    assert loop.step() == "cycle" and poll.asked == [] and cycle.runs == 1


def test_with_no_stored_state_the_first_turn_is_a_refresh(tmp_path):
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t6")], held_s=30)
    cycle = Cycle(tmp_path, clock, ["t5"])
    loop, _ = _loop(tmp_path, clock, poll, cycle)
    assert [loop.step(), loop.step()] == ["cycle", "idle"]
    assert poll.asked[0][0] == "t5" and clock.slept == []


def test_a_failed_poll_pauses_then_lets_a_refresh_decide_and_is_journalled_once_a_series(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    down = MatrixError("changes_since (ConnectionRefusedError)")
    poll = Poll(clock, [down, down, (NOTHING, "t2")], held_s=30)
    cycle = Cycle(tmp_path, clock, [], code=1)  # the run cannot reach the homeserver either
    loop, log = _loop(tmp_path, clock, poll, cycle)
    assert [loop.step() for _ in range(3)] == ["cycle", "cycle", "idle"]
    assert cycle.runs == 2
    assert clock.slept == list(BACKOFF_S[:4])  # after each failed poll, and after each failed run
    assert log.events() == ["follow_poll_failed", "follow_poll_recovered"]
    assert log.lines[0][1]["retry_in_s"] == BACKOFF_S[0] and "Bearer" not in repr(log.lines)


def test_a_refresh_that_stores_no_state_is_retried_after_longer_and_longer_pauses(tmp_path):
    clock = Clock()
    cycle = Cycle(tmp_path, clock, [], code=1, drop=True)  # a room fails every run
    loop, _ = _loop(tmp_path, clock, Poll(clock, []), cycle)
    for _ in range(len(BACKOFF_S) + 2):
        assert loop.step() == "cycle"
    assert clock.slept == [*BACKOFF_S, BACKOFF_S[-1], BACKOFF_S[-1]]


def test_a_change_a_failing_refresh_cannot_get_past_does_not_make_it_run_back_to_back(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NEWS, "t2")] * 4)  # the old token shows the same message every time
    cycle = Cycle(tmp_path, clock, [], code=1)  # ...and every run fails (the old token stays)
    loop, _ = _loop(tmp_path, clock, poll, cycle)
    for _ in range(4):
        assert loop.step() == "cycle"
    assert clock.slept == list(BACKOFF_S[:4])


def test_with_scope_recheck_0_a_full_refresh_runs_every_poll_not_one_after_another(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t3"), (NOTHING, "t5")], held_s=30)
    cycle = Cycle(tmp_path, clock, ["t2", "t4", "t6"])
    loop, _ = _loop(tmp_path, clock, poll, cycle, recheck=0)
    assert [loop.step() for _ in range(5)] == ["cycle", "idle", "cycle", "idle", "cycle"]
    assert [wait for _, wait in poll.asked] == [30.0, 30.0]


def test_a_server_that_answers_a_held_poll_at_once_is_asked_at_most_once_a_second(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2"), (NOTHING, "t3")], held_s=0)
    loop, _ = _loop(tmp_path, clock, poll, Cycle(tmp_path, clock, []))
    loop.step()
    loop.step()
    assert clock.slept == [MIN_POLL_GAP_S, MIN_POLL_GAP_S]


def test_run_journals_its_start_and_its_counts_at_the_end(tmp_path):
    _stored(tmp_path)
    clock = Clock()
    poll = Poll(clock, [(NOTHING, "t2"), (NEWS, "t3")], held_s=30)
    cycle = Cycle(tmp_path, clock, ["t4"])
    log = Log()
    config = FollowConfig(state_dir=tmp_path, probe=poll, marks=lambda: MARKS, scope_recheck_s=300, poll_s=30)
    loop = FollowLoop(
        config=lambda: config, run_cycle=cycle, log=log, clock=clock, sleep=clock.sleep, stopping=lambda: cycle.runs > 0
    )
    loop.run()
    assert log.events() == ["follow_started", "follow_stopped"]
    assert log.lines[-1][1] == {"polls": 2, "cycles": 1}


class _HeldSync(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # http.server calls it by this name
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        ok = len(type(self).seen) == 1
        body = json.dumps({"next_batch": "s9"} if ok else {"errcode": "M_UNKNOWN_TOKEN"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_long_poll_asks_the_server_to_hold_the_sync_and_keeps_the_token_in_its_header():
    server = http.server.HTTPServer(("127.0.0.1", 0), _HeldSync)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = "syt_aHVnaW5u_SecretTokenValue_0a1b2c"
    probe = SyncProbe(f"http://127.0.0.1:{server.server_port}", token)
    try:
        assert probe.wait_for_changes("s1", 2.5) == (NOTHING, "s9")
        [(path, auth)] = _HeldSync.seen
        query = parse_qs(urlparse(path).query)
        assert query["since"] == ["s1"] and query["timeout"] == ["2500"]
        assert auth == f"Bearer {token}" and token not in path
        with pytest.raises(MatrixError) as refused:
            probe.wait_for_changes("s9", 2.5)
        assert refused.value.status == 401 and token not in str(refused.value)
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------ the refresh lock


def test_the_refresh_lock_is_held_by_one_at_a_time(tmp_path):
    first, second = RefreshLock(tmp_path), RefreshLock(tmp_path)
    assert first.acquire() and first.held
    assert not second.acquire() and not second.held
    first.release()
    assert second.acquire()
    second.release()
    assert (tmp_path / REFRESH_LOCK_FILE).read_bytes() == b""  # nothing is written into it


def test_a_link_planted_at_the_lock_is_refused(tmp_path):
    (tmp_path / REFRESH_LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PlantedLinkError):
        RefreshLock(tmp_path).acquire()
    assert not (tmp_path / "elsewhere").exists()


def test_a_refresh_started_while_another_holds_the_lock_ends_at_once_without_asking_anything(tmp_path):
    token = tmp_path / "token"
    token.write_text("syt_aHVnaW5u_SecretTokenValue_0a1b2c\n")
    token.chmod(0o600)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        # Nothing listens there: a run that asked the homeserver anything would fail (exit 1).
        "HUGINN_CHAT_HOMESERVER": "http://127.0.0.1:9",
        "HUGINN_CHAT_TOKEN_FILE": str(token),
        "HUGINN_CHAT_STATE_DIR": str(tmp_path / "state"),
        "HUGINN_CHAT_EMBED_MODEL_DIR": str(tmp_path / "no-model-here"),
    }
    lock = RefreshLock(tmp_path / "state")
    assert lock.acquire()
    try:
        proc = run_cli(env, "refresh")
    finally:
        lock.release()
    assert proc.returncode == 0, proc.stderr
    [line] = [json.loads(line) for line in proc.stderr.splitlines()]
    assert line["event"] == "run_skipped" and line["why"] == "another_refresh_running"
    assert load_sync_state(tmp_path / "state") is None and not (tmp_path / "state" / "index").exists()


PRELOAD_THREADS = """
import os, sys
from daemon.config import load_settings
from daemon.wiring import preload_refresh
preload_refresh(load_settings(None, qdrant_url=sys.argv[1] or None))
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.parametrize("qdrant_url", ["", "http://127.0.0.1:6333"])
def test_what_the_follow_process_imports_before_it_forks_starts_no_thread(qdrant_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    proc = subprocess.run(
        [sys.executable, "-c", PRELOAD_THREADS, qdrant_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"
