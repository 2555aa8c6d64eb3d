"""daemon.reader.service: the real asyncio server on a temporary socket, with fake index and embedder.

Covers: replies over the socket, protocol fuzzing against the live server (each bad input gets
an error reply or a clean close, and other clients keep being served), generation swaps while
clients query, degradation, the audit line (digest, never the text), socket mode and hand-over.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.reader.memory import GiveBack
from daemon.reader.protocol import MAX_LINE_BYTES
from daemon.reader.search import canonical_query, make_query
from daemon.reader.service import ReaderService
from daemon.reader.sockets import bind_socket
from tests.reader_fakes import (
    ALICE,
    BOB,
    ROOM_A,
    ROOM_B,
    DenseFailingEmbedder,
    FakeEmbedder,
    FakeIndex,
    RecordingLogger,
    Running,
    corpus,
    make_window,
    message_vectors,
)
from tests.reader_sockets import ask, connect, read_until_closed, service_over


def alive(path: Path) -> bool:
    return ask(path, {"v": 1, "op": "status"})["ok"] is True


# ---------------------------------------------------------------------------------------------
# Serving


def test_search_listing_and_window_over_the_socket(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        reply = ask(path, {"v": 1, "id": 9, "op": "search", "texts": ["database migration"], "top_k": 2})
        assert reply["ok"] and reply["id"] == 9
        result = reply["result"]
        assert set(result) == {"hits", "next", "degraded", "warnings"}
        assert result["hits"][0]["room_id"] == ROOM_A and len(result["hits"]) == 2

        listing = ask(path, {"v": 1, "op": "search", "top_k": 3})["result"]
        assert [h["first_event_id"] for h in listing["hits"]] == ["$a1", "$b1", "$c1"]
        assert isinstance(listing["next"], str)
        rest = ask(path, {"v": 1, "op": "search", "top_k": 3, "cursor": listing["next"]})["result"]
        assert [h["first_event_id"] for h in rest["hits"]] == ["$a3"] and rest["next"] is None

        window = ask(path, {"v": 1, "op": "window", "event_id": "$a2", "before": 1, "after": 0})
        assert [m["event_id"] for m in window["result"]["messages"]] == ["$a1", "$a2"]

        missing = ask(path, {"v": 1, "op": "window", "event_id": "$nope"})
        assert missing["ok"] is False
        assert missing["error"]["code"] == "not_found" and missing["error"]["field"] == "event_id"


def test_the_socket_is_mode_0660_and_removed_on_stop(sock_dir: Path) -> None:
    path = sock_dir / "sub" / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
    assert not path.exists()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    with Running(service_over(FakeIndex(corpus())), path):
        assert alive(path)
        with pytest.raises(OSError, match="already listening"):
            bind_socket(path)
        assert alive(path)


def test_many_clients_at_once(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus(), delay_s=0.02)), path):
        conns = [connect(path) for _ in range(20)]
        for conn in conns:
            conn.sendall(b'{"v":1,"op":"search","texts":["database"]}\n')
        started = time.monotonic()
        replies = [json.loads(conn.makefile("rb").readline()) for conn in conns]
        for conn in conns:
            conn.close()
        assert all(r["ok"] for r in replies)
        assert time.monotonic() - started < 20 * 0.02 * 2 + 2


def test_several_requests_on_one_connection_are_answered_in_order(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        with connect(path) as conn:
            conn.sendall(
                b'{"v":1,"id":1,"op":"status"}\n{"v":1,"id":2,"op":"frobnicate"}\n\n{"v":1,"id":3,"op":"status"}\n'
            )
            conn.shutdown(socket.SHUT_WR)
            lines = [json.loads(line) for line in read_until_closed(conn)]
        assert [(r["id"], r["ok"]) for r in lines] == [(1, True), (2, False), (3, True)]
        assert lines[1]["error"]["code"] == "unknown_op" and lines[1]["error"]["field"] == "op"


# ---------------------------------------------------------------------------------------------
# Hostile and broken clients


def test_a_huge_line_gets_an_error_then_close_and_others_are_served(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        with connect(path) as conn:
            try:
                conn.sendall(b"x" * (MAX_LINE_BYTES + 10))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the reader may close before reading it all
            lines = read_until_closed(conn)
        assert json.loads(lines[0])["error"]["code"] == "line_too_long"
        assert len(lines) == 1
        assert alive(path)


def test_a_half_closed_connection_still_gets_its_answer(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        with connect(path) as conn:
            conn.sendall(b'{"v":1,"op":"search","texts":["geese"]}')  # no newline, then EOF
            conn.shutdown(socket.SHUT_WR)
            lines = read_until_closed(conn)
        assert len(lines) == 1 and json.loads(lines[0])["ok"] is True


def test_clients_that_vanish_do_not_hurt_the_reader(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus(), delay_s=0.05)), path):
        for _ in range(5):
            connect(path).close()  # connect and leave
        conn = connect(path)
        conn.sendall(b'{"v":1,"op":"search","texts":["database"]}\n')
        conn.close()  # leave before the answer is written
        conn = connect(path)
        conn.sendall(b'{"v":1,"op":"sea')  # half a request, then vanish
        conn.close()
        time.sleep(0.1)
        assert alive(path)


@pytest.fixture(scope="module")
def fuzz_reader() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    path = directory / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        yield path
    shutil.rmtree(directory, ignore_errors=True)


_junk_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=10,
)
_requests = st.one_of(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ")),
    _junk_json.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"v": st.sampled_from([1, 2, "1", None]), "op": st.sampled_from(["search", "window", "status", "drop", 3])},
        optional={
            "texts": _junk_json,
            "top_k": _junk_json,
            "rooms": _junk_json,
            "event_id": _junk_json,
            "before": _junk_json,
            "cursor": _junk_json,
        },
    ).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=_requests, half_close=st.booleans(), terminate=st.booleans())
def test_fuzz_every_input_gets_a_reply_or_a_clean_close(
    fuzz_reader: Path, line: bytes, half_close: bool, terminate: bool
) -> None:
    with connect(fuzz_reader) as conn:
        conn.sendall(line + (b"\n" if terminate else b""))
        if half_close or not terminate or not line.strip():  # a blank line gets no reply
            conn.shutdown(socket.SHUT_WR)
            lines = read_until_closed(conn)
        else:
            with conn.makefile("rb") as stream:
                lines = [stream.readline().strip()]
    for reply_line in lines:
        reply = json.loads(reply_line)
        assert reply["v"] == 1 and isinstance(reply["ok"], bool)
        if not reply["ok"]:
            assert reply["error"]["code"] and reply["error"]["message"]
            assert reply["error"]["code"] != "internal"
    if line.strip():
        assert len(lines) == 1  # a non-blank request always gets exactly one reply
    assert alive(fuzz_reader)


# ---------------------------------------------------------------------------------------------
# Generations


class Generations:
    """open_index over a counter: a new FakeIndex each time the counter moves. A reader used
    after close raises, so closing one that a request still holds would fail that request."""

    def __init__(self, windows: list[dict[str, Any]], delay_s: float = 0.0):
        self.windows = windows
        self.delay_s = delay_s
        self.counter = 1
        self.opened: list[FakeIndex] = []

    def publish(self) -> None:
        self.counter += 1

    def open_index(self) -> FakeIndex:
        generation = self.counter
        time.sleep(0.005)  # opening takes a while (a copy)
        index = FakeIndex(self.windows, generation=generation, delay_s=self.delay_s)
        index.newer_available = lambda: self.counter != generation  # type: ignore[attr-defined]
        self.opened.append(index)
        return index


def test_generation_swaps_while_clients_query_fail_no_request(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    generations = Generations(corpus(), delay_s=0.003)
    service = ReaderService(
        generations.open_index, FakeEmbedder, None, logger=RecordingLogger(), swap_check_s=0.01, request_check_s=0.0
    )
    failures: list[Any] = []
    answered = [0]
    stop = threading.Event()

    def client(n: int) -> None:
        requests = [
            {"v": 1, "op": "search", "texts": ["database migration", "geese"]},
            {"v": 1, "op": "search", "top_k": 2},
            {"v": 1, "op": "window", "event_id": "$a2"},
        ]
        i = n
        while not stop.is_set():
            try:
                reply = ask(path, requests[i % 3])
            except Exception as exc:  # noqa: BLE001
                failures.append(repr(exc))
                continue
            i += 1
            if not reply["ok"]:
                failures.append(reply["error"])
            else:
                answered[0] += 1

    with Running(service, path):
        threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for _ in range(15):
            time.sleep(0.03)
            generations.publish()
        time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(10)
        assert failures == []
        assert answered[0] > 50
        assert service.swaps >= 5
        current = generations.opened[-1]
        assert all(index.closed for index in generations.opened if index is not current)


def test_each_swap_serves_the_old_generation_until_the_new_one_is_loaded_then_leaves_one_in_memory(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old generation answers while the new one loads; once swapped, the old one is closed
    and the freed heap handed back (``release_freed_memory``) with exactly one generation open."""
    import daemon.reader.generations as service_module

    path = sock_dir / "r.sock"
    generations = Generations(corpus())
    loading = threading.Event()
    release = threading.Event()
    slow_open = generations.open_index

    def open_index() -> Any:
        if generations.opened:  # not the first: hold the load until the test lets it finish
            loading.set()
            release.wait(10)
        return slow_open()

    open_at_trim: list[int] = []
    monkeypatch.setattr(
        service_module,
        "release_freed_memory",
        lambda: open_at_trim.append(sum(not index.closed for index in generations.opened)),
    )
    service = ReaderService(open_index, FakeEmbedder, None, logger=RecordingLogger(), swap_check_s=0.01)
    with Running(service, path):
        for round_ in range(1, 4):
            generations.publish()
            assert loading.wait(10)
            loading.clear()
            assert ask(path, {"v": 1, "op": "search", "texts": ["database migration"]})["ok"]
            assert ask(path, {"v": 1, "op": "status"})["result"]["generation"] == round_  # the old one serves
            release.set()
            deadline = time.monotonic() + 10
            while service.swaps < round_ and time.monotonic() < deadline:
                time.sleep(0.01)
            release.clear()
            assert [index.closed for index in generations.opened] == [True] * round_ + [False]
        assert open_at_trim == [1, 1, 1]


