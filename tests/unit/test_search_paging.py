"""daemon.reader.search: sort orders, relative times in a request, the phrase / exclusion / from: /
in: operators, and paging ranked results (exactly once, bound to the index generation).

Over the in-memory fakes of tests/reader_fakes.py and, for the socket and the CLI, a running
``ReaderService``.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.cli.main import main
from daemon.index.port import SearchFilter
from daemon.reader.explain import similarity_of
from daemon.reader.search import (
    MAX_RANKED,
    SORTED_POOL,
    VERBATIM_DEPTH,
    QueryError,
    execute_listing,
    execute_search,
    fuse,
    make_query,
    unrelated,
)
from tests.reader_fakes import (
    ALICE,
    BOB,
    ROOM_A,
    ROOM_B,
    FakeEmbedder,
    FakeIndex,
    RecordingLogger,
    Running,
    corpus,
    make_window,
)
from tests.reader_sockets import ask, service_over

HOUR = 3_600_000
WORDS = ["deploy", "key", "rotation", "staging", "database", "backup", "cert", "proxy", "cache", "queue"]


def _big_corpus(n: int = 300) -> list[dict[str, Any]]:
    """``n`` windows over two rooms with overlapping words, several sharing a ts_start."""
    windows = []
    for i in range(n):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7))
        room = ROOM_A if i % 3 else ROOM_B
        windows.append(make_window(room, [(f"$e{i}", ALICE if i % 2 else BOB, (i // 4) * HOUR, f"{words} {i}")]))
    return windows


def _ids(hits: list[dict[str, Any]]) -> list[str]:
    return [h["chunk_id"] for h in hits]


def _walk(index: FakeIndex, sizes: list[int], **asked: Any) -> list[str]:
    """Every page of a search, page sizes taken from ``sizes`` (the last one repeats)."""
    seen: list[str] = []
    cursor = None
    for page in range(1000):
        size = sizes[min(page, len(sizes) - 1)]
        result = execute_search(index, FakeEmbedder(), make_query(top_k=size, cursor=cursor, **asked))
        assert len(result.hits) <= size
        seen += _ids(result.hits)
        cursor = result.next
        if cursor is None:
            return seen
    raise AssertionError("paging never ended")


# ---------------------------------------------------------------------------------------------
# Ranked paging


def _expected_sequence(index: FakeIndex, text: str, head: int) -> list[str]:
    """The ranked sequence the docs define: the unpaged first page, then the ranking at depth 200
    without it and without what the floor leaves out of it."""
    embedder = FakeEmbedder()
    first = _ids(execute_search(index, embedder, make_query([text], top_k=head)).hits)
    deep = fuse([index.hybrid(embedder.embed([text])[0], embedder.sparse_query(text), SearchFilter(), 200)], 200)
    judged = [
        ([m.body for m in h.window.messages], similarity_of(h.message_scores, len(h.window.messages))) for h in deep
    ]
    kept = [h for h, out in zip(deep, unrelated(judged, [text])) if not out]
    return (first + [h.point_id for h in kept if h.point_id not in first])[:MAX_RANKED]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=4, max_value=50), min_size=1, max_size=6))
@pytest.mark.slow
def test_ranked_pages_continue_exactly_once_whatever_the_page_sizes(sizes: list[int]) -> None:
    # Enough windows that hold a word of the text for a ranking 200 deep to hold nothing the floor
    # leaves out: the walk ends at the cap, not where the related windows run out.
    index = FakeIndex(_big_corpus(600), generation=3)
    seen = _walk(index, sizes, texts=["deploy key rotation"])
    assert len(seen) == len(set(seen)) == MAX_RANKED  # no duplicate, and the 200 cap
    assert seen == _expected_sequence(index, "deploy key rotation", sizes[0])  # no gap, no reorder


def test_the_first_page_is_the_unpaged_search_and_offers_more() -> None:
    index = FakeIndex(_big_corpus(), generation=1)
    result = execute_search(index, FakeEmbedder(), make_query(["cache queue"], top_k=5))
    assert result.next is not None
    # A first page ranks what an unpaged search ranks: top_k, or the verbatim depth for a text of
    # two words (its verbatim holders among the first ten go first, whatever top_k is).
    assert [call[2] for call in index.calls] == [VERBATIM_DEPTH]
    index = FakeIndex(_big_corpus(), generation=1)
    assert execute_search(index, FakeEmbedder(), make_query(["cache"], top_k=5)).next is not None
    assert [call[2] for call in index.calls] == [5]


def test_a_small_result_pages_to_its_end() -> None:
    # Each of the four windows holds one of the words, so the floor leaves none out.
    seen = _walk(FakeIndex(corpus(), generation=1), [2], texts=["migration lunch deploy"])
    assert len(seen) == len(set(seen)) == len(corpus())


def test_a_ranked_cursor_from_another_generation_is_stale() -> None:
    first = execute_search(FakeIndex(_big_corpus(), generation=1), FakeEmbedder(), make_query(["deploy"], top_k=3))
    assert first.next is not None
    with pytest.raises(QueryError) as err:
        execute_search(
            FakeIndex(_big_corpus(), generation=2), FakeEmbedder(), make_query(["deploy"], top_k=3, cursor=first.next)
        )
    assert err.value.field == "cursor" and err.value.code == "stale_cursor"


@pytest.mark.parametrize(
    "other",
    [
        {"texts": ["deploy key"]},
        {"texts": ["deploy"], "rooms": [ROOM_A]},
        {"texts": ["deploy"], "sort": "newest"},
        {"texts": ["deploy"], "after": "2d"},
        {"texts": []},
    ],
)
def test_a_cursor_for_another_request_is_refused(other: dict[str, Any]) -> None:
    index = FakeIndex(_big_corpus(), generation=1)
    first = execute_search(index, FakeEmbedder(), make_query(["deploy"], top_k=3))
    with pytest.raises(QueryError) as err:
        execute_search(index, FakeEmbedder(), make_query(cursor=first.next, **other))
    assert err.value.field == "cursor" and err.value.code == "bad_cursor"


# ---------------------------------------------------------------------------------------------
# Sort


@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_a_search_sorted_by_time_pages_through_its_best_ranked_pool(sort: str) -> None:
    index = FakeIndex(_big_corpus(), generation=1)
    pool = set(_ids(execute_search(index, FakeEmbedder(), make_query(["deploy proxy"], top_k=SORTED_POOL)).hits))
    seen = _walk(index, [7], texts=["deploy proxy"], sort=sort)
    assert set(seen) == pool and len(seen) == len(pool)
    by_id = {w["chunk_id"]: (w["ts_start"], w["chunk_id"]) for w in index.windows}
    keys = [by_id[cid] for cid in seen]
    assert keys == sorted(keys, reverse=sort == "newest")


def test_newest_first_listing_pages_back_to_the_start_exactly_once() -> None:
    index = FakeIndex(_big_corpus(50))
    newest = _walk(index, [7], texts=[], sort="newest")
    oldest = _walk(index, [5], texts=[])
    assert len(newest) == 50 and newest == oldest[::-1]


def test_sort_is_checked() -> None:
    for bad, field in (("recent", "sort"), (3, "sort")):
        with pytest.raises(QueryError) as err:
            make_query(["x"], sort=bad)
        assert err.value.field == field
    with pytest.raises(QueryError) as err:
        make_query([], sort="relevance")
    assert err.value.field == "sort"
    assert make_query(["x"]).sort == "relevance" and make_query([]).sort == "oldest"


# ---------------------------------------------------------------------------------------------
# Relative times


def test_a_continued_listing_resolves_relative_times_at_its_first_pages_clock() -> None:
    index = FakeIndex(_big_corpus(40))  # ts_start 0 .. 9 h
    now = 12 * HOUR
    first = execute_listing(index, make_query([], after="6h", top_k=3, now_ms=now))
    assert [h["messages"][0]["ts"] for h in first.hits] == [6 * HOUR] * 3
    # An hour later the same cursor still means "since 06:00", not "since 07:00".
    later = make_query([], after="6h", top_k=50, cursor=first.next, now_ms=now + HOUR)
    rest = execute_listing(index, later)
    assert min(h["messages"][0]["ts"] for h in rest.hits) == 6 * HOUR
    assert len(first.hits) + len(rest.hits) == 16


# ---------------------------------------------------------------------------------------------
# Operators in the text


def _operators_corpus() -> list[dict[str, Any]]:
    return [
        make_window(ROOM_A, [("$p1", ALICE, 1, "the deploy key rotation is done")], alias="#ops:example.org"),
        make_window(ROOM_A, [("$p2", BOB, 2, "rotation of the deploy key tomorrow")], alias="#ops:example.org"),
        make_window(ROOM_B, [("$p3", BOB, 3, "deploy key rotation on staging")], alias="#dev:example.org"),
        make_window(ROOM_B, [("$p4", ALICE, 4, "deploy key"), ("$p5", ALICE, 5, "rotation")]),
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('"deploy key rotation"', {"$p1", "$p3"}),  # in order, inside one message
        ('"deploy key rotation" -staging', {"$p1"}),
        ("deploy key rotation -staging -tomorrow", {"$p1", "$p4"}),
        ("deploy key rotation from:@bob:example.org", {"$p2", "$p3"}),
        ("deploy key rotation in:#ops:example.org", {"$p1", "$p2"}),
        (f"deploy key rotation in:{ROOM_B} from:@alice:example.org", {"$p4"}),
    ],
)
def test_phrase_exclusion_sender_and_room_typed_in_the_text(text: str, expected: set[str]) -> None:
    result = execute_search(FakeIndex(_operators_corpus()), FakeEmbedder(), make_query([text], top_k=10))
    assert {h["first_event_id"] for h in result.hits} == expected


def test_an_exclusion_is_eligibility_not_a_cut_of_the_first_page() -> None:
    """The only window without "staging" ranks last of 60; it is still found with top_k=1."""
    windows = [make_window(ROOM_A, [(f"$s{i}", ALICE, i, "deploy deploy key staging")]) for i in range(59)]
    windows.append(make_window(ROOM_B, [("$clean", BOB, 99, "a deploy went out")]))
    result = execute_search(FakeIndex(windows), FakeEmbedder(), make_query(["deploy key -staging"], top_k=1))
    assert [h["first_event_id"] for h in result.hits] == ["$clean"]


# ---------------------------------------------------------------------------------------------
# Over the socket and through the CLI


@pytest.fixture
def sock_dir() -> Any:
    directory = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_a_stale_ranked_cursor_is_its_own_code_over_the_socket_and_exit_2_in_the_cli(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(_big_corpus(), generation=1), FakeEmbedder()), path):
        first = ask(path, {"v": 1, "op": "search", "texts": ["deploy"], "top_k": 3})
    token = first["result"]["next"]
    assert first["ok"] and token
    with Running(service_over(FakeIndex(_big_corpus(), generation=2), FakeEmbedder()), path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["deploy"], "top_k": 3, "cursor": token})
        code, out, err = _cli(["search", "deploy", "--top-k", "3", "--cursor", token, "--socket", str(path)])
    assert reply["ok"] is False and reply["error"]["code"] == "stale_cursor" and reply["error"]["field"] == "cursor"
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("huginn-chat search: cursor (--cursor): the index changed")


def test_cli_sort_and_relative_times_reach_the_reader_as_typed(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    logger = RecordingLogger()
    with Running(service_over(FakeIndex(_big_corpus(40)), FakeEmbedder(), logger=logger), path):
        code, out, err = _cli(["search", "--sort", "newest", "--after", "2d", "--json", "--socket", str(path)])
        bad = _cli(["search", "x", "--after", "last tuesday", "--socket", str(path)])
        wrong = _cli(["search", "--sort", "relevance", "--socket", str(path)])
    assert code == 0, err
    audit = logger.audit()[0]
    assert audit["op"] == "list" and audit["sort"] == "newest"
    assert abs(audit["filters"]["after_ms"] - (time.time() * 1000 - 48 * HOUR)) < 60_000  # the reader's clock
    assert bad[0] == 2 and bad[2].startswith("huginn-chat search: after (--after): ")
    assert wrong[0] == 2 and wrong[2].startswith("huginn-chat search: sort (--sort): ")


def test_the_wire_carries_relative_times_as_written() -> None:
    from daemon.reader.protocol import search_request

    body = search_request(make_query(["x"], after="Yesterday  Europe/Berlin", before="90m", sort="newest"))
    assert body["after"] == "yesterday Europe/Berlin" and body["before"] == "90m" and body["sort"] == "newest"
    assert "sort" not in search_request(make_query(["x"]))


def test_without_generations_the_version_moves_when_the_refresher_writes_a_cursor() -> None:
    """A Qdrant server has no generations: a ranked cursor is bound to every room's ingest cursor."""
    from daemon.index.port import IndexMeta, RoomCursor
    from daemon.reader.search import index_version
    from tests.fakes import MemoryIndex

    index = MemoryIndex()
    index.reset(IndexMeta(model="m", dim=4, chat_version="v"))
    before = index_version(index)
    assert index_version(index) == before and before.startswith("c")
    index.set_cursor(RoomCursor(ROOM_A, "t1", "$e1", None, "v", 1))
    after = index_version(index)
    assert after != before
    index.set_cursor(RoomCursor(ROOM_A, "t2", "$e2", None, "v", 2))
    assert index_version(index) != after
    assert index_version(FakeIndex([], generation=7)) == "g7"


def test_a_lexical_first_page_is_continued_lexically_and_a_failing_embedder_makes_the_cursor_stale() -> None:
    from tests.reader_fakes import DenseFailingEmbedder

    index = FakeIndex(_big_corpus(), generation=1)
    first = execute_search(index, DenseFailingEmbedder(), make_query(["deploy key"], top_k=5))
    assert first.degraded == "lexical_only" and first.next
    second = execute_search(index, FakeEmbedder(), make_query(["deploy key"], top_k=5, cursor=first.next))
    assert second.degraded == "lexical_only"  # the embedder is back, but page 1 was BM25 alone
    assert not set(_ids(first.hits)) & set(_ids(second.hits)) and len(second.hits) == 5
    healthy = execute_search(index, FakeEmbedder(), make_query(["deploy key"], top_k=5))
    with pytest.raises(QueryError) as err:
        execute_search(index, DenseFailingEmbedder(), make_query(["deploy key"], top_k=5, cursor=healthy.next))
    assert err.value.code == "stale_cursor"
