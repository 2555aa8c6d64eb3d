"""daemon.reader.search: limits, filters inside every leg, RRF across texts, listing continuation, window.

The fakes (an in-memory IndexReader with the real filter semantics, a deterministic embedder)
live in tests/reader_fakes.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.index.port import RoomEntry, ScoredWindow, SearchFilter, StoredWindow, WindowMessage
from daemon.reader import cursors
from daemon.reader.search import (
    EmbedderUnavailable,
    Query,
    QueryError,
    execute_listing,
    execute_search,
    execute_window,
    fuse,
    leg_weights,
    make_query,
    make_window_query,
    parse_time,
    resolve_filter,
    verbatim_first,
    wants_verbatim,
)
from tests.reader_fakes import (
    ALICE,
    BOB,
    CAROL,
    ROOM_A,
    ROOM_B,
    ROOM_C,
    DenseFailingEmbedder,
    FakeEmbedder,
    FakeIndex,
    FullyFailingEmbedder,
    bag_vector,
    corpus,
    make_window,
)

# ---------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    "texts, field",
    [
        (["x"] * 9, "texts"),
        ([""], "texts"),
        (["   "], "texts"),
        (["ok", ""], "texts"),
        (["é" * 501], "texts"),  # 1002 bytes
        ([1], "texts"),
        ("a string, not a list", "texts"),
    ],
)
def test_bad_texts_are_refused_naming_texts(texts: Any, field: str) -> None:
    with pytest.raises(QueryError) as err:
        make_query(texts)
    assert err.value.field == field


def test_limits_are_inclusive() -> None:
    q = make_query(["x" * 1000] * 8, top_k=50)
    assert q.texts == ("x" * 1000,) and q.top_k == 50
    assert make_query(["é" * 500]).texts == ("é" * 500,)


@pytest.mark.parametrize("top_k", [0, 51, -1, "8", 8.0, True])
def test_top_k_out_of_range_or_wrong_type_is_refused(top_k: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_query(["x"], top_k=top_k)
    assert err.value.field == "top_k"


def test_top_k_defaults_to_8() -> None:
    assert make_query(["x"]).top_k == 8


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1700000000000", 1_700_000_000_000),
        (1_700_000_000_000, 1_700_000_000_000),
        ("2026-11-01T07:38:59Z", 1_793_518_739_000),
        ("2026-11-01T07:38:59", 1_793_518_739_000),
        ("2026-11-01T08:38:59+01:00", 1_793_518_739_000),
        ("2026-11-01", 1_793_491_200_000),
    ],
)
def test_times_are_iso_8601_or_unix_ms(value: Any, expected: int) -> None:
    assert parse_time(value, "after") == expected


@pytest.mark.parametrize("value", ["last tuesday", "yesterday Mars/Olympus", "2x", "2026-13-01", "", True, -5, [1]])
def test_bad_times_are_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_query(["x"], before=value)
    assert err.value.field == "before"


def test_after_later_than_before_is_refused() -> None:
    with pytest.raises(QueryError) as err:
        make_query([], after=2000, before=1000)
    assert err.value.field == "after"


@pytest.mark.parametrize("rooms", [["general"], [5], "!a:example.org"])
def test_bad_rooms_are_refused(rooms: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_query(["x"], rooms=rooms)
    assert err.value.field == "rooms"


@pytest.mark.parametrize("senders", [["alice"], ["@alice"], [None]])
def test_bad_senders_are_refused(senders: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_query(["x"], senders=senders)
    assert err.value.field == "senders"


def test_a_query_error_message_never_quotes_the_text() -> None:
    secret = "hunter2-" + "z" * 1000
    with pytest.raises(QueryError) as err:
        make_query([secret])
    assert "hunter2" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# Filter resolution


def test_aliases_resolve_through_the_directory_and_unknown_alias_matches_nothing() -> None:
    directory = {ROOM_A: RoomEntry(ROOM_A, canonical_alias="#dev:example.org")}
    q = make_query(["x"], rooms=["#dev:example.org", ROOM_C])
    assert resolve_filter(q, directory).room_ids == (ROOM_A, ROOM_C)
    unknown = make_query(["x"], rooms=["#nowhere:example.org"])
    assert resolve_filter(unknown, directory).room_ids == ()
    assert resolve_filter(make_query(["x"]), directory).room_ids is None


def test_unknown_alias_returns_nothing_never_everything() -> None:
    index = FakeIndex(corpus())
    q = make_query(["database migration"], rooms=["#nowhere:example.org"])
    assert execute_search(index, FakeEmbedder(), q).hits == []
    assert execute_listing(index, make_query([], rooms=["#nowhere:example.org"])).hits == []


def test_unknown_sender_returns_nothing() -> None:
    index = FakeIndex(corpus())
    q = make_query(["database migration"], senders=["@nobody:example.org"])
    assert execute_search(index, FakeEmbedder(), q).hits == []


# ---------------------------------------------------------------------------------------------
# Search


def test_one_text_gives_exactly_the_hybrid_order_and_hits() -> None:
    index = FakeIndex(corpus())
    embedder = FakeEmbedder()
    # The windows about lunch and deploy keys hold neither word and share nothing with the text:
    # the index ranks them (its dense leg ranks every window), the floor leaves them out.
    unrelated = {w["chunk_id"] for w in corpus() if not {"database", "migration"} & set(w["text"].split())}
    assert len(unrelated) == 2
    for top_k in (1, 2, 3, 8):
        q = make_query(["database migration"], top_k=top_k)
        result = execute_search(index, embedder, q)
        direct = index.hybrid(
            bag_vector("database migration"), embedder.sparse_query("database migration"), SearchFilter(), top_k
        )
        assert [h["chunk_id"] for h in result.hits] == [s.point_id for s in direct if s.point_id not in unrelated]
        assert result.hits[0]["room_id"] == ROOM_A


def test_a_window_first_in_two_lists_outranks_one_first_in_a_single_list() -> None:
    a, b, c, d = ({"chunk_id": x} for x in "abcd")
    lists = [
        [ScoredWindow("b", 1, b), ScoredWindow("a", 1, a)],
        [ScoredWindow("a", 1, a), ScoredWindow("c", 1, c)],
        [ScoredWindow("a", 1, a), ScoredWindow("d", 1, d)],
        [ScoredWindow("d", 1, d)],
    ]
    fused = fuse(lists, 10)
    assert [h.point_id for h in fused][:2] == ["a", "d"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61 + 1 / 61)
    assert fused[1].score == pytest.approx(1 / 62 + 1 / 61)


def test_first_in_two_lists_beats_first_in_one_through_execute_search() -> None:
    index = FakeIndex(corpus())
    q = make_query(["database migration", "database rollback", "lunch friday"], top_k=3)
    result = execute_search(index, FakeEmbedder(), q)
    assert result.hits[0]["first_event_id"] == "$a1"
    assert result.hits[0]["score"] > result.hits[1]["score"]


def test_rrf_uses_one_based_ranks_with_k_60() -> None:
    fused = fuse([[ScoredWindow("x", 0.9, {}), ScoredWindow("y", 0.8, {})]], 5)
    assert [h.score for h in fused] == [pytest.approx(1 / 61), pytest.approx(1 / 62)]


def test_a_window_repeated_inside_one_list_counts_once() -> None:
    fused = fuse([[ScoredWindow("x", 1, {}), ScoredWindow("x", 1, {}), ScoredWindow("y", 1, {})]], 5)
    assert [(h.point_id, round(h.score, 6)) for h in fused] == [("x", round(1 / 61, 6)), ("y", round(1 / 62, 6))]


def test_a_duplicated_text_does_not_count_twice() -> None:
    index = FakeIndex(corpus())
    embedder = FakeEmbedder()
    once = execute_search(index, embedder, make_query(["database migration", "geese"]))
    twice = execute_search(index, embedder, make_query(["database migration", "geese", "database migration"]))
    assert twice.hits == once.hits
    assert embedder.embed_calls[-2] == ["database migration", "geese"]  # [-1] is the attribution


def test_texts_are_embedded_in_one_batch() -> None:
    embedder = FakeEmbedder()
    execute_search(FakeIndex(corpus()), embedder, make_query(["a b", "c d", "e f"]))
    assert embedder.embed_calls[0] == ["a b", "c d", "e f"]
    assert all(": " in text for call in embedder.embed_calls[1:] for text in call)  # attribution only


def test_the_filter_is_inside_every_leg_before_ranking() -> None:
    """Room B scores lower than room A for this query; with a room filter and top_k 1 the hit
    must still be room B's window (a post-limit filter would return nothing)."""
    index = FakeIndex(corpus())
    q = make_query(["database migration", "migration rollback"], rooms=["#nature:example.org"], top_k=1)
    result = execute_search(index, FakeEmbedder(), q)
    assert [h["room_id"] for h in result.hits] == [ROOM_B]
    hybrid_calls = [c for c in index.calls if c[0] == "hybrid"]
    assert len(hybrid_calls) == 2
    assert all(flt.room_ids == (ROOM_B,) for _, flt, _ in hybrid_calls)