class _PagedIndex(FakeIndex):
    """A FakeIndex that maps pages like the Edge copy: ``release_pages`` records the requests in
    flight when it ran, whether the index was still open, and how many queries had run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.released: list[tuple[int | None, bool, int]] = []
        self.service: Any = None

    def release_pages(self) -> None:
        self.released.append((getattr(self.service, "_in_flight", None), self.closed, len(self.calls)))


def test_memory_is_given_back_after_the_last_request_in_flight_ends(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Searches map pages of the generation's files and a query's activations stay on glibc's heap:
    the reader drops the one and trims the other after each reply, on the pool (no search waits
    for the ~2 ms a release costs), with the generation held open meanwhile."""
    import daemon.reader.memory as service_module

    trims: list[int | None] = []
    index = _PagedIndex(corpus())
    service = service_over(index, give_back=GiveBack(0, 0))  # give back after every request
    index.service = service
    monkeypatch.setattr(service_module.native, "malloc_trim", lambda: trims.append(service._in_flight))
    path = sock_dir / "r.sock"
    with Running(service, path):
        for _ in range(3):
            assert ask(path, {"v": 1, "op": "search", "texts": ["database migration"]})["ok"]
        assert ask(path, {"v": 1, "op": "window", "event_id": "$a2"})["ok"]
        deadline = time.monotonic() + 10
        while (len(trims) < 4 or len(index.released) < 4) and time.monotonic() < deadline:
            time.sleep(0.01)
    # once each reply is out (the next request may have begun meanwhile; a load may trim too)
    assert len(trims) >= 4 and trims[-1] == 0
    assert len(index.released) >= 4 and not any(closed for _, closed, _ in index.released)
    assert index.released[-1][2] == len(index.calls)  # the last came after the last query


