"""The fold's rules, one test per rule (docs/design.md, "The fold")."""

from __future__ import annotations

import pytest

from chunker.events import Edit, Message, Other, Redaction
from chunker.fold import Bounds, Changes, PurgeSpan, RoomFold
from chunker.windows import (
    StoredMessage,
    Window,
    window_bytes,
    window_point_id,
)
from daemon.index.schema import window_from_payload, window_payload

ROOM = "!room:example.org"
ALICE = "@alice:example.org"
BOB = "@bob:example.org"
T0 = 1_700_000_000_000
GAP = 60_000
BOUNDS = Bounds(max_bytes=40, max_gap_ms=GAP)


def msg(n: int, *, sender: str = ALICE, at: int = 0, body: str = "hi") -> Message:
    return Message(f"$m{n}", sender, T0 + at, body)


def edit(n: int, target: str, body: str, *, sender: str = ALICE, at: int = 0) -> Edit:
    return Edit(f"$e{n}", sender, T0 + at, target, body)


def redact(n: int, target: str, *, at: int = 0) -> Redaction:
    return Redaction(f"$r{n}", BOB, T0 + at, target)


def other(n: int) -> Other:
    return Other(f"$o{n}", BOB, T0, "m.reaction", "m.reaction")


def fold(*events, **kwargs) -> RoomFold:
    f = RoomFold(ROOM, kwargs.pop("bounds", BOUNDS), **kwargs)
    f.feed(events)
    return f


def layout(f: RoomFold) -> list[list[str]]:
    return [[m.event_id for m in w.messages] for w in f.windows()]


def body_of(f: RoomFold, event_id: str) -> str | None:
    for w in f.windows():
        for m in w.messages:
            if m.event_id == event_id:
                return m.body
    return None


def stored(*messages: Message, redacted=(), closed=False, anchor=None) -> Window:
    return Window(
        ROOM,
        anchor or messages[0].event_id,
        [StoredMessage(m.event_id, m.sender, m.ts, m.body) for m in messages],
        list(redacted),
        closed,
    )


# ---- layout ---------------------------------------------------------------------------


def test_messages_within_bounds_share_a_window_and_the_byte_bound_is_inclusive():
    # "alice: hi" is 9 bytes; three lines joined by newlines are 29 bytes.
    exact = Bounds(max_bytes=29, max_gap_ms=GAP)
    assert layout(fold(msg(1), msg(2), msg(3), bounds=exact)) == [["$m1", "$m2", "$m3"]]
    assert window_bytes(fold(msg(1), msg(2), msg(3), bounds=exact).windows()[0]) == 29
    one_less = Bounds(max_bytes=28, max_gap_ms=GAP)
    assert layout(fold(msg(1), msg(2), msg(3), bounds=one_less)) == [["$m1", "$m2"], ["$m3"]]


def test_bytes_are_utf8_bytes_not_characters():
    # "alice: é" is 8 characters but 9 bytes; two lines are 19 bytes.
    tight = Bounds(max_bytes=18, max_gap_ms=GAP)
    assert layout(fold(msg(1, body="é"), msg(2, body="é"), bounds=tight)) == [["$m1"], ["$m2"]]


def test_gap_is_more_than_max_gap():
    f = fold(msg(1), msg(2, at=GAP), msg(3, at=2 * GAP + 1))
    assert layout(f) == [["$m1", "$m2"], ["$m3"]]
    first, second = f.windows()
    assert first.closed and not second.closed
    assert f.open_window_id == second.point_id == window_point_id(ROOM, "$m3")


def test_a_message_larger_than_max_bytes_gets_its_own_window():
    huge = "x" * 100
    f = fold(msg(1), msg(2, body=huge), msg(3))
    assert layout(f) == [["$m1"], ["$m2"], ["$m3"]]


def test_other_events_do_not_break_a_window():
    assert layout(fold(msg(1), other(1), msg(2))) == [["$m1", "$m2"]]