@pytest.mark.parametrize(
    "text, heavier",
    [
        ("payment_intent.last_payment_error", "lexical"),
        ("/etc/samba/smb.conf", "lexical"),
        ("redirectToCheckout", "lexical"),
        ("error[E0463]", "lexical"),
        ("update_active_desktop()", "lexical"),
        ("req_123 customer", "lexical"),  # half the tokens
        ("apt-get dist-upgrade", "lexical"),
        ("the buyer has to look at their bank listing", "dense"),
        ("what did topyli say about virus scanners?", "dense"),
        ("the box won't boot.", "dense"),  # a sentence's full stop is not a dotted name
        ("sudo /etc/init.d/gdm stop now", "dense"),  # one identifier among plain words
    ],
)
def test_a_text_of_identifiers_weights_bm25_and_plain_language_the_dense_leg(text: str, heavier: str) -> None:
    weights = leg_weights(text)
    lighter = "dense" if heavier == "lexical" else "lexical"
    assert weights[heavier] == 2.0 and weights[lighter] == 1.0


def test_a_long_plain_language_text_weights_both_legs_equally() -> None:
    story = (
        "someone was running their guitar through a laptop as an amp and was told to turn the input "
        "level down and the output up to get a cleaner sound"
    )
    assert leg_weights(story) == {"dense": 1.0, "lexical": 1.0}
    nineteen = " ".join(story.split()[:19])
    assert leg_weights(nineteen) == {"dense": 2.0, "lexical": 1.0}
    # A lone question mark is no token: nineteen words and one stay language-heavy.
    assert leg_weights(nineteen + " ?") == {"dense": 2.0, "lexical": 1.0}
    identifiers = " ".join(["payment_intent.last_payment_error"] * 20)
    assert leg_weights(identifiers) == {"dense": 1.0, "lexical": 2.0}