def _scenario(service: ReaderService, index: FakeIndex, body: Any) -> None:
    """Run ``body(line)`` in a loop against a service that was never started, on ``index``."""
    import daemon.reader.generations as service_module

    async def run() -> None:
        service._current = service_module.IndexLease(index)
        service._current.embedder = FakeEmbedder()
        service._last_check = float("inf")  # no generation check: this service was never started
        await body(json.dumps({"v": 1, "op": "search", "texts": ["database"]}).encode())
        while service._tidying:
            await asyncio.gather(*list(service._tidying))
        service._pool.shutdown()
        service._tidy_pool.shutdown()

    asyncio.run(run())


def test_with_others_in_flight_a_search_drops_its_pages_before_its_reply_alone_after_it() -> None:
    """Sixteen clients keep requests in flight all the time: a release deferred past the reply
    (queued, or waiting for the index behind their searches) let their pages pile up (410 MB peak
    at 100k windows against 386). Alone, the reply goes first."""
    index = _PagedIndex(corpus())
    service = service_over(index, give_back=GiveBack(0, 0))  # give back after every request
    index.service = service

    async def body(line: bytes) -> None:
        for n in range(1, 4):
            service._in_flight = 2  # two other requests stay in flight throughout
            assert json.loads(await service.answer(line))["ok"]
            assert len(index.released) == n and index.released[-1][2] == len(index.calls)  # before the reply
        await asyncio.gather(*list(service._tidying))
        assert len(index.released) == 3  # and not again after it
        service._in_flight = 0
        assert json.loads(await service.answer(line))["ok"]
        assert len(index.released) == 3  # alone: not before the reply...
        await asyncio.gather(*list(service._tidying))
        assert len(index.released) == 4  # ...but after it

    _scenario(service, index, body)
    assert service._current is not None and service._current.users == 0


