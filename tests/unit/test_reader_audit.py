"""The reader's audit trail: one line per request, status included, with the
keyed query digest (never the text), the filters, what was returned (window ids, their message
event ids, the rank in each text's list, the legs) and how many windows eligibility excluded; a
request whose line cannot be written is not answered."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.index.port import SearchFilter
from daemon.reader.search import canonical_query, make_query
from tests.reader_fakes import ROOM_A, FakeEmbedder, FakeIndex, RecordingLogger, Running, corpus, eligible
from tests.reader_sockets import ask, service_over

KEY = b"k" * 32


class CountingIndex(FakeIndex):
    """FakeIndex with the exact eligible count the real adapters give."""

    def count_eligible(self, flt: SearchFilter) -> int:
        if flt.room_ids == ():
            return 0
        return sum(1 for w in self.windows if eligible(w, flt))


class UnwritableAudit(RecordingLogger):
    def info(self, event: str, **fields: Any) -> None:
        if event == "request_answered":
            raise OSError(28, "No space left on device")
        super().info(event, **fields)


def test_status_is_audited(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    service = service_over(CountingIndex(corpus()), audit_key=KEY)
    with Running(service, path):
        assert ask(path, {"v": 1, "op": "status"})["ok"] is True
    (line,) = service._log.audit()
    assert line["op"] == "status" and line["outcome"] == "ok" and line["query_digest"] is None


def test_a_search_line_holds_digest_filters_returned_events_ranks_and_exclusions(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    service = service_over(CountingIndex(corpus()), audit_key=KEY)
    request = {"v": 1, "op": "search", "texts": ["database migration", "geese"], "rooms": ["#dev:example.org", ROOM_A]}
    with Running(service, path):
        reply = ask(path, request)["result"]
    (line,) = service._log.audit()
    query = make_query(request["texts"], rooms=request["rooms"])
    assert line["query_digest"] == hmac.new(KEY, canonical_query(query), hashlib.sha256).hexdigest()
    assert line["filters"] == {
        "rooms": ["#dev:example.org", ROOM_A],
        "senders": None,
        "after_ms": None,
        "before_ms": None,
    }
    assert [r["chunk_id"] for r in line["returned"]] == [h["chunk_id"] for h in reply["hits"]] == line["window_ids"]
    for returned, hit in zip(line["returned"], reply["hits"]):
        assert returned["event_ids"] == [m["event_id"] for m in hit["messages"]]
        assert returned["legs"] == hit["legs"]
        # the ranks are the ones fused: RRF over them gives the score the reply carries
        assert set(returned["ranks"]) <= {"text1", "text2"} and returned["ranks"]
        assert sum(1 / (60 + rank) for rank in returned["ranks"].values()) == pytest.approx(hit["score"])
    assert line["excluded"]["eligibility"] == 2  # four windows, two in room A

    single = service_over(CountingIndex(corpus()), audit_key=KEY)
    with Running(single, path):
        ask(path, {"v": 1, "op": "search", "texts": ["database migration"], "top_k": 2})
    (line,) = single._log.audit()
    assert line["returned"][0]["event_ids"] == ["$a1", "$a2"]
    assert [r["ranks"] for r in line["returned"]] == [{"text1": 1}, {"text1": 2}]


def test_exclusions_without_a_filter_are_zero_and_unknown_where_the_index_cannot_count(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    counting = service_over(CountingIndex(corpus()))
    with Running(counting, path):
        ask(path, {"v": 1, "op": "search", "texts": ["geese"]})
        ask(path, {"v": 1, "op": "search", "texts": ["geese"], "rooms": ["#unknown:example.org"]})
        ask(path, {"v": 1, "op": "search", "top_k": 1, "senders": ["@carol:example.org"]})
    unfiltered, unknown_room, listing = counting._log.audit()
    assert unfiltered["excluded"]["eligibility"] == 0
    assert unknown_room["excluded"]["eligibility"] == 4 and unknown_room["returned"] == []
    assert (
        listing["op"] == "list"
        and listing["excluded"]["eligibility"] == 2
        and listing["returned"][0]["ranks"] == {"list": 1}
    )

    plain = service_over(FakeIndex(corpus()))
    with Running(plain, path):
        ask(path, {"v": 1, "op": "search", "texts": ["geese"], "rooms": [ROOM_A]})
    assert plain._log.audit()[0]["excluded"]["eligibility"] is None


def test_a_window_line_names_the_windows_and_event_ids_it_returned(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    service = service_over(CountingIndex(corpus()), audit_key=KEY)
    with Running(service, path):
        result = ask(path, {"v": 1, "op": "window", "event_id": "$a2", "before": 1, "after": 0})["result"]
    (line,) = service._log.audit()
    assert line["op"] == "window" and line["event_ids"] == [m["event_id"] for m in result["messages"]] == ["$a1", "$a2"]
    assert line["window_ids"] == result["chunk_ids"] and line["query_digest"]


@pytest.mark.parametrize(
    "request_",
    [
        {"v": 1, "op": "status"},
        {"v": 1, "op": "search", "texts": ["database migration"]},
        {"v": 1, "op": "window", "event_id": "$a2"},
        {"v": 1, "op": "nope"},
    ],
)
def test_a_request_whose_audit_line_cannot_be_written_is_not_answered(sock_dir: Path, request_: dict) -> None:
    """Without the check the result goes out unaudited."""
    path = sock_dir / "r.sock"
    service = service_over(CountingIndex(corpus()), logger=UnwritableAudit())
    with Running(service, path):
        reply = ask(path, request_)
    assert reply["ok"] is False and reply["error"]["code"] == "internal"
    assert "audit" in reply["error"]["message"] and "result" not in reply
    assert any(event == "audit_unwritable" for _, event, _ in service._log.lines)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.text(alphabet=st.characters(min_codepoint=0x41, max_codepoint=0x7A), min_size=6, max_size=30),
        min_size=1,
        max_size=3,
    ),
    keyed=st.booleans(),
)
def test_no_audit_line_ever_holds_query_text(sock_dir: Path, texts: list[str], keyed: bool) -> None:
    marker = [f"zq{uuid.uuid4().hex[:8]}{t}" for t in texts]
    service = service_over(CountingIndex(corpus()), audit_key=KEY if keyed else None)
    requests = [
        {"v": 1, "op": "search", "texts": marker},
        {"v": 1, "op": "search", "texts": marker, "rooms": ["#dev:example.org"], "top_k": 50},
        {"v": 1, "op": "search", "texts": [*marker, 7]},  # refused: the line must not echo the rest
        {"v": 1, "op": "search", "texts": marker, "bogus": marker[0]},
    ]
    for request in requests:
        service_answer(service, json.dumps(request).encode())
    dumped = json.dumps(service._log.lines)
    assert len(service._log.audit()) == len(requests)
    for text in marker:
        assert text not in dumped


def service_answer(service: Any, line: bytes) -> bytes:
    import asyncio

    async def run() -> bytes:
        service._swap_lock = asyncio.Lock()
        await service._load_embedder()
        await service.check_index()
        return await service.answer(line)

    return asyncio.run(run())


def test_the_edge_adapter_counts_eligible_windows(tmp_path: Path) -> None:
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.index.port import IndexMeta, WindowPoint
    from tests.reader_fakes import ALICE, BOB, ROOM_B, make_window, message_vectors

    embedder = FakeEmbedder()

    def point(room: str, event: str, sender: str, ts: int) -> WindowPoint:
        payload = make_window(
            room, [(event, sender, ts, f"text {event}")], chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, event))
        )
        return WindowPoint(
            payload["chunk_id"], message_vectors(payload), embedder.sparse_query(payload["text"]), payload
        )

    writer = EdgeIndexWriter(tmp_path / "index")
    writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
    writer.write_windows(ROOM_A, [point(ROOM_A, "$1", ALICE, 1000), point(ROOM_A, "$2", BOB, 2000)], [])
    writer.write_windows(ROOM_B, [point(ROOM_B, "$3", BOB, 3000)], [])
    writer.commit()
    writer.close()
    reader = EdgeIndexReader.open_latest(tmp_path / "index", tmp_path / "private")
    assert reader is not None
    try:
        assert reader.count_eligible(SearchFilter()) == 3
        assert reader.count_eligible(SearchFilter(room_ids=(ROOM_A,))) == 2
        assert reader.count_eligible(SearchFilter(senders=(BOB,), after_ms=2500)) == 1
        assert reader.count_eligible(SearchFilter(room_ids=())) == 0
    finally:
        reader.close()


def test_the_server_adapter_counts_eligible_windows() -> None:
    from qdrant_client import QdrantClient

    from daemon.index.port import IndexMeta, WindowPoint
    from daemon.index.remote_reader import RemoteIndexReader as ServerIndexReader
    from daemon.index.remote_writer import RemoteIndexWriter as ServerIndexWriter
    from tests.reader_fakes import ALICE, BOB, ROOM_B, make_window, message_vectors

    embedder = FakeEmbedder()

    def point(room: str, event: str, sender: str, ts: int) -> WindowPoint:
        payload = make_window(
            room, [(event, sender, ts, f"text {event}")], chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, event))
        )
        return WindowPoint(
            payload["chunk_id"], message_vectors(payload), embedder.sparse_query(payload["text"]), payload
        )

    client = QdrantClient(":memory:")
    try:
        writer = ServerIndexWriter(client, "audit_count")
        writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
        writer.write_windows(ROOM_A, [point(ROOM_A, "$1", ALICE, 1000), point(ROOM_A, "$2", BOB, 2000)], [])
        writer.write_windows(ROOM_B, [point(ROOM_B, "$3", BOB, 3000)], [])
        reader = ServerIndexReader(client, "audit_count")
        assert reader.count_eligible(SearchFilter()) == 3
        assert reader.count_eligible(SearchFilter(room_ids=(ROOM_A,))) == 2
        assert reader.count_eligible(SearchFilter(senders=(BOB,), after_ms=2500)) == 1
        assert reader.count_eligible(SearchFilter(room_ids=())) == 0
        assert ServerIndexReader(client, "absent").count_eligible(SearchFilter()) == 0
    finally:
        client.close()