def test_each_text_reaches_the_index_with_its_own_leg_weights() -> None:
    index = FakeIndex(corpus())
    execute_search(index, FakeEmbedder(), make_query(["database migration rollback", "db_migrate.rollback"]))
    assert index.weights_seen == [{"dense": 2.0, "lexical": 1.0}, {"dense": 1.0, "lexical": 2.0}]


def test_sender_and_time_filters_reach_the_index() -> None:
    index = FakeIndex(corpus())
    q = make_query(["migration deploy"], senders=[CAROL], after=2_500, before=6_000)
    result = execute_search(index, FakeEmbedder(), q)
    assert {h["room_id"] for h in result.hits} == {ROOM_B, ROOM_C}  # carol's windows, none of room A
    flt = index.calls[-1][1]
    assert flt == SearchFilter(room_ids=None, senders=(CAROL,), after_ms=2_500, before_ms=6_000)


def test_hit_json_has_exactly_the_documented_keys() -> None:
    result = execute_search(FakeIndex(corpus()), FakeEmbedder(), make_query(["database migration"]))
    payload = result.to_json()
    assert set(payload) == {"hits", "next", "degraded"}
    assert payload["next"] is None and payload["degraded"] is None
    hit = payload["hits"][0]
    assert set(hit) == {
        "chunk_id",
        "room_id",
        "room_alias",
        "first_event_id",
        "last_event_id",
        "score",
        "messages",
        "legs",
        "thread_root",
        "matched_words",
        "similarity",
        "relevance",
    }
    assert set(hit["messages"][0]) == {"event_id", "sender", "display_name", "ts", "body", "reply_to", "matched"}
    assert hit["room_alias"] == "#dev:example.org"
    assert set(hit["legs"]) <= {"dense", "lexical"} and hit["legs"]