def test_closed_windows_never_take_messages_again():
    f = fold(msg(1), msg(2, at=GAP + 1), redact(1, "$m1"), msg(3, at=GAP + 2))
    assert layout(f) == [[], ["$m2", "$m3"]]
    f.feed([redact(2, "$m2"), redact(3, "$m3"), msg(4, at=GAP + 3)])
    assert layout(f) == [[], [], ["$m4"]]


def test_window_ids_come_from_their_anchor_message():
    f = fold(msg(1), msg(2), msg(3, at=GAP + 1))
    assert [w.point_id for w in f.windows()] == [window_point_id(ROOM, "$m1"), window_point_id(ROOM, "$m3")]
    assert [w.anchor_id for w in f.windows()] == ["$m1", "$m3"]


# ---- edits ----------------------------------------------------------------------------


def test_edit_by_the_original_sender_replaces_the_body_latest_wins():
    f = fold(msg(1), edit(1, "$m1", "first fix"), edit(2, "$m1", "second fix"))
    assert body_of(f, "$m1") == "second fix"


def test_edit_by_another_sender_is_dropped():
    f = fold(msg(1), edit(1, "$m1", "hijack", sender=BOB))
    assert body_of(f, "$m1") == "hi"


def test_edit_of_unknown_redacted_or_purged_target_is_dropped():
    f = fold(edit(1, "$nowhere", "ghost"), msg(1), redact(1, "$m1"), edit(2, "$m1", "after redaction"))
    assert layout(f) == [[]]
    assert "ghost" not in repr(f.windows()) and "after redaction" not in repr(f.windows())
    purged = fold(msg(1), msg(2, at=10), edit(1, "$m2", "late"), purges=[PurgeSpan(T0 + 10, T0 + 10)])
    assert layout(purged) == [["$m1"]] and "late" not in repr(purged.windows())


def test_edit_whose_target_is_an_edit_is_dropped():
    f = fold(msg(1), edit(1, "$m1", "fixed"), edit(2, "$e1", "edit of an edit"))
    assert body_of(f, "$m1") == "fixed"


def test_edit_of_a_stored_message_marks_its_window_dirty():
    f = RoomFold(ROOM, BOUNDS, incremental=True)
    f.provide([stored(msg(1), msg(2))])
    assert f.take_changes() == Changes([], [])
    f.feed([edit(1, "$m2", "better")])
    changes = f.take_changes()
    assert [[m.body for m in w.messages] for w in changes.upserts] == [["hi", "better"]]
    assert changes.deletes == []


def test_redacting_the_latest_edit_reverts_to_the_edit_before_it():
    f = fold(msg(1, body="v0"), edit(1, "$m1", "v1"), edit(2, "$m1", "v2"), redact(1, "$e2"))
    assert body_of(f, "$m1") == "v1"
    f.feed([redact(2, "$e1")])
    assert body_of(f, "$m1") == "v0"


def test_redacting_an_older_edit_keeps_the_latest_then_the_chain_still_reverts():
    f = fold(msg(1, body="v0"), edit(1, "$m1", "v1"), edit(2, "$m1", "v2"), redact(1, "$e1"))
    assert body_of(f, "$m1") == "v2"
    f.feed([redact(2, "$e2")])
    assert body_of(f, "$m1") == "v0"


def test_redacting_the_original_removes_it_and_its_edits_never_bring_it_back():
    f = fold(msg(1), msg(2), edit(1, "$m1", "v1"), redact(1, "$m1"), redact(2, "$e1"), edit(2, "$m1", "v2"))
    assert layout(f) == [["$m2"]]
    assert f.windows()[0].redacted_ids == ["$m1"]
    assert "v1" not in repr(f.windows()) and "v2" not in repr(f.windows())


# ---- redactions -----------------------------------------------------------------------


def test_redaction_removes_the_message_records_its_id_and_dirties_the_window():
    f = fold(msg(1, body="keep"), msg(2, body="secret"))
    f.take_changes()
    f.feed([redact(1, "$m2")])
    (changed,) = f.take_changes().upserts
    assert [m.event_id for m in changed.messages] == ["$m1"]
    assert changed.redacted_ids == ["$m2"]
    assert "secret" not in repr(changed)