def test_requests_ending_while_two_releases_are_outstanding_get_one_more_after_them() -> None:
    index = _PagedIndex(corpus())
    service = service_over(index, give_back=GiveBack(0, 0))  # give back after every request
    index.service = service

    async def body(line: bytes) -> None:
        lease = service._current
        assert lease is not None
        for _ in range(5):  # five requests end at once
            lease.users += 1
            service._release_after_tidying(lease)
        assert len(service._tidying) == 2 and lease.users == 2

    _scenario(service, index, body)
    assert len(index.released) == 3  # two outstanding, then one for the three that ended meanwhile
    assert service._current is not None and service._current.users == 0


MB = 1024 * 1024


def test_memory_is_given_back_once_it_passes_its_budget_and_counted_from_the_lowest_level() -> None:
    # (file-backed, anonymous) resident bytes, as /proc/self/statm would say them, one per reading
    readings = iter(
        [
            (50 * MB, 100 * MB),  # first ask: nothing given back yet, so due
            (50 * MB, 100 * MB),  # after the drop: the floor
            (70 * MB, 100 * MB),  # 20 MB of pages over it: under the 32 MB budget
            (83 * MB, 100 * MB),  # 33 MB over: due
            (40 * MB, 100 * MB),  # after that drop
            (30 * MB, 100 * MB),  # lower still (a generation closed): the floor follows it down
            (60 * MB, 100 * MB),  # 30 MB over the new floor: under budget
        ]
    )
    give_back = GiveBack(pages_mb=32, heap_mb=16, measure=lambda: next(readings))
    index = _PagedIndex(corpus())
    assert give_back.drop_pages(index) and len(index.released) == 1
    assert not give_back.drop_pages(index)
    assert give_back.drop_pages(index) and len(index.released) == 2
    assert not give_back.drop_pages(index)
    assert not give_back.drop_pages(index)
    assert len(index.released) == 2


def test_without_a_reading_of_its_memory_a_reader_gives_back_after_every_request() -> None:
    give_back = GiveBack(pages_mb=32, heap_mb=16, measure=lambda: None)
    index = _PagedIndex(corpus())
    for n in range(1, 4):
        assert give_back.drop_pages(index) and len(index.released) == n