def test_embedder_failure_degrades_to_the_lexical_leg_still_filtered() -> None:
    index = FakeIndex(corpus())
    q = make_query(["migration"], rooms=[ROOM_B])
    result = execute_search(index, DenseFailingEmbedder(), q)
    assert result.degraded == "lexical_only"
    assert [h["room_id"] for h in result.hits] == [ROOM_B]
    assert all(h["legs"] == ["lexical"] for h in result.hits)
    lexical_calls = [c for c in index.calls if c[0] == "lexical"]
    assert lexical_calls and all(flt.room_ids == (ROOM_B,) for _, flt, _ in lexical_calls)


def test_no_embedder_at_all_fails_rather_than_answer_unfiltered() -> None:
    index = FakeIndex(corpus())
    with pytest.raises(EmbedderUnavailable):
        execute_search(index, FullyFailingEmbedder(), make_query(["migration"]))
    with pytest.raises(EmbedderUnavailable):
        execute_search(index, None, make_query(["migration"]))


# ---------------------------------------------------------------------------------------------
# Listing


def _many_rooms_equal_ts() -> list[dict[str, Any]]:
    windows = []
    for room in (ROOM_A, ROOM_B, ROOM_C):
        for n, ts in enumerate((100, 100, 100, 200, 200, 300)):
            windows.append(make_window(room, [(f"${room[1]}{n}", ALICE, ts, f"m{n}")]))
    return windows


@pytest.mark.parametrize("page", [1, 2, 4, 7, 50])
def test_listing_continuation_returns_every_window_exactly_once(page: int) -> None:
    windows = _many_rooms_equal_ts()
    index = FakeIndex(windows)
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        result = execute_listing(index, make_query([], top_k=page, cursor=cursor))
        seen += [h["chunk_id"] for h in result.hits]
        cursor = result.next
        if cursor is None:
            break
    expected = [w["chunk_id"] for w in sorted(windows, key=lambda w: (w["ts_start"], w["chunk_id"]))]
    assert seen == expected
    assert len(seen) == len(set(seen)) == 18


def test_listing_last_page_has_null_next_and_filters_apply() -> None:
    index = FakeIndex(_many_rooms_equal_ts())
    result = execute_listing(index, make_query([], rooms=[ROOM_B], top_k=50))
    assert result.next is None
    assert len(result.hits) == 6 and {h["room_id"] for h in result.hits} == {ROOM_B}
    assert all(h["score"] is None for h in result.hits)


def test_a_cursor_from_other_filters_or_garbage_is_refused() -> None:
    index = FakeIndex(_many_rooms_equal_ts())
    first = execute_listing(index, make_query([], top_k=2))
    assert first.next is not None
    with pytest.raises(QueryError) as err:
        execute_listing(index, make_query([], rooms=[ROOM_A], top_k=2, cursor=first.next))
    assert err.value.field == "cursor"
    for garbage in ("!!!", "e30", "bm90IGpzb24"):
        with pytest.raises(QueryError) as err:
            execute_listing(index, make_query([], cursor=garbage))
        assert err.value.field == "cursor"


def test_cursor_round_trip() -> None:
    digest = Query().digest()
    token = cursors.encode_listing(cursors.ListingPosition(123, "abc", 7), digest)
    assert cursors.decode(token, digest) == cursors.ListingPosition(123, "abc", 7)
    assert "abc" not in token  # opaque, not a readable key


