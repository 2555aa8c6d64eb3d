"""The backfill progress bar: drawn only on a terminal, never garbling the journal lines."""

from __future__ import annotations

import asyncio
import io

from daemon.refresher.progress import TtyProgress
from daemon.refresher.run import Refresher, RefreshOptions
from scope import Policy
from tests.fakes import FakeEmbedder, FakeMatrix, ListLog


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_only_a_terminal_gets_a_bar():
    assert TtyProgress.wanted(Tty()) is True
    assert TtyProgress.wanted(io.StringIO()) is False


def test_journal_lines_print_whole_under_the_bar():
    out = Tty()
    bar = TtyProgress(out, min_interval_s=0)
    journal = bar.journal_stream()
    bar.update("#town", 10, 2, 1, 2)
    print('{"event": "room_progress"}', file=journal, flush=True)  # print writes "\n" separately
    bar.done()
    text = out.getvalue()
    assert '\r\x1b[K{"event": "room_progress"}\n' in text  # the line starts on a cleared row, whole
    assert (
        text.count("[############............] room 2 of 2 #town: 10 events read, 2 windows written") == 2
    )  # drawn, then redrawn under it
    assert text.endswith("\r\x1b[K")  # done() leaves a clean row


def test_a_backfill_counts_rooms_left_whatever_its_timestamps_say(tmp_path):
    from daemon.index.edge_writer import EdgeIndexWriter

    hs = FakeMatrix()
    hs.add_room("!pub", alias="#pub:hs.test")
    hs.add_room("!two", alias="#two:hs.test")
    # Backdated history: the bar once read a room finished to the end as 14% through "time".
    for i in range(50):
        hs.send("!pub", "@alice:hs.test", f"message {i}", gap_ms=60_000)
        hs.send("!two", "@alice:hs.test", f"other {i}", gap_ms=60_000)
    seen = []
    with EdgeIndexWriter(tmp_path / "index") as index:
        refresher = Refresher(
            matrix=hs,
            index=index,
            embedder=FakeEmbedder(),
            log=ListLog(),
            policy=Policy.build(allowed=("!pub", "!two")),
            options=RefreshOptions(page_size=10),
            clock=lambda: (hs.ts + 365 * 86_400_000) / 1000,
            progress=lambda *a: seen.append(a),
        )
        asyncio.run(refresher.run())
    pub = [s for s in seen if s[0] == "#pub:hs.test"]
    counts = [s[1] for s in pub]
    assert counts == sorted(set(counts)) and counts[-1] == len(hs.rooms["!pub"].timeline)
    assert {s[0] for s in seen} == {"#pub:hs.test", "#two:hs.test"}
    assert {(s[3], s[4]) for s in pub} == {(0, 2)}
    assert {(s[3], s[4]) for s in seen if s[0] == "#two:hs.test"} == {(1, 2)}


def test_the_bar_never_reads_past_its_rooms():
    out = Tty()
    bar = TtyProgress(out, min_interval_s=0)
    bar.update("#town", 10, 2, 5, 3)
    assert "room 3 of 3 #town" in out.getvalue() and "room 6" not in out.getvalue()
    bar.update("#town", 11, 2, 0, 0)
    assert "room 1 of 1 #town" in out.getvalue()