def test_a_fully_redacted_window_stays_empty_with_its_point_id():
    f = fold(msg(1), msg(2), redact(1, "$m1"), redact(2, "$m2"))
    (w,) = f.windows()
    assert w.messages == [] and w.redacted_ids == ["$m1", "$m2"]
    assert w.point_id == window_point_id(ROOM, "$m1")
    assert f.take_changes().deletes == []


def test_redaction_of_a_held_tombstone_is_a_no_op():
    f = fold(msg(1), msg(2), redact(1, "$m1"))
    f.take_changes()
    f.feed([Redaction("$r9", BOB, T0, "$m1")])
    assert f.take_changes() == Changes([], [])
    assert f.windows()[0].redacted_ids == ["$m1"]


def test_redactions_of_events_seen_by_this_fold_are_not_unknown():
    f = fold(msg(1), other(1), edit(1, "$m1", "v1", sender=BOB), redact(1, "$o1"), redact(2, "$e1"), incremental=True)
    assert f.unknown_redactions == []
    assert body_of(f, "$m1") == "hi"


def test_unknown_redaction_is_reported_when_incremental_and_ignored_from_the_start():
    unknown = redact(1, "$from-an-earlier-run")
    incremental = fold(msg(1), unknown, incremental=True)
    assert incremental.unknown_redactions == [unknown]
    assert layout(incremental) == [["$m1"]]
    from_start = fold(msg(1), unknown)
    assert from_start.unknown_redactions == []


def test_redaction_of_a_stored_message_is_known():
    f = RoomFold(ROOM, BOUNDS, incremental=True)
    page = [redact(1, "$m1")]
    assert f.lookups(page) == {"$m1"}
    f.provide([stored(msg(1), msg(2))])
    f.feed(page)
    assert f.unknown_redactions == []
    assert layout(f) == [["$m2"]]


def test_redacting_an_edit_of_a_stored_message_fed_after_new_messages_reverts_to_the_stored_body():
    stored_window = stored(msg(1, body="as stored"))
    f = RoomFold(ROOM, BOUNDS, incremental=True, open_window=stored_window)
    f.feed([msg(2, at=1), edit(1, "$m1", "edited now"), redact(1, "$e1")])
    assert f.unknown_redactions == []
    assert body_of(f, "$m1") == "as stored"


def test_redacting_an_edit_that_may_already_be_in_the_stored_body_asks_for_a_rebuild():
    # A crash after writing "v1" but before the cursor: the next run re-reads the edit, then the
    # edit is redacted. The original body is not stored anywhere, so only a rebuild can restore it.
    stored_window = stored(msg(1, body="v1"))
    f = RoomFold(ROOM, BOUNDS, incremental=True, open_window=stored_window)
    replayed_edit = edit(1, "$m1", "v1")
    redaction = redact(1, "$e1")
    f.feed([replayed_edit, redaction])
    assert f.unknown_redactions == [redaction]


# ---- duplicates -----------------------------------------------------------------------


def test_a_replayed_message_changes_nothing_and_moves_the_open_window():
    f = fold(msg(1), msg(2), msg(3, at=GAP + 1))
    f.take_changes()
    f.feed([msg(1, body="replayed text is ignored")])
    assert f.take_changes() == Changes([], [])
    assert f.open_window_id == window_point_id(ROOM, "$m1")
    assert body_of(f, "$m1") == "hi"
    # The first window is closed, so the next new message opens a third window.
    f.feed([msg(4, at=GAP + 2)])
    assert layout(f) == [["$m1", "$m2"], ["$m3"], ["$m4"]]


def test_a_replayed_redacted_message_stays_redacted():
    f = fold(msg(1), msg(2), redact(1, "$m1"), msg(1))
    assert layout(f) == [["$m2"]]


