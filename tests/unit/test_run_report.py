"""The terminal summary of a refresh: the run's decisions, read from the journal as it is written."""

from __future__ import annotations

import asyncio
import io

from daemon import journal
from daemon.refresher.run import Refresher, RefreshOptions
from daemon.refresher.run_report import RunReport, render_run
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix


def test_a_real_run_through_the_journal_ends_with_its_decisions_and_totals(tmp_path) -> None:
    from daemon.index.edge_writer import EdgeIndexWriter

    hs = FakeMatrix()
    hs.add_room("!pub", alias="#pub:hs.test")
    hs.add_room(
        "!enc",
        alias="#enc:hs.test",
        extra_state=[{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}],
    )
    for i in range(5):
        hs.send("!pub", "@alice:hs.test", f"message {i}")
    report = RunReport()
    stream = io.StringIO()
    journal.configure(stream=stream, log_format="json", observer=report.observe)
    try:
        with EdgeIndexWriter(tmp_path / "index") as index:
            asyncio.run(
                Refresher(
                    matrix=hs,
                    index=index,
                    embedder=FakeEmbedder(),
                    log=journal.get_logger(),
                    policy=Policy.build(allowed=("!pub", "!enc")),
                    options=RefreshOptions(),
                ).run()
            )
    finally:
        journal.configure()
    lines = report.lines()
    assert "admitted #pub:hs.test" in lines
    [refused] = [line for line in lines if line.startswith("refused")]
    assert "#enc:hs.test" in refused and "reason: encrypted" in refused and "m.megolm.v1.aes-sha2" in refused
    assert lines[-1].startswith("run summary: 1 rooms admitted, 1 refused, 0 failed; ")
    assert "windows written" in lines[-1]
    # The journal itself is unchanged by the observer: every line is still written, as JSON.
    assert stream.getvalue().count('"event": "room_refused"') + stream.getvalue().count('"event":"room_refused"') == 1


def test_a_stopped_run_says_by_which_signal_and_keeps_no_other_lines() -> None:
    report = RunReport()
    for event in (
        {"event": "room_progress", "events_read": 3},
        {"event": "room_failed", "room_id": "!a", "why": "homeserver", "error": "timeout"},
        {"event": "run_interrupted", "signal": "SIGTERM", "rooms_admitted": 2, "seconds": 1.5},
    ):
        report.observe(event)
    assert [e["event"] for e in report.events] == ["room_failed", "run_interrupted"]
    lines = render_run(report.events)
    assert lines[0] == "FAILED   !a: homeserver timeout"
    assert lines[-1].startswith("run summary (stopped by SIGTERM): 2 rooms admitted, 0 refused, 0 failed")