def test_a_search_that_maps_little_leaves_its_pages_until_the_budget_is_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping the pages after every search made the next one fault them back in (~0.9 ms at
    10k windows); each search here maps 10 MB against a 25 MB budget, so one search in three
    drops them, and the heap (unchanged) is trimmed once."""
    import daemon.reader.memory as service_module

    index = _PagedIndex(corpus())

    def measure() -> tuple[int, int]:
        searches = sum(1 for call in index.calls if call[0] == "hybrid")
        dropped_at = index.released[-1][2] if index.released else 0
        since = sum(1 for call in index.calls[dropped_at:] if call[0] == "hybrid")
        return 40 * MB + 10 * MB * since, 100 * MB + 0 * searches

    trims: list[int] = []
    monkeypatch.setattr(service_module.native, "malloc_trim", lambda: trims.append(1))
    service = service_over(index, give_back=GiveBack(pages_mb=25, heap_mb=16, measure=measure))
    index.service = service

    async def body(line: bytes) -> None:
        for _ in range(9):
            assert json.loads(await service.answer(line))["ok"]
            await asyncio.gather(*list(service._tidying))

    _scenario(service, index, body)
    searches = [n for n, call in enumerate(index.calls, 1) if call[0] == "hybrid"]
    assert len(searches) == 9
    assert [calls for _, _, calls in index.released] == [searches[0], searches[3], searches[6]]
    assert trims == [1]


def test_a_reader_with_no_index_yet_says_so_then_picks_it_up(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    published: list[FakeIndex] = []

    def open_index() -> FakeIndex | None:
        return published[0] if published else None

    service = ReaderService(open_index, FakeEmbedder, None, logger=RecordingLogger(), swap_check_s=0.02)
    with Running(service, path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["database"]})
        assert reply["error"]["code"] == "unavailable"
        published.append(FakeIndex(corpus()))
        deadline = time.monotonic() + 5
        while not ask(path, {"v": 1, "op": "search", "texts": ["database"]})["ok"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)


def test_an_index_that_fails_to_open_keeps_the_old_one(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    first = FakeIndex(corpus(), generation=1)
    first.newer_available = lambda: True  # type: ignore[attr-defined]
    calls = [0]

    def open_index() -> FakeIndex:
        calls[0] += 1
        if calls[0] > 1:
            raise OSError("generation vanished while copying")
        return first

    logger = RecordingLogger()
    service = ReaderService(open_index, FakeEmbedder, None, logger=logger, swap_check_s=0.01)
    with Running(service, path):
        time.sleep(0.1)
        assert ask(path, {"v": 1, "op": "search", "texts": ["database"]})["ok"]
    assert any(e == "index_open_failed" for _, e, _ in logger.lines)


# ---------------------------------------------------------------------------------------------
# Degradation


def test_embedder_failing_at_query_time_answers_lexical_only(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus()), DenseFailingEmbedder()), path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"], "rooms": [ROOM_B]})
        assert reply["ok"] and reply["result"]["degraded"] == "lexical_only"
        assert {h["room_id"] for h in reply["result"]["hits"]} == {ROOM_B}


def test_embedder_failing_to_load_uses_the_sparse_fallback_or_refuses(sock_dir: Path) -> None:
    def broken() -> Any:
        raise RuntimeError("model dir missing")

    path = sock_dir / "r.sock"
    with_sparse = ReaderService(
        lambda: FakeIndex(corpus()), broken, None, logger=RecordingLogger(), sparse_factory=FakeEmbedder
    )
    with Running(with_sparse, path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"], "rooms": [ROOM_B]})
        assert reply["result"]["degraded"] == "lexical_only"
        assert {h["room_id"] for h in reply["result"]["hits"]} == {ROOM_B}
        assert ask(path, {"v": 1, "op": "status"})["result"]["embedder"] == "lexical_only"

    without = ReaderService(lambda: FakeIndex(corpus()), broken, None, logger=RecordingLogger())
    with Running(without, path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"]})
        assert reply["ok"] is False and reply["error"]["code"] == "unavailable"
        assert ask(path, {"v": 1, "op": "search"})["ok"]  # listing needs no embedder
        assert ask(path, {"v": 1, "op": "window", "event_id": "$a1"})["ok"]


# ---------------------------------------------------------------------------------------------
# Audit


def test_one_audit_line_per_request_with_a_digest_never_the_text(sock_dir: Path) -> None:
    key_file = sock_dir / "audit-key"
    key_file.write_bytes(b"s3cret-audit-key\n")
    key_file.chmod(0o600)
    logger = RecordingLogger()
    service = ReaderService(
        lambda: FakeIndex(corpus()), FakeEmbedder, SimpleNamespace(audit_key_file=key_file), logger=logger
    )
    path = sock_dir / "r.sock"
    secret_text = "database migration zebra-canary"
    with Running(service, path):
        reply = ask(path, {"v": 1, "op": "search", "texts": [secret_text], "rooms": ["#dev:example.org"], "top_k": 2})
        ask(path, {"v": 1, "op": "search", "texts": [secret_text], "top_k": 99})
        ask(path, {"v": 1, "op": "window", "event_id": "$a1"})
        ask(path, b"not json")
    audit = logger.audit()
    assert len(audit) == 4
    first = audit[0]
    expected = hmac.new(b"s3cret-audit-key", canonical_query(make_query([secret_text], top_k=2)), hashlib.sha256)
    assert first["query_digest"] == expected.hexdigest()
    assert first["filters"]["rooms"] == ["#dev:example.org"]
    assert first["window_ids"] == [h["chunk_id"] for h in reply["result"]["hits"]]
    assert isinstance(first["duration_ms"], float)
    assert audit[1]["outcome"] == "bad_request" and audit[1]["field"] == "top_k"
    assert audit[2]["op"] == "window" and audit[2]["window_ids"]
    assert audit[3]["outcome"] == "bad_json"
    everything = json.dumps(logger.lines, default=str)
    assert "zebra" not in everything and "s3cret" not in everything


def test_no_audit_key_means_no_digest(sock_dir: Path) -> None:
    logger = RecordingLogger()
    service = ReaderService(
        lambda: FakeIndex(corpus()), FakeEmbedder, SimpleNamespace(audit_key_file=None), logger=logger
    )
    path = sock_dir / "r.sock"
    with Running(service, path):
        ask(path, {"v": 1, "op": "search", "texts": ["database"]})
    assert logger.audit()[0]["query_digest"] is None


# ---------------------------------------------------------------------------------------------
# Process-level properties


def test_the_reader_imports_no_write_path() -> None:
    code = (
        "import sys, daemon.reader.service;"
        "bad = [m for m in ('daemon.refresher.run', 'daemon.refresher.matrix', 'nio', 'daemon.wiring') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_systemd_socket_is_taken_from_fd_3(sock_dir: Path) -> None:
    path = sock_dir / "sd.sock"
    code = f"""