def test_a_replayed_message_found_in_the_index_is_not_stored_twice():
    f = RoomFold(ROOM, BOUNDS, incremental=True)
    page = [msg(1), msg(2)]
    assert f.lookups(page) == {"$m1", "$m2"}
    f.provide([stored(msg(1), msg(2))])
    f.feed(page)
    assert f.take_changes() == Changes([], [])
    assert layout(f) == [["$m1", "$m2"]]


def test_a_stored_window_anchored_at_a_new_message_is_adopted():
    anchored_here = stored(msg(2), anchor="$m1")
    f = RoomFold(ROOM, BOUNDS, incremental=True)
    f.provide([anchored_here])
    f.feed([msg(1)])
    assert f.open_window_id == window_point_id(ROOM, "$m1")
    assert f.take_changes() == Changes([], [])
    assert len(f.windows()) == 1


# ---- purges ---------------------------------------------------------------------------


def test_purged_messages_are_dropped_on_arrival_with_inclusive_bounds():
    f = fold(msg(1, at=0), msg(2, at=10), msg(3, at=20), msg(4, at=21), purges=[PurgeSpan(T0 + 10, T0 + 20)])
    assert layout(f) == [["$m1", "$m4"]]
    assert f.lookups([msg(5, at=15)]) == set()


def test_purge_spans_apply_to_provided_windows_at_once():
    spans = [PurgeSpan(T0 + 10, T0 + 20)]
    partly = stored(msg(1, at=0), msg(2, at=10))
    wholly_but_tombstoned = stored(msg(3, at=15), redacted=["$m9"])
    wholly = stored(msg(4, at=20), msg(5, at=20))
    f = RoomFold(ROOM, BOUNDS, purges=spans, incremental=True)
    f.provide([partly, wholly_but_tombstoned, wholly])
    changes = f.take_changes()
    assert [[m.event_id for m in w.messages] for w in changes.upserts] == [["$m1"], []]
    assert changes.deletes == [wholly.point_id]
    assert [w.point_id for w in f.windows()] == [partly.point_id, wholly_but_tombstoned.point_id]
    # A replay of a purged message does not bring it back.
    f.feed([msg(2, at=10), msg(4, at=20)])
    assert f.take_changes() == Changes([], [])


def test_a_purged_away_open_window_is_deleted_and_the_next_message_opens_a_new_one():
    f = RoomFold(ROOM, BOUNDS, purges=[PurgeSpan(T0, T0)], open_window=stored(msg(1)), incremental=True)
    assert f.open_window_id is None
    f.feed([msg(2, at=1)])
    changes = f.take_changes()
    assert changes.deletes == [window_point_id(ROOM, "$m1")]
    assert [w.anchor_id for w in changes.upserts] == ["$m2"]


# ---- take_changes, lookups, inputs ----------------------------------------------------


def test_take_changes_lists_each_window_once_in_its_final_state_and_closing_counts():
    f = fold(msg(1), msg(2), edit(1, "$m1", "v1"), edit(2, "$m1", "v2"))
    first = f.take_changes()
    assert len(first.upserts) == 1 and first.upserts[0].messages[0].body == "v2"
    assert f.take_changes() == Changes([], [])
    f.feed([msg(3, at=GAP + 1)])
    closed, opened = f.take_changes().upserts
    assert closed.closed and closed.anchor_id == "$m1"
    assert not opened.closed and opened.anchor_id == "$m3"


def test_take_changes_returns_snapshots():
    f = fold(msg(1))
    (snapshot,) = f.take_changes().upserts
    f.feed([edit(1, "$m1", "later")])
    assert snapshot.messages[0].body == "hi"


def test_lookups_skip_what_the_fold_already_holds_or_has_seen():
    f = fold(msg(1), edit(1, "$m1", "v1"), other(1), incremental=True)
    page = [
        msg(1),
        msg(2),
        edit(2, "$m1", "v2"),
        edit(3, "$old", "x"),
        redact(1, "$e1"),
        redact(2, "$o1"),
        redact(3, "$m0"),
    ]
    assert f.lookups(page) == {"$m2", "$old", "$m0"}


