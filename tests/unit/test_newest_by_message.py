"""Newest first means the newest message: a conversation that began first but was answered last
comes first, in a search sorted by time and in a listing, and paging stays exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.reader.search import execute_search, make_query
from tests.reader_fakes import ALICE, BOB, ROOM_A, ROOM_B, FakeEmbedder, FakeIndex, make_window

HOUR = 3_600_000


def _corpus() -> list[dict[str, Any]]:
    # The long thread about the boiler started at hour 1 and got its last reply at hour 90; the
    # short ones started later and ended sooner.
    long_one = make_window(
        ROOM_A,
        [("$old1", ALICE, 1 * HOUR, "boiler pressure is low again"), ("$old2", BOB, 90 * HOUR, "boiler fixed now")],
    )
    windows = [long_one]
    for i in range(40):
        start = (10 + i) * HOUR
        windows.append(
            make_window(
                ROOM_B if i % 2 else ROOM_A,
                [(f"$s{i}", ALICE, start, f"boiler note {i}"), (f"$r{i}", BOB, start + (i % 3) * HOUR, "ok")],
            )
        )
    return windows


def _walk(index: FakeIndex, size: int, **asked: Any) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):
        result = execute_search(index, FakeEmbedder(), make_query(top_k=size, cursor=cursor, **asked))
        hits += result.hits
        cursor = result.next
        if cursor is None:
            return hits
    raise AssertionError("paging never ended")


def _newest(hit: dict[str, Any]) -> int:
    return max(m["ts"] for m in hit["messages"])


def _oldest(hit: dict[str, Any]) -> int:
    return min(m["ts"] for m in hit["messages"])


@pytest.mark.parametrize("texts", [["boiler"], []], ids=["search", "listing"])
def test_newest_first_orders_by_each_hits_newest_message(texts: list[str]) -> None:
    index = FakeIndex(_corpus(), generation=1)
    hits = _walk(index, 3, texts=texts, sort="newest")
    assert hits[0]["messages"][0]["event_id"] == "$old1"  # began first, answered last
    keys = [(_newest(h), h["chunk_id"]) for h in hits]
    assert keys == sorted(set(keys), reverse=True)  # every hit once, in order across pages
    assert len(hits) == len(index.windows)


@pytest.mark.parametrize("texts", [["boiler"], []], ids=["search", "listing"])
def test_oldest_first_orders_by_each_hits_oldest_message(texts: list[str]) -> None:
    index = FakeIndex(_corpus(), generation=1)
    hits = _walk(index, 4, texts=texts, sort="oldest")
    keys = [(_oldest(h), h["chunk_id"]) for h in hits]
    assert keys == sorted(set(keys)) and hits[0]["messages"][0]["event_id"] == "$old1"
    assert len(hits) == len(index.windows)