import os, socket
from daemon.reader.sockets import systemd_socket
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind({str(path)!r}); listener.listen(1)
fd = listener.detach()
if fd != 3:
    os.dup2(fd, 3); os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid()); os.environ["LISTEN_FDS"] = "1"
sock = systemd_socket()
assert sock is not None and sock.fileno() == 3 and sock.family == socket.AF_UNIX
assert "LISTEN_FDS" not in os.environ and "LISTEN_PID" not in os.environ
os.environ["LISTEN_PID"] = "1"; os.environ["LISTEN_FDS"] = "1"
assert systemd_socket() is None  # meant for another process
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------------------------------------
# Against the real embedded index (the contract with daemon.index.edge_reader)


@pytest.mark.slow
def test_reader_over_real_edge_generations(sock_dir: Path) -> None:
    edge_writer = pytest.importorskip("daemon.index.edge_writer")
    edge_reader = pytest.importorskip("daemon.index.edge_reader")
    import uuid

    from daemon.index import schema
    from daemon.index.port import IndexMeta, RoomEntry, WindowPoint

    root, private = sock_dir / "index", sock_dir / "private"
    embedder = FakeEmbedder()

    def point(room: str, messages: list, alias: str) -> WindowPoint:
        chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, room + messages[0][0]))
        payload = make_window(room, messages, alias=alias, chunk_id=chunk_id)
        return WindowPoint(chunk_id, message_vectors(payload), embedder.sparse_query(payload["text"]), payload)

    dev = [
        point(ROOM_A, [("$1", ALICE, 1_000, "database migration failed"), ("$2", BOB, 2_000, "rollback")], "#dev:x"),
        point(ROOM_A, [("$3", ALICE, 3_000, "lunch on friday")], "#dev:x"),
        point(ROOM_A, [("$4", BOB, 4_000, "key rotation done"), ("$5", ALICE, 4_000, "thanks")], "#dev:x"),
    ]
    nature = [point(ROOM_B, [(f"$n{i}", BOB, 4_000, f"geese number {i}")], "#nature:x") for i in range(3)]
    writer = edge_writer.EdgeIndexWriter(root)
    writer.reset(IndexMeta(model="fake-bag", dim=64, chat_version="test"))
    writer.write_windows(ROOM_A, dev, [])
    writer.write_windows(ROOM_B, nature, [])
    # The refresher writes each room's directory entry: what an alias resolves through.
    entry = RoomEntry(ROOM_B, name="Nature", canonical_alias="#nature:x")
    writer.set_meta_entry(schema.room_entry_key(ROOM_B), schema.room_entry_value(entry))
    writer.commit()

    service = ReaderService(
        lambda: edge_reader.EdgeIndexReader.open_latest(root, private),
        lambda: embedder,
        None,
        logger=RecordingLogger(),
        swap_check_s=0.02,
    )
    path = sock_dir / "r.sock"
    try:
        with Running(service, path):
            hits = ask(path, {"v": 1, "op": "search", "texts": ["database migration"], "top_k": 1})["result"]["hits"]
            assert [h["first_event_id"] for h in hits] == ["$1"]
            only_b = ask(
                path, {"v": 1, "op": "search", "texts": ["database migration"], "rooms": ["#nature:x"], "top_k": 1}
            )
            assert [h["room_id"] for h in only_b["result"]["hits"]] == [ROOM_B]

            seen, cursor = [], None
            while True:
                page = ask(path, {"v": 1, "op": "search", "top_k": 2} | ({"cursor": cursor} if cursor else {}))[
                    "result"
                ]
                seen += [h["first_event_id"] for h in page["hits"]]
                cursor = page["next"]
                if cursor is None:
                    break
            assert sorted(seen) == sorted(["$1", "$3", "$4", "$n0", "$n1", "$n2"]) and len(seen) == 6
            assert seen[:2] == ["$1", "$3"]

            window = ask(path, {"v": 1, "op": "window", "event_id": "$3", "before": 2, "after": 2})["result"]
            assert [m["event_id"] for m in window["messages"]] == ["$1", "$2", "$3", "$4", "$5"]

            writer.write_windows(ROOM_A, [point(ROOM_A, [("$6", BOB, 9_000, "zeppelin sighted")], "#dev:x")], [])
            writer.commit()
            deadline = time.monotonic() + 10
            while True:
                hits = ask(path, {"v": 1, "op": "search", "texts": ["zeppelin"], "top_k": 1})["result"]["hits"]
                if hits and hits[0]["first_event_id"] == "$6":
                    break
                assert time.monotonic() < deadline, "the reader never picked up the new generation"
                time.sleep(0.05)
            assert service.swaps >= 1
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------
# Leases: no reader is closed while a call on it is running