def test_from_the_start_of_history_fed_non_messages_are_not_remembered_and_still_not_unknown():
    # Nothing would be reported from the start of history anyway, so the fold keeps no per-event
    # ids there; the shell merely looks up a few ids no window can hold.
    f = fold(msg(1), edit(1, "$m1", "v1", sender=BOB), other(1))
    page = [redact(1, "$e1"), redact(2, "$o1")]
    assert f.lookups(page) == {"$e1", "$o1"}
    f.feed(page)
    assert f.unknown_redactions == []
    assert layout(f) == [["$m1"]] and body_of(f, "$m1") == "hi"


def test_provided_window_of_another_room_is_refused():
    with pytest.raises(ValueError, match="room_id"):
        RoomFold(ROOM, BOUNDS).provide([Window("!elsewhere:example.org", "$a", [], [], False)])


def test_feed_refuses_what_is_not_an_event():
    with pytest.raises(TypeError, match="dict"):
        RoomFold(ROOM, BOUNDS).feed([{"event_id": "$x"}])


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Bounds(max_bytes=0), "max_bytes"),
        (lambda: Bounds(max_gap_ms=-1), "max_gap_ms"),
        (lambda: Bounds(max_bytes=True), "max_bytes"),
        (lambda: PurgeSpan(10, 9), "ts_from"),
        (lambda: PurgeSpan("0", 9), "ts_from"),
        (lambda: PurgeSpan(0, 9.5), "ts_to"),
    ],
)
def test_bad_bounds_and_spans_name_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()


# ---- releasing settled windows --------------------------------------------------------


class Store:
    """The index in miniature: what take_changes handed out, written as payloads."""

    def __init__(self) -> None:
        self.points: dict[str, dict] = {}

    def checkpoint(self, f: RoomFold) -> int:
        changes = f.take_changes()
        for window in changes.upserts:
            self.points[window.point_id] = window_payload(window, room_alias=None, chat_version="t")
        for point_id in changes.deletes:
            self.points.pop(point_id, None)
        return f.drop_written_windows()

    def serve(self, f: RoomFold, page) -> None:
        wanted = f.lookups(page)
        f.provide(
            window_from_payload(p)
            for p in self.points.values()
            if wanted & (set(p["event_ids"]) | set(p["redacted_ids"]))
        )
        f.feed(page)

    def layout(self) -> list[list[str]]:
        return [[m["event_id"] for m in p["messages"]] for p in self.points.values()]


def held(f: RoomFold) -> list[str]:
    return [w.anchor_id for w in f.windows()]


def test_release_drops_closed_written_windows_and_keeps_the_open_one():
    f, store = RoomFold(ROOM, BOUNDS), Store()
    store.serve(f, [msg(1), msg(2), msg(3, at=GAP + 1), msg(4, at=2 * GAP + 2)])
    assert held(f) == ["$m1", "$m3", "$m4"]
    assert store.checkpoint(f) == 2
    assert held(f) == ["$m4"]  # the open window
    assert store.layout() == [["$m1", "$m2"], ["$m3"], ["$m4"]]
    assert store.checkpoint(f) == 0


def test_release_keeps_the_windows_a_later_take_has_not_written_yet():
    # The refresher's checkpoint chain: a second take happens before the first is written; the
    # first write releases what it wrote, never what the second took (lost to a later lookup).
    f = fold(msg(1), msg(2, at=GAP + 1))
    first = f.take_changes()
    f.feed([msg(3, at=2 * GAP + 2)])  # closes $m2's window
    second = f.take_changes()
    taken_later = {w.point_id for w in second.upserts}
    assert [w.anchor_id for w in first.upserts] == ["$m1", "$m2"] and taken_later
    assert f.drop_written_windows(keep=taken_later) == 1  # $m1's window: written, not taken again
    assert held(f) == ["$m2", "$m3"]
    assert f.drop_written_windows() == 1  # once the second take is written too
    assert held(f) == ["$m3"]


