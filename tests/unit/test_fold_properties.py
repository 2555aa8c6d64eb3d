"""The fold's three promises, checked over generated room histories:

(a) pages do not matter: folding a history in any pages equals folding it in one;
(b) a crash between a window write and the cursor is harmless: resuming from stored windows and
    re-feeding events already folded ends with the windows of one clean fold;
(c) runs do not matter: resuming from stored windows (no replay) equals one clean fold;
(d) memory does not matter: releasing settled windows after every write changes nothing stored;
(e) threads: every stored message sits in exactly one window, of its own timeline (the main one
    or its thread's), and each timeline keeps stream order across its windows.

Histories mix the main timeline with thread messages (``Message.thread_root``) and replies, so
(a)-(d) hold for threads too: a thread's open window is found again by its root's id.

In (b) and (c) the one thing a resumed fold cannot know is the body before an edit that an
earlier run stored; a redaction of such an edit must then be reported in ``unknown_redactions``
(the refresher rebuilds the room), and only then may the windows differ.

The shell here stands in for ``daemon/refresher/run.py`` and the index: windows cross from one run to
the next only as payloads (``window_payload`` -> ``window_from_payload``).
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from chunker.events import Edit, Event, Message, Other, Redaction
from chunker.fold import Bounds, PurgeSpan, RoomFold
from chunker.windows import Window
from daemon.index.schema import window_from_payload, window_payload

ROOM = "!room:example.org"
SENDERS = ["@alice:example.org", "@bob:example.org", "@carol:other.net"]
T0 = 1_700_000_000_000
GAP = 60_000
BOUNDS = Bounds(max_bytes=48, max_gap_ms=GAP)
TS_STEPS = [0, 1, 1_000, GAP - 1, GAP, GAP + 1, 3 * GAP]
BODY_SIZES = [1, 5, 17, 30, 38, 40, 41, 48, 60]  # "alice: " + body around max_bytes
EXAMPLES = settings(max_examples=200, deadline=None)

# ---- generated histories --------------------------------------------------------------

pick = st.integers(min_value=0, max_value=5)  # how far back: recent targets interact more
step = st.sampled_from(TS_STEPS)
ops = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.sampled_from(BODY_SIZES), step),
    st.tuples(st.just("send"), st.integers(0, 1), st.sampled_from(BODY_SIZES), step),
    st.tuples(st.just("edit"), pick, st.booleans(), st.sampled_from(BODY_SIZES), step),
    st.tuples(
        st.just("redact"), st.sampled_from(["message", "message", "edit", "other", "redaction", "missing"]), pick, step
    ),
    st.tuples(st.just("other"), st.integers(0, 2), step),
    st.tuples(st.just("edit_of_edit"), pick, step),
    st.tuples(st.just("thread"), pick, st.integers(0, 2), st.booleans(), st.sampled_from(BODY_SIZES), step),
)


def body(n: int, size: int) -> str:
    # Distinct per event (a wrong revert shows), some multibyte (bytes are not characters).
    return (f"{n}:" + ("é" if n % 3 == 0 else "x") * size)[:size]


def build(op_list) -> list[Event]:
    events: list[Event] = []
    by_kind: dict[type, list[Event]] = {Message: [], Edit: [], Other: [], Redaction: []}
    ts = T0
    for n, op in enumerate(op_list):
        kind, *args, ts_step = op
        ts += ts_step
        event_id = f"$ev{n}"
        if kind == "send":
            event: Event = Message(event_id, SENDERS[args[0]], ts, body(n, args[1]))
        elif kind == "edit":
            targets = by_kind[Message]
            if targets:
                target = targets[-1 - args[0] % len(targets)]
                same = target.sender
                sender = same if args[1] else next(s for s in SENDERS if s != same)
                event = Edit(event_id, sender, ts, target.event_id, body(n, args[2]))
            else:
                event = Edit(event_id, SENDERS[0], ts, "$never-sent", body(n, args[2]))
        elif kind == "edit_of_edit":
            targets = by_kind[Edit]
            target = targets[-1 - args[0] % len(targets)] if targets else None
            event = Edit(
                event_id, target.sender if target else SENDERS[0], ts, target.event_id if target else "$x", body(n, 9)
            )
        elif kind == "thread":
            # A reply in the thread of a recent main-timeline message (or of a root never seen),
            # sometimes also a reply to the latest message.
            roots = [m for m in by_kind[Message] if m.thread_root is None]
            root = roots[-1 - args[0] % len(roots)].event_id if roots else "$root-unseen"
            reply = by_kind[Message][-1].event_id if args[2] and by_kind[Message] else None
            event = Message(event_id, SENDERS[args[1]], ts, body(n, args[3]), reply_to=reply, thread_root=root)
        elif kind == "redact":
            category = {"message": Message, "edit": Edit, "other": Other, "redaction": Redaction}.get(args[0])
            targets = by_kind.get(category, [])
            target_id = targets[-1 - args[1] % len(targets)].event_id if targets else f"$missing{args[1]}"
            event = Redaction(event_id, SENDERS[1], ts, target_id)
        else:
            event = Other(event_id, SENDERS[args[0]], ts, "m.reaction", "m.reaction")
        by_kind[type(event)].append(event)
        events.append(event)
    return events


@st.composite
def histories(draw, max_events: int = 40):
    size = draw(st.integers(0, max_events))  # plain st.lists would mostly draw a handful of ops
    events = build(draw(st.lists(ops, min_size=size, max_size=size)))
    purges: tuple[PurgeSpan, ...] = ()
    if events and draw(st.booleans()):
        a, b = sorted(draw(st.lists(st.sampled_from([e.ts for e in events]), min_size=2, max_size=2)))
        purges = (PurgeSpan(a, b),)
    return events, purges


def pages(draw, events: list[Event], max_cuts: int = 5) -> list[list[Event]]:
    cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=max_cuts)))
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in zip(bounds, bounds[1:])]


# ---- the shell and the index, in miniature -----------------------------------------------


class Index:
    """Window payloads by point id; ``windows_with_events`` filters like the adapters do."""

    def __init__(self) -> None:
        self.points: dict[str, dict] = {}

    def write(self, fold: RoomFold) -> None:
        changes = fold.take_changes()
        for window in changes.upserts:
            self.points[window.point_id] = window_payload(window, room_alias=None, chat_version="test")
        for point_id in changes.deletes:
            self.points.pop(point_id, None)

    def windows_with_events(self, event_ids: set[str]) -> list[Window]:
        return [
            window_from_payload(p)
            for p in self.points.values()
            if event_ids & (set(p["event_ids"]) | set(p["redacted_ids"]) | {p["timeline"]})
        ]

    def get(self, point_id: str | None) -> Window | None:
        return window_from_payload(self.points[point_id]) if point_id in self.points else None

    def windows(self) -> dict[str, Window]:
        return {pid: window_from_payload(p) for pid, p in self.points.items()}


def run(index: Index, page_list, purges, *, incremental: bool, open_id: str | None, release: bool = False) -> RoomFold:
    """One refresher run over one room, as daemon/refresher/run.py drives the fold (a checkpoint after
    every page; ``release``: then drop what the index now holds, as the refresher does)."""
    fold = RoomFold(ROOM, BOUNDS, purges=purges, open_window=index.get(open_id), incremental=incremental)
    for page in page_list:
        fold.provide(index.windows_with_events(fold.lookups(page)))
        fold.feed(page)
        index.write(fold)
        if release:
            fold.drop_written_windows()
    return fold


def one_fold(events, purges) -> RoomFold:
    fold = RoomFold(ROOM, BOUNDS, purges=purges)
    fold.feed(events)
    return fold


def check_resumed_run(events, start: int, stored_end: int, fold: RoomFold, purges) -> bool:
    """Checks the unknown redactions of a run that fed ``events[start:]`` on top of the stored
    windows of ``events[:stored_end]``. Returns whether the run reported a redaction of an edit
    (the refresher then rebuilds the room, so its windows may differ)."""
    by_id = {e.event_id: e for e in events}
    purged = lambda ts: any(s.covers(ts) for s in purges)  # noqa: E731
    first_new = next(
        (i for i in range(stored_end, len(events)) if isinstance(events[i], Message) and not purged(events[i].ts)),
        len(events),
    )
    required = []
    for i in range(start, len(events)):
        event = events[i]
        if not isinstance(event, Redaction):
            continue
        stored_or_fed = {e.event_id for e in events[:i] if isinstance(e, Message) and not purged(e.ts)}
        stored_or_fed |= {e.event_id for e in events[start:i]}
        if event.target_id not in stored_or_fed:
            required.append(event)
    reported = fold.unknown_redactions
    assert set(required) <= set(reported), "a redaction the fold cannot place went unreported"
    for extra in (r for r in reported if r not in required):
        # The only other report: reverting an edit this run fed before its first new message
        # onto a stored body that may already hold that edit (a replay).
        assert isinstance(by_id.get(extra.target_id), Edit), extra
        assert start <= events.index(by_id[extra.target_id]) < first_new, extra
    return any(isinstance(by_id.get(r.target_id), Edit) for r in reported)


# ---- (a) pages ----------------------------------------------------------------------


@EXAMPLES
@given(histories(), st.booleans(), st.data())
def test_paging_does_not_change_the_windows(history, incremental, data):
    events, purges = history
    one = RoomFold(ROOM, BOUNDS, purges=purges, incremental=incremental)
    one.feed(events)
    index = Index()
    paged = RoomFold(ROOM, BOUNDS, purges=purges, incremental=incremental)
    for page in pages(data.draw, events):
        paged.feed(page)
        index.write(paged)
    assert paged.windows() == one.windows()
    assert paged.open_window_id == one.open_window_id
    assert paged.unknown_redactions == one.unknown_redactions
    # What take_changes handed out, written to an index, is exactly what the fold holds.
    assert index.windows() == {w.point_id: w for w in one.windows()}


# ---- (b) crash and replay ------------------------------------------------------------------


@EXAMPLES
@given(histories(), st.data())
def test_replaying_already_stored_events_after_a_crash_is_harmless(history, data):
    events, purges = history
    stored_end = data.draw(st.integers(0, len(events)), label="stored_end")
    resume_at = data.draw(st.integers(0, stored_end), label="resume_at")
    index = Index()
    first = run(index, pages(data.draw, events[:stored_end]), purges, incremental=False, open_id=None)
    # The cursor is either current or the one from before the crash (written before the windows).
    if data.draw(st.booleans(), label="stale_cursor"):
        open_id = one_fold(events[:resume_at], purges).open_window_id
    else:
        open_id = first.open_window_id
    second = run(index, pages(data.draw, events[resume_at:]), purges, incremental=True, open_id=open_id)
    if not check_resumed_run(events, resume_at, stored_end, second, purges):
        assert index.windows() == {w.point_id: w for w in one_fold(events, purges).windows()}


# ---- (c) runs ------------------------------------------------------------------------------


@EXAMPLES
@given(histories(), st.data())
def test_resuming_between_runs_from_stored_windows_equals_one_fold(history, data):
    events, purges = history
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=3), label="runs"))
    starts = [0, *cuts]
    ends = [*cuts, len(events)]
    index = Index()
    open_id = None
    may_need_rebuild = False
    for n, (start, end) in enumerate(zip(starts, ends)):
        fold = run(index, pages(data.draw, events[start:end]), purges, incremental=n > 0, open_id=open_id)
        if n > 0:
            may_need_rebuild |= check_resumed_run(events[:end], start, start, fold, purges)
        open_id = fold.open_window_id
    if not may_need_rebuild:
        assert index.windows() == {w.point_id: w for w in one_fold(events, purges).windows()}


def test_a_cross_run_redaction_of_an_edit_is_reported_not_guessed():
    original = Message("$m", SENDERS[0], T0, "original")
    fix = Edit("$e", SENDERS[0], T0 + 1, "$m", "fixed")
    index = Index()
    first = run(index, [[original, fix]], (), incremental=False, open_id=None)
    redaction = Redaction("$r", SENDERS[1], T0 + 2, "$e")
    second = run(index, [[redaction]], (), incremental=True, open_id=first.open_window_id)
    assert second.unknown_redactions == [redaction]


# ---- (d) releasing settled windows -------------------------------------------------------


@EXAMPLES
@given(histories(), st.data())
def test_releasing_settled_windows_after_every_write_changes_nothing_stored(history, data):
    # A backfill (nothing stored) or a resumed run that may replay what an earlier run stored;
    # small pages, so windows are released and handed back often.
    events, purges = history
    stored_end = data.draw(st.integers(0, len(events)), label="stored_end")
    resume_at = data.draw(st.integers(0, stored_end), label="resume_at")
    earlier = Index()
    first = run(earlier, pages(data.draw, events[:stored_end]), purges, incremental=False, open_id=None)
    # The cursor is current, or the one from before a crash (written before the windows).
    stale = resume_at < stored_end
    open_id = one_fold(events[:resume_at], purges).open_window_id if stale else first.open_window_id
    incremental = stored_end > 0 or data.draw(st.booleans(), label="incremental")
    page_list = pages(data.draw, events[resume_at:], max_cuts=15)
    kept, released = Index(), Index()
    kept.points, released.points = dict(earlier.points), dict(earlier.points)
    holding = run(kept, page_list, purges, incremental=incremental, open_id=open_id)
    releasing = run(released, page_list, purges, incremental=incremental, open_id=open_id, release=True)
    assert released.windows() == kept.windows()
    assert releasing.unknown_redactions == holding.unknown_redactions
    assert releasing.open_window_id == holding.open_window_id


# ---- (e) threads ------------------------------------------------------------------------


@EXAMPLES
@given(histories(), st.data())
def test_every_message_lands_in_one_window_of_its_own_timeline_in_stream_order(history, data):
    events, purges = history
    index = Index()
    run(index, pages(data.draw, events, max_cuts=8), purges, incremental=False, open_id=None, release=True)
    stored = list(index.windows().values())
    placed = [m.event_id for w in stored for m in w.messages]
    assert len(placed) == len(set(placed))  # exactly once
    messages = {e.event_id: e for e in events if isinstance(e, Message)}
    redacted = {e.target_id for e in events if isinstance(e, Redaction)}
    live = {i for i, m in messages.items() if i not in redacted and not any(s.covers(m.ts) for s in purges)}
    assert set(placed) == live
    position = {e.event_id: n for n, e in enumerate(events)}
    timelines: dict[str | None, list[Window]] = {}
    for window in stored:
        assert all(messages[m.event_id].thread_root == window.thread_root for m in window.messages)
        assert all(m.reply_to == messages[m.event_id].reply_to for m in window.messages)
        timelines.setdefault(window.thread_root, []).append(window)
    for windows in timelines.values():
        # Windows of one timeline follow one another: open-to-close in stream order, no overlap.
        spans = sorted((position[w.anchor_id], [position[m.event_id] for m in w.messages]) for w in windows)
        flat = [p for _, ps in spans for p in ps]
        assert flat == sorted(flat)
        assert sum(not w.closed for w in windows) <= 1  # one open window per timeline


def test_thread_replies_interleaved_with_the_main_timeline_get_their_own_windows():
    root = Message("$root", SENDERS[0], T0, "q?")
    events = [
        root,
        Message("$t1", SENDERS[1], T0 + 1, "a1", thread_root="$root"),
        Message("$m1", SENDERS[2], T0 + 2, "m1"),
        Message("$t2", SENDERS[0], T0 + 3, "a2", reply_to="$t1", thread_root="$root"),
        Message("$m2", SENDERS[1], T0 + 4, "m2"),
        Edit("$e", SENDERS[0], T0 + 5, "$t2", "a2 fixed"),
        Redaction("$x", SENDERS[1], T0 + 6, "$t1"),
    ]
    fold = one_fold(events, ())
    by_timeline = {w.thread_root: w for w in fold.windows()}
    assert [m.event_id for m in by_timeline[None].messages] == ["$root", "$m1", "$m2"]
    thread = by_timeline["$root"]
    assert [(m.event_id, m.body, m.reply_to) for m in thread.messages] == [("$t2", "a2 fixed", "$t1")]
    assert thread.redacted_ids == ["$t1"] and thread.anchor_id == "$t1"