def test_an_id_with_a_lone_surrogate_still_gets_a_reply(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    with Running(service_over(FakeIndex(corpus())), path):
        reply = ask(path, b'{"v": 1, "id": "\\ud800", "op": "status"}')
        assert reply["ok"] is True and reply["id"] == "\ud800"
        reply = ask(path, b'{"v": 1, "op": "search", "rooms": ["!\\ud800"]}')
        assert reply["error"]["code"] == "bad_request" and reply["error"]["field"] == "rooms"
        assert alive(path)


class BusyTracking(FakeIndex):
    """Records whether ``close`` came while a ``read_meta`` or ``hybrid`` call was running."""

    def __init__(self, *args: Any, slow_s: float = 0.4, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.slow_s = slow_s
        self.busy = 0
        self.closed_while_busy = False

    def read_meta(self) -> Any:
        self.busy += 1
        try:
            time.sleep(self.slow_s)
            self._check()
            return SimpleNamespace(model="model-of-generation", chat_version="c1")
        finally:
            self.busy -= 1

    def hybrid(self, *args: Any, **kwargs: Any) -> Any:
        self.busy += 1
        try:
            time.sleep(self.slow_s)
            return super().hybrid(*args, **kwargs)
        finally:
            self.busy -= 1

    def close(self) -> None:
        self.closed_while_busy = self.closed_while_busy or self.busy > 0
        super().close()


@pytest.mark.slow
def test_a_swap_during_a_status_request_waits_for_it(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    first = BusyTracking(corpus(), generation=1)
    newer = [False]
    first.newer_available = lambda: newer[0]  # type: ignore[attr-defined]
    opened = [first]

    def open_index() -> FakeIndex:
        if not opened:
            return FakeIndex(corpus(), generation=2)
        return opened.pop()

    service = ReaderService(open_index, FakeEmbedder, None, logger=RecordingLogger(), swap_check_s=0.02)
    with Running(service, path):
        status: list[dict[str, Any]] = []
        asking = threading.Thread(target=lambda: status.append(ask(path, {"v": 1, "op": "status"})))
        asking.start()
        time.sleep(0.1)  # the status request is inside read_meta now
        newer[0] = True  # the next periodic check swaps
        deadline = time.monotonic() + 5
        while service.swaps < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        asking.join(5)
    assert status[0]["result"]["model"] == "model-of-generation"
    assert first.closed and not first.closed_while_busy


def test_stopping_with_a_request_in_flight_closes_the_reader_after_it(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    index = BusyTracking(corpus(), generation=1)
    running = Running(service_over(index), path)
    running.__enter__()
    try:
        asking = threading.Thread(target=lambda: _ignore_errors(ask, path, {"v": 1, "op": "search", "texts": ["x"]}))
        asking.start()
        time.sleep(0.1)  # the search is inside hybrid now
        asyncio.run_coroutine_threadsafe(running.service.stop(grace_s=0.01), running.loop).result(10)
        asking.join(5)
    finally:
        running.__exit__(None, None, None)
    assert index.closed and not index.closed_while_busy


def _ignore_errors(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except (OSError, ValueError):
        pass  # the reader stopped before answering


@pytest.mark.slow
def test_a_client_that_never_reads_its_replies_is_dropped_after_the_idle_timeout(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    requests = 20_000
    with Running(service_over(FakeIndex(corpus()), idle_timeout_s=0.3), path):
        with connect(path, timeout=10) as conn:
            sender = threading.Thread(
                target=_ignore_errors, args=(conn.sendall, b'{"v":1,"op":"window","event_id":"$a2"}\n' * requests)
            )
            sender.start()
            time.sleep(1.5)  # replies pile up unread far longer than the idle timeout
            replies = read_until_closed(conn)
            sender.join(5)
        assert 0 < len(replies) < requests  # dropped, not held open until every reply was taken
        assert alive(path)


def test_a_second_reader_on_a_live_socket_fails_before_loading_anything(sock_dir: Path) -> None:
    path = sock_dir / "r.sock"
    loaded: list[str] = []

    def open_index() -> FakeIndex:
        loaded.append("index")  # an Edge opener would copy a generation here
        return FakeIndex(corpus())

    def load_embedder() -> FakeEmbedder:
        loaded.append("embedder")
        return FakeEmbedder()

    with Running(service_over(FakeIndex(corpus())), path):
        second = ReaderService(open_index, load_embedder, None, logger=RecordingLogger())
        with pytest.raises(OSError, match="already listening"):
            asyncio.run(second.start(path=path))
        assert loaded == []
        assert alive(path)


def test_the_edge_opener_discards_leftover_copies_once_at_its_first_open(sock_dir: Path) -> None:
    from daemon.config import Settings
    from daemon.wiring import make_index_opener

    private = sock_dir / "private"
    (private / "gen-7-left-by-a-dead-reader").mkdir(parents=True)
    settings = Settings(
        qdrant_url=None, state_dir=sock_dir / "state", reader_private_dir=private, qdrant_api_key_file=None
    )
    open_edge = make_index_opener(settings)
    assert (private / "gen-7-left-by-a-dead-reader").is_dir()  # nothing happens before serving
    assert open_edge() is None  # nothing published yet
    assert not (private / "gen-7-left-by-a-dead-reader").exists()
    (private / "gen-8-in-use").mkdir()
    assert open_edge() is None
    assert (private / "gen-8-in-use").is_dir()  # this reader's own copies are never discarded


# ---------------------------------------------------------------------------------------------
# The model a generation was built with


class _BuiltWith(FakeIndex):
    def __init__(self, windows: list[dict[str, Any]], model: str, dim: int) -> None:
        super().__init__(windows)
        self._meta = SimpleNamespace(model=model, dim=dim, chat_version="c")

    def read_meta(self) -> Any:
        self._check()
        return self._meta


class _OtherModel(FakeEmbedder):
    model_id = "other/model"


def test_a_generation_built_with_another_model_is_ranked_lexically_and_says_so(sock_dir: Path) -> None:
    index = _BuiltWith(corpus(), "other/model", FakeEmbedder.dim)
    embedder = FakeEmbedder()
    logger = RecordingLogger()
    path = sock_dir / "r.sock"
    with Running(service_over(index, embedder, logger=logger), path):
        for _ in range(2):
            reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"], "rooms": [ROOM_B]})
            assert reply["ok"] and reply["result"]["degraded"] == "model_mismatch"
            assert {h["room_id"] for h in reply["result"]["hits"]} == {ROOM_B}
        assert ask(path, {"v": 1, "op": "status"})["result"]["degraded"] == "model_mismatch"
    assert embedder.embed_calls == []  # its vectors never ranked this generation
    assert {c[0] for c in index.calls} == {"lexical"}
    mismatches = [f for _, e, f in logger.lines if e == "model_mismatch"]
    assert len(mismatches) == 1  # journalled once, not per request
    assert mismatches[0]["index_model"] == "other/model" and mismatches[0]["embedder_model"] == FakeEmbedder.model_id


def test_a_dim_mismatch_is_a_model_mismatch_too(sock_dir: Path) -> None:
    index = _BuiltWith(corpus(), FakeEmbedder.model_id, FakeEmbedder.dim * 2)
    path = sock_dir / "r.sock"
    with Running(service_over(index, FakeEmbedder()), path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"]})
        assert reply["result"]["degraded"] == "model_mismatch"


def test_the_generations_model_is_loaded_from_the_model_directory_when_it_is_there(sock_dir: Path) -> None:
    index = _BuiltWith(corpus(), "other/model", FakeEmbedder.dim)
    other = _OtherModel()
    asked: list[str] = []

    def loader(model: str) -> Any:
        asked.append(model)
        return other if model == "other/model" else None

    path = sock_dir / "r.sock"
    with Running(service_over(index, FakeEmbedder(), model_loader=loader), path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["migration"]})
        assert reply["ok"] and reply["result"]["degraded"] is None
    assert asked == ["other/model"] and other.embed_calls[0] == ["migration"]  # then the hit messages, for attribution
    assert "hybrid" in {c[0] for c in index.calls}


def test_a_generation_built_with_the_loaded_model_is_ranked_by_it(sock_dir: Path) -> None:
    index = _BuiltWith(corpus(), FakeEmbedder.model_id, FakeEmbedder.dim)
    path = sock_dir / "r.sock"
    with Running(service_over(index, FakeEmbedder(), model_loader=lambda m: pytest.fail("no load needed")), path):
        assert ask(path, {"v": 1, "op": "search", "texts": ["migration"]})["result"]["degraded"] is None


def test_the_resident_split_is_read_from_statm_and_none_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from daemon import native

    split = native.resident_bytes()
    if sys.platform.startswith("linux"):
        assert split is not None and split[0] > 0 and split[1] > 0
    real_open = builtins.open

    def no_proc(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert native.resident_bytes() is None