_RANKED = {"k": "r", "o": 8, "h": 8, "g": "g1", "d": 0, "n": 0}


@pytest.mark.parametrize(
    "change, reason",
    [
        ({}, None),
        ({"h": 10_000, "o": 9_950}, "bounds"),  # deeper than any legitimate page, even when sealed
        ({"o": 200}, "bounds"),
        ({"h": 51, "o": 60}, "bounds"),
        ({"h": 9, "o": 8}, "bounds"),  # a head is never past the offset
        ({"g": "g" * 65}, "bounds"),
        ({"d": True}, "bounds"),
    ],
)
def test_a_sealed_cursor_is_held_to_what_a_legitimate_page_reaches(change: dict, reason: str | None) -> None:
    digest = Query().digest()
    token = cursors.seal({**_RANKED, "f": digest, **change})
    if reason is None:
        assert cursors.decode(token, digest) == cursors.RankedPosition(8, 8, "g1", False, 0)
        return
    with pytest.raises(cursors.CursorError) as err:
        cursors.decode(token, digest)
    assert err.value.code == "bad_cursor"


def test_a_cursor_under_another_key_expired_or_from_the_future_is_refused() -> None:
    digest = Query().digest()
    now = 1_800_000_000_000
    payload = {**_RANKED, "f": digest}
    assert cursors.decode(cursors.seal(payload, issued_ms=now), digest, now_ms=now)
    refused = {
        "another key": cursors.seal(payload, key=bytes(32), issued_ms=now),
        "expired": cursors.seal(payload, issued_ms=now - cursors.TOKEN_TTL_MS - 1),
        "from the future": cursors.seal(payload, issued_ms=now + cursors.CLOCK_SLACK_MS + 1),
    }
    for name, token in refused.items():
        with pytest.raises(cursors.CursorError) as err:
            cursors.decode(token, digest, now_ms=now)
        assert err.value.code == "bad_cursor", name
    with pytest.raises(cursors.CursorError, match="expired"):
        cursors.decode(refused["expired"], digest, now_ms=now)


def test_a_listing_cursor_given_to_a_search_is_refused() -> None:
    index = FakeIndex(_many_rooms_equal_ts())
    first = execute_listing(index, make_query([], top_k=2))
    with pytest.raises(QueryError) as err:
        execute_search(index, FakeEmbedder(), make_query(["x"], cursor=first.next))
    assert err.value.field == "cursor"


def test_search_without_texts_is_a_listing_and_needs_no_embedder() -> None:
    result = execute_search(FakeIndex(corpus()), None, make_query([]))
    assert [h["first_event_id"] for h in result.hits] == ["$a1", "$b1", "$c1", "$a3"]


# ---------------------------------------------------------------------------------------------
# Window


def _room_history() -> list[dict[str, Any]]:
    return [
        make_window(ROOM_A, [("$1", ALICE, 1_000, "one"), ("$2", BOB, 2_000, "two")], alias="#dev:example.org"),
        make_window(ROOM_A, [("$3", ALICE, 3_000, "three"), ("$4", BOB, 4_000, "four")], alias="#dev:example.org"),
        make_window(ROOM_A, [("$5", ALICE, 5_000, "five")], alias="#dev:example.org"),
        make_window(ROOM_A, [("$6", ALICE, 6_000, "six"), ("$7", BOB, 7_000, "seven")], alias="#dev:example.org"),
        make_window(ROOM_B, [("$x", CAROL, 3_500, "other room")]),
    ]


def test_window_crosses_window_boundaries_in_the_same_room() -> None:
    result = execute_window(FakeIndex(_room_history()), make_window_query("$5", 2, 2))
    assert [m["event_id"] for m in result["messages"]] == ["$3", "$4", "$5", "$6", "$7"]
    assert result["event_id"] == "$5" and result["room_alias"] == "#dev:example.org"


