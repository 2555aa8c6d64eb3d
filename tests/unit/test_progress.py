"""The backfill progress bar: drawn only on a terminal, never garbling the journal lines."""

from __future__ import annotations

import asyncio
import io

from daemon.refresher.progress import TtyProgress, history_fraction
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
    bar.update("#town", 10, 2, 0.5)
    print('{"event": "room_progress"}', file=journal, flush=True)  # print writes "\n" separately
    bar.done()
    text = out.getvalue()
    assert '\r\x1b[K{"event": "room_progress"}\n' in text  # the line starts on a cleared row, whole
    assert text.count("50.0% #town: 10 events, 2 windows written") == 2  # drawn, then redrawn under it
    assert text.endswith("\r\x1b[K")  # done() leaves a clean row


def test_history_fraction():
    assert history_fraction(1000, 1500, 2000) == 0.5
    assert history_fraction(None, 1500, 2000) is None
    assert history_fraction(2000, 2000, 2000) is None


def test_a_backfill_reports_progress_through_history(tmp_path):
    from daemon.index.edge_writer import EdgeIndexWriter

    hs = FakeMatrix()
    hs.add_room("!pub", alias="#pub:hs.test")
    for i in range(50):
        hs.send("!pub", "@alice:hs.test", f"message {i}", gap_ms=60_000)
    seen = []
    with EdgeIndexWriter(tmp_path / "index") as index:
        refresher = Refresher(
            matrix=hs,
            index=index,
            embedder=FakeEmbedder(),
            log=ListLog(),
            policy=Policy.build(allowed=("!pub",)),
            options=RefreshOptions(page_size=10),
            clock=lambda: (hs.ts + 60_000) / 1000,
            progress=lambda *a: seen.append(a),
        )
        asyncio.run(refresher.run())
    counts = [s[1] for s in seen]
    assert counts == sorted(set(counts)) and counts[-1] == len(hs.rooms["!pub"].timeline)
    rooms = {s[0] for s in seen}
    assert rooms == {"#pub:hs.test"}
    fractions = [s[3] for s in seen if s[3] is not None]
    assert fractions == sorted(fractions) and 0.9 < fractions[-1] <= 1.0


def test_the_bar_never_reads_past_100_percent_or_below_0():
    out = Tty()
    bar = TtyProgress(out, min_interval_s=0)
    bar.update("#town", 10, 2, 1.25)  # the homeserver's clock runs ahead of ours
    assert "100.0% #town" in out.getvalue() and "125.0%" not in out.getvalue()
    bar.update("#town", 11, 2, -0.5)  # an event stamped before the first one read
    assert "  0.0% #town" in out.getvalue() and "-50.0%" not in out.getvalue()