def test_release_keeps_windows_not_yet_taken():
    f = fold(msg(1), msg(2, at=GAP + 1))
    assert f.drop_written_windows() == 0  # the closed first window still awaits take_changes
    assert held(f) == ["$m1", "$m2"]
    f.take_changes()
    f.feed([edit(1, "$m1", "v1")])
    f.take_changes()
    f.feed([msg(3, at=2 * GAP + 2), redact(1, "$m2")])
    # $m2's window was just redacted into: it stays. $m1's (edited, written) goes.
    assert f.drop_written_windows() == 1
    assert held(f) == ["$m2", "$m3"]


def test_release_drops_a_window_with_an_edited_message_and_a_redacted_edit_asks_for_it_back():
    """Edited windows are released too (memory of a long backfill); the redaction of an edit
    names the edit, so lookups maps it to its message's window, and the revert still lands."""
    f, store = RoomFold(ROOM, BOUNDS, incremental=True), Store()
    store.serve(f, [msg(1), edit(1, "$m1", "v1"), msg(2, at=GAP + 1)])
    assert store.checkpoint(f) == 1
    assert held(f) == ["$m2"]
    assert store.points[window_point_id(ROOM, "$m1")]["messages"][0]["body"] == "v1"
    page = [redact(1, "$e1")]
    assert f.lookups(page) == {"$m1"}
    store.serve(f, page)
    store.checkpoint(f)
    assert f.unknown_redactions == []
    assert store.layout() == [["$m1"], ["$m2"]]
    assert store.points[window_point_id(ROOM, "$m1")]["messages"][0]["body"] == "hi"
    assert held(f) == ["$m2"]
    # A second edit after the release builds on the held chain, and reverting it goes back to v1's base.
    store.serve(f, [edit(2, "$m1", "v2"), redact(2, "$e2")])
    store.checkpoint(f)
    assert store.points[window_point_id(ROOM, "$m1")]["messages"][0]["body"] == "hi"


def test_release_keeps_a_window_whose_anchor_was_purged():
    spans = [PurgeSpan(T0, T0)]
    anchorless = stored(msg(1, at=0), msg(2, at=1), closed=True)
    f, store = RoomFold(ROOM, BOUNDS, purges=spans, incremental=True), Store()
    f.provide([anchorless])
    store.serve(f, [msg(3, at=GAP + 2)])
    assert store.checkpoint(f) == 0
    assert held(f) == ["$m1", "$m3"]


def test_a_released_message_is_looked_up_again_for_an_edit_a_redaction_or_a_replay():
    f, store = RoomFold(ROOM, BOUNDS, incremental=True), Store()
    store.serve(f, [msg(1), msg(2), redact(1, "$m2"), msg(3, at=GAP + 1), other(1)])
    assert store.checkpoint(f) == 1
    page = [msg(1), edit(1, "$m1", "v1"), redact(2, "$m2"), redact(3, "$o1")]
    assert f.lookups(page) == {"$m1", "$m2"}  # a message and a tombstone of the released window
    store.serve(f, page)
    assert f.unknown_redactions == []
    assert f.open_window_id == window_point_id(ROOM, "$m1")  # the replay moved it back
    store.checkpoint(f)
    assert store.layout() == [["$m1"], ["$m3"]]
    assert store.points[window_point_id(ROOM, "$m1")]["messages"][0]["body"] == "v1"
    assert store.points[window_point_id(ROOM, "$m1")]["redacted_ids"] == ["$m2"]
    # The replay closed nothing and opened nothing: the next message still opens a new window.
    store.serve(f, [msg(4, at=GAP + 2)])
    store.checkpoint(f)
    assert store.layout() == [["$m1"], ["$m3"], ["$m4"]]


def test_a_released_window_handed_back_unchanged_is_not_rewritten_and_goes_again():
    f, store = RoomFold(ROOM, BOUNDS), Store()
    store.serve(f, [msg(1), msg(2, at=GAP + 1)])
    store.checkpoint(f)
    store.serve(f, [edit(1, "$m1", "v1", sender=BOB)])  # dropped: another sender
    assert f.take_changes() == Changes([], [])
    assert f.drop_written_windows() == 1