@pytest.mark.parametrize(
    "event_id, before, after, expected",
    [
        ("$4", 3, 1, ["$1", "$2", "$3", "$4", "$5"]),
        ("$1", 2, 2, ["$1", "$2", "$3"]),
        ("$7", 2, 0, ["$5", "$6", "$7"]),
        ("$3", 0, 0, ["$3"]),
        ("$2", 20, 20, ["$1", "$2", "$3", "$4", "$5", "$6", "$7"]),
    ],
)
def test_window_counts_messages_on_each_side(event_id: str, before: int, after: int, expected: list[str]) -> None:
    result = execute_window(FakeIndex(_room_history()), make_window_query(event_id, before, after))
    assert [m["event_id"] for m in result["messages"]] == expected


def test_window_of_an_unknown_or_redacted_event_is_refused_naming_event_id() -> None:
    windows = _room_history()
    windows[0]["redacted_ids"] = ["$gone"]
    windows[0]["event_ids"].append("$gone")  # even if an adapter matched it, there is no message
    index = FakeIndex(windows)
    for event_id in ("$unknown", "$gone"):
        with pytest.raises(QueryError) as err:
            execute_window(index, make_window_query(event_id))
        assert err.value.field == "event_id" and err.value.not_found


@pytest.mark.parametrize("before", [-1, 21, "2"])
def test_window_context_limits(before: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_window_query("$1", before, 2)
    assert err.value.field == "before"


@pytest.mark.parametrize("event_id", ["", "1", "no-dollar", "$ space", None])
def test_malformed_event_id_is_refused(event_id: Any) -> None:
    with pytest.raises(QueryError) as err:
        make_window_query(event_id)
    assert err.value.field == "event_id"


def test_a_unix_ms_integer_is_held_to_the_same_16_digits_as_a_string() -> None:
    assert parse_time(10**16 - 1, "after") == 10**16 - 1
    for value in (10**16, 10**400):  # a float cast of 10**400 would fail inside the index
        with pytest.raises(QueryError) as err:
            make_query([], after=value)
        assert err.value.field == "after"


class CountingAliases(FakeIndex):
    def __init__(self, windows: list[dict[str, Any]]):
        super().__init__(windows)
        self.alias_calls = 0

    def room_directory(self, room_ids: Any = None) -> dict[str, Any]:
        self.alias_calls += 1
        return super().room_directory(room_ids)


def test_the_room_directory_is_asked_for_only_when_a_room_is_named_by_alias() -> None:
    # On a Qdrant server the whole directory costs a scroll of the meta points: not for every request.
    index = CountingAliases(corpus())
    execute_search(index, FakeEmbedder(), make_query(["database migration"]))
    execute_search(index, FakeEmbedder(), make_query([], rooms=[ROOM_A]))
    execute_search(index, FakeEmbedder(), make_query(["database"], rooms=[ROOM_B]))
    assert index.alias_calls == 0
    hits = execute_search(index, FakeEmbedder(), make_query(["database"], rooms=["#dev:example.org"])).hits
    assert index.alias_calls == 1
    assert hits and {h["room_id"] for h in hits} == {ROOM_A}


# ---------------------------------------------------------------------------------------------
# Message-level attribution


def _matched(result: Any) -> dict[str, list[str]]:
    return {m["event_id"]: m["matched"] for hit in result.hits for m in hit["messages"]}


def test_attribution_marks_the_message_holding_most_query_terms_lexically() -> None:
    # $a1 holds "database migration", $a2 "database migration rollback": only $a2 has all three.
    result = execute_search(FakeIndex(corpus()), FakeEmbedder(), make_query(["database migration rollback"]))
    matched = _matched(result)
    assert "lexical" in matched["$a2"]
    assert "lexical" not in matched["$a1"]
    assert matched["$b2"] == [] or "lexical" not in matched["$b2"]  # "geese fly south" shares no term


def test_attribution_marks_one_message_per_dense_hit_the_nearest() -> None:
    result = execute_search(FakeIndex(corpus()), FakeEmbedder(), make_query(["geese fly south"]))
    for hit in result.hits:
        dense = [m["event_id"] for m in hit["messages"] if "dense" in m["matched"]]
        assert len(dense) == ("dense" in hit["legs"])
    assert "dense" in _matched(result)["$b2"]


def test_attribution_without_the_dense_model_marks_lexical_only() -> None:
    result = execute_search(FakeIndex(corpus()), DenseFailingEmbedder(), make_query(["rollback"]))
    assert result.degraded == "lexical_only"
    matched = _matched(result)
    assert matched["$a2"] == ["lexical"]
    assert all("dense" not in legs for legs in matched.values())


def test_a_listing_carries_no_attribution() -> None:
    result = execute_search(FakeIndex(corpus()), FakeEmbedder(), make_query([]))
    assert all("matched" not in m for hit in result.hits for m in hit["messages"])


def test_in_inside_the_text_and_rooms_resolve_through_the_same_directory_by_any_name() -> None:
    index = FakeIndex(corpus())
    index.entries[ROOM_A] = RoomEntry(
        ROOM_A, canonical_alias="#dev:example.org", alt_aliases=("#backend:example.org",), allowed_as=("#ops:hs",)
    )
    for name in ("#backend:example.org", "#ops:hs", "#DEV:example.org"):
        by_flag = execute_search(index, FakeEmbedder(), make_query(["database"], rooms=[name])).hits
        typed = execute_search(index, FakeEmbedder(), make_query([f"database in:{name}"])).hits
        assert by_flag and {h["room_id"] for h in by_flag} == {ROOM_A}, name
        assert [h["chunk_id"] for h in typed] == [h["chunk_id"] for h in by_flag], name


class GivenMessageScores(FakeIndex):
    """Hybrid hits as FakeIndex ranks them, each with the per-message scores the next entry of
    ``scores`` gives (one entry per hybrid call, i.e. per query text), as an adapter reads them
    from the stored message vectors."""

    def __init__(self, windows: list[dict[str, Any]], scores: list[Any]) -> None:
        super().__init__(windows)
        self.scores = list(scores)

    def hybrid(self, dense, sparse, flt, limit, weights=None):  # type: ignore[no-untyped-def]
        given = self.scores.pop(0)
        return [
            ScoredWindow(h.point_id, h.score, h.window, h.legs, given(h.window) if callable(given) else given)
            for h in super().hybrid(dense, sparse, flt, limit, weights)
        ]


def test_the_dense_mark_comes_from_the_index_and_nothing_but_the_query_is_embedded() -> None:
    embedder = FakeEmbedder()
    result = execute_search(FakeIndex(corpus()), embedder, make_query(["geese fly south"]))
    assert embedder.embed_calls == [["geese fly south"]]  # no message is embedded again
    assert "dense" in _matched(result)["$b2"]


def test_the_dense_mark_follows_the_stored_scores_and_is_left_out_without_them() -> None:
    windows = [w for w in corpus() if len(w["messages"]) >= 2]
    first_best = GivenMessageScores(windows, [lambda w: (0.9,) + (0.1,) * (len(w.messages) - 1)])
    result = execute_search(first_best, FakeEmbedder(), make_query(["database migration"]))
    dense_hits = [hit for hit in result.hits if "dense" in hit["legs"]]
    assert dense_hits and all("dense" in hit["messages"][0]["matched"] for hit in dense_hits)
    assert all("dense" not in m["matched"] for hit in result.hits for m in hit["messages"][1:])
    # An older generation (one vector per window) gives no per-message scores: no guess.
    unknown = execute_search(GivenMessageScores(windows, [()]), FakeEmbedder(), make_query(["database migration"]))
    assert all("dense" not in m["matched"] for hit in unknown.hits for m in hit["messages"])


def test_with_several_texts_a_message_is_marked_by_its_best_score_over_the_texts() -> None:
    windows = [w for w in corpus() if len(w["messages"]) == 2]
    index = GivenMessageScores(windows, [(0.9, 0.1), (0.2, 0.95)])
    result = execute_search(index, FakeEmbedder(), make_query(["database migration", "rollback plan"]))
    dense_hits = [hit for hit in result.hits if "dense" in hit["legs"]]
    assert dense_hits
    for hit in dense_hits:
        assert [("dense" in m["matched"]) for m in hit["messages"]] == [False, True]


class _Paged(FakeIndex):
    """A FakeIndex that records, in one sequence, its searches and ``release_pages`` calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sequence: list[str] = []

    def hybrid(self, *args: Any, **kwargs: Any) -> Any:
        self.sequence.append("search")
        return super().hybrid(*args, **kwargs)

    def release_pages(self) -> None:
        self.sequence.append("release")


def test_a_request_of_several_texts_drops_the_mapped_pages_before_each_texts_search() -> None:
    # Before the first one too: the reader leaves what earlier searches mapped in place until it
    # passes its budget, and a max-size request must not begin on top of that.
    index = _Paged(corpus())
    execute_search(index, FakeEmbedder(), make_query(["database", "deploy", "kettle"], top_k=5))
    assert index.sequence == ["release", "search"] * 3
    alone = _Paged(corpus())
    execute_search(alone, FakeEmbedder(), make_query(["database"], top_k=5))
    assert alone.sequence == ["search"]  # the usual request waits for no release


# ---------------------------------------------------------------------------------------------
# Verbatim holders first


def _scored(point_id: str, *bodies: str) -> ScoredWindow:
    messages = tuple(WindowMessage(f"${point_id}{i}", ALICE, 1_000 + i, body) for i, body in enumerate(bodies))
    window = StoredWindow(point_id, ROOM_A, None, messages[0].event_id, messages[-1].event_id, 1_000, 2_000, messages)
    return ScoredWindow(point_id, 1.0, window)


def test_windows_holding_the_text_verbatim_go_first_in_their_order() -> None:
    ranked = [
        _scored("a", "I ran 'apt-get dist-upgrade' last night"),
        _scored("b", "nothing here"),
        _scored("c", "try it:  APT-GET -S\nDIST-UPGRADE first", "ok"),  # case and white space fold
        _scored("d", "simulate with apt-get -s dist-upgrade"),
        _scored("e", "apt-get -s dist-upgrade again"),
    ]
    moved = verbatim_first(ranked, "apt-get -s dist-upgrade")
    assert [s.point_id for s in moved] == ["c", "d", "e", "a", "b"]


def test_punctuation_counts_for_a_verbatim_hold() -> None:
    ranked = [_scored("a", "what about update_active_desktop ?"), _scored("b", "can i see update_active_desktop()?")]
    assert [s.point_id for s in verbatim_first(ranked, "update_active_desktop()")] == ["b", "a"]


def test_only_the_first_ten_are_reordered() -> None:
    ranked = [_scored(f"w{i}", "unrelated chatter") for i in range(10)] + [_scored("late", "the exact error text")]
    assert verbatim_first(ranked, "the exact error text") == ranked


def test_a_lone_plain_word_keeps_the_legs_order() -> None:
    ranked = [_scored("a", "the cache"), _scored("b", "a cache miss"), _scored("c", "no match"), _scored("d", "cache")]
    assert not wants_verbatim("cache")
    assert verbatim_first(list(reversed(ranked)), "cache") == list(reversed(ranked))
    assert wants_verbatim("gdm stop") and wants_verbatim("E0463") and wants_verbatim("update_active_desktop()")


def test_a_search_shows_the_verbatim_holder_first_whatever_its_top_k() -> None:
    windows = [
        make_window(
            ROOM_A, [("$x1", ALICE, 1_000, "database database migration migration failed failed")], chunk_id="a"
        ),
        make_window(ROOM_A, [("$x2", BOB, 2_000, "so the database migration failed again")], chunk_id="b"),
    ]
    index = FakeIndex(windows)
    embedder = FakeEmbedder()
    text = "database migration failed"
    legs = index.hybrid(bag_vector(text), embedder.sparse_query(text), SearchFilter(), 2)
    assert [s.window.first_event_id for s in legs] == ["$x1", "$x2"]  # the legs rank the word bag first
    for top_k in (1, 2, 8):
        hits = execute_search(index, embedder, make_query([text], top_k=top_k)).hits
        assert hits[0]["first_event_id"] == "$x2"
