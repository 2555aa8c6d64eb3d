"""Transport faults of RemoteIndexWriter: qdrant-client's REST transport is httpx, so respx stands
in for a Qdrant server that answers 500, times out, or says nothing. Nothing listens on 6333."""

from __future__ import annotations

import json
import socket
import traceback
import uuid

import httpx
import pytest
import respx

from daemon.index import schema
from daemon.index.port import IndexWriteError, RoomCursor, SearchFilter, SparseVector, WindowPoint
from daemon.index.remote import connect
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")

API_KEY = "sekrit-api-key-4f1c9e"
BASE = "http://127.0.0.1:6333"
ROOM = "!room:example.org"
BATCH = "/collections/huginn_chat/points/batch"  # write_windows, purge_room
UPSERT = "/collections/huginn_chat/points"  # set_cursor, set_meta_entry


def a_window() -> WindowPoint:
    return WindowPoint(
        point_id=str(uuid.uuid4()),
        dense=[[1.0, 0.0]],  # one message, one vector
        sparse=SparseVector((3,), (1.0,)),
        payload={
            schema.ROOM_ID: ROOM,
            schema.TS_START: 1,
            schema.TS_END: 1,
            schema.N_MESSAGES: 1,
            schema.MESSAGES: [{"event_id": "$e", "sender": "@a:x", "ts": 1, "body": "hello"}],
        },
    )


def completed(n: int = 1) -> dict:
    """A batch update's answer: one result per operation."""
    return {"result": [{"operation_id": 1, "status": "completed"}] * n, "status": "ok", "time": 0.001}


def assert_secret_kept(err: pytest.ExceptionInfo) -> None:
    shown = "".join(traceback.format_exception(err.value))
    assert API_KEY not in shown
    assert ROOM in str(err.value)


@pytest.fixture
def writer() -> RemoteIndexWriter:
    return RemoteIndexWriter(connect(BASE, API_KEY, timeout=2))


def test_connect_refuses_a_url_without_scheme_naming_the_setting():
    with pytest.raises(ValueError, match="HUGINN_CHAT_QDRANT_URL"):
        connect("127.0.0.1:6333", None)
    with pytest.raises(ValueError, match="timeout"):
        connect(BASE, None, timeout=0)


@respx.mock(base_url=BASE, assert_all_called=True)
def test_writes_wait_for_acknowledgement_and_send_the_key(respx_mock, writer):
    batch = respx_mock.post(BATCH).respond(200, json=completed(1))
    upsert = respx_mock.put(UPSERT).respond(
        200, json={"result": {"operation_id": 2, "status": "completed"}, "status": "ok", "time": 0.001}
    )
    writer.write_windows(ROOM, [a_window()], [])
    writer.set_cursor(RoomCursor(ROOM, "t1", "$e", None, "c1"))
    for route in (batch, upsert):
        request = route.calls.last.request
        assert request.url.params["wait"] == "true"
        assert request.headers["api-key"] == API_KEY


@respx.mock(base_url=BASE)
def test_a_500_on_write_is_an_index_write_error(respx_mock, writer):
    respx_mock.post(BATCH).respond(500, json={"status": {"error": "Service internal error: disk full"}})
    with pytest.raises(IndexWriteError, match="write_windows") as err:
        writer.write_windows(ROOM, [a_window()], [])
    assert "500" in str(err.value) and "disk full" in str(err.value)
    assert_secret_kept(err)


@respx.mock(base_url=BASE)
def test_a_500_on_cursor_upsert_is_an_index_write_error(respx_mock, writer):
    respx_mock.put(UPSERT).respond(500, json={"status": {"error": "boom"}})
    with pytest.raises(IndexWriteError, match="set_cursor") as err:
        writer.set_cursor(RoomCursor(ROOM, "t1", "$e", None, "c1"))
    assert_secret_kept(err)


@respx.mock(base_url=BASE)
def test_an_unfinished_write_is_not_acknowledged(respx_mock, writer):
    respx_mock.post(BATCH).respond(
        200, json={"result": [{"operation_id": 1, "status": "acknowledged"}], "status": "ok", "time": 0.0}
    )
    with pytest.raises(IndexWriteError, match="not acknowledged") as err:
        writer.write_windows(ROOM, [a_window()], [])
    assert_secret_kept(err)


@pytest.mark.parametrize("fault", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.ConnectError])
def test_timeouts_and_refusals_are_index_write_errors(fault, writer):
    with respx.mock(base_url=BASE) as mock:
        route = mock.post(BATCH).mock(side_effect=fault("simulated"))
        with pytest.raises(IndexWriteError, match=fault.__name__) as err:
            writer.write_windows(ROOM, [a_window()], [])
    assert route.call_count == 1  # no hidden retry
    assert_secret_kept(err)


def test_a_real_refused_connection_is_an_index_write_error():
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    writer = RemoteIndexWriter(connect(f"http://127.0.0.1:{port}", API_KEY, timeout=2))
    with pytest.raises(IndexWriteError, match="purge_room") as err:
        writer.purge_room(ROOM)
    assert_secret_kept(err)
    with pytest.raises(IndexWriteError, match="get_cursor"):
        writer.get_cursor(ROOM)


@respx.mock(base_url=BASE)
def test_hybrid_sends_one_batch_with_the_filter_in_every_leg(respx_mock):
    route = respx_mock.post("/collections/huginn_chat/points/query/batch").respond(
        200, json={"result": [{"points": []}] * 2, "status": "ok", "time": 0.0}
    )
    reader = RemoteIndexReader(connect(BASE, API_KEY))
    flt = SearchFilter(room_ids=(ROOM,), senders=("@s:e",), after_ms=5, before_ms=9)
    assert reader.hybrid([1.0, 0.0], SparseVector((3,), (1.0,)), flt, 3) == []
    assert route.call_count == 1
    legs = json.loads(route.calls.last.request.content)["searches"]
    assert [leg["using"] for leg in legs] == [schema.DENSE, schema.SPARSE]
    for leg in legs:
        assert leg["limit"] == 50
        must = {(c["key"], json.dumps(c.get("match") or c.get("range"), sort_keys=True)) for c in leg["filter"]["must"]}
        assert (schema.ROOM_ID, json.dumps({"any": [ROOM]})) in must
        assert (schema.SENDERS, json.dumps({"any": ["@s:e"]})) in must
        assert (schema.KIND, json.dumps({"value": schema.KIND_WINDOW})) in must
        assert any(key == schema.N_MESSAGES for key, _ in must)
        assert any(key == schema.TS_END and '"gte": 5' in rng for key, rng in must)
        assert any(key == schema.TS_START and '"lte": 9' in rng for key, rng in must)


# -- the refresher over a failing server: the cursor never passes unstored data ----------------
#
# The store is qdrant-client's local mode; a fault replays the same call through the REST
# transport under respx, so the refresher meets the exception a real 500, timeout or refused
# connection raises, at the first upsert, delete or meta write of an incremental run.


class FaultyClient:
    """A QdrantClient (local mode) whose first write of one kind fails as a REST call would."""

    def __init__(self, local, fault: str | None = None, on: str | None = None) -> None:
        self._local, self.fault, self.on, self.fired = local, fault, on, []

    def __getattr__(self, name):
        return getattr(self._local, name)

    def _kind(self, name, args) -> str | None:
        from qdrant_client.http import models

        if name == "upsert":
            return "meta"
        if name == "delete":  # a rebuild drops the cursor, then the windows it did not rewrite
            return "delete"
        ops = args[1] if len(args) > 1 else []
        kinds = {"delete" if isinstance(op, models.DeleteOperation) else "upsert" for op in ops}
        return self.on if self.on in kinds else None

    def _call(self, name, *args, **kw):
        if self.fault and self._kind(name, args) == self.on and not self.fired:
            self.fired.append(name)
            rest = connect(BASE, None, timeout=1)
            with respx.mock(base_url=BASE) as mock:
                path = {"upsert": UPSERT, "delete": UPSERT + "/delete"}.get(name, BATCH)
                route = mock.put(path) if name == "upsert" else mock.post(path)
                if self.fault == "500":
                    route.respond(500, json={"status": {"error": "Service internal error"}})
                else:
                    route.mock(
                        side_effect={"timeout": httpx.ReadTimeout, "refused": httpx.ConnectError}[self.fault](
                            "simulated"
                        )
                    )
                return getattr(rest, name)(*args, **kw)
        return getattr(self._local, name)(*args, **kw)

    def upsert(self, *args, **kw):
        return self._call("upsert", *args, **kw)

    def delete(self, *args, **kw):
        return self._call("delete", *args, **kw)

    def batch_update_points(self, *args, **kw):
        return self._call("batch_update_points", *args, **kw)


def _refresh(hs, index, state_dir):
    import asyncio

    from chunker.fold import Bounds
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy
    from tests.fakes import FakeEmbedder, ListLog

    return asyncio.run(
        Refresher(
            matrix=hs,
            index=index,
            embedder=FakeEmbedder(),
            policy=Policy.build(allowed=("!r:hs.test",)),
            log=ListLog(),
            options=RefreshOptions(
                bounds=Bounds(max_bytes=300, max_gap_ms=3_600_000),
                page_size=6,
                checkpoint_events=8,
                state_dir=state_dir,
            ),
        ).run()
    )


def _content(index) -> dict[str, str]:
    return {p["chunk_id"]: json.dumps(p, sort_keys=True) for p in index.windows_in_span("!r:hs.test", 0, 10**14)}


@pytest.mark.parametrize("on", ["upsert", "delete", "meta"])
@pytest.mark.parametrize("fault", ["500", "timeout", "refused"])
@pytest.mark.slow
def test_a_failed_index_write_fails_the_run_and_the_next_run_converges(tmp_path, fault, on):
    from qdrant_client import QdrantClient

    from daemon.refresher.purges import add_purge
    from tests.fakes import FakeMatrix

    room = "!r:hs.test"
    hs = FakeMatrix()
    hs.add_room(room)
    sent = [hs.send(room, "@alice:hs.test", f"note {i}: the ferry leaves at {i} o'clock") for i in range(30)]
    edit = hs.edit(room, "@alice:hs.test", sent[5], "note 5: the ferry leaves late")
    clean, flaky = RemoteIndexWriter(QdrantClient(":memory:")), FaultyClient(QdrantClient(":memory:"))
    index = RemoteIndexWriter(flaky)  # type: ignore[arg-type]
    for target, state in ((clean, tmp_path / "clean"), (index, tmp_path / "flaky")):
        assert _refresh(hs, target, state).rooms_failed == 0
    before = index.get_cursor(room)

    # An incremental run that upserts (new and edited windows), deletes (redacting an edit whose
    # text was folded in rebuilds the room) and writes meta (cursor, purge record).
    for i in range(12):
        hs.send(room, "@bob:hs.test", f"reply {i}: and returns at {i + 1}")
    hs.edit(room, "@alice:hs.test", sent[3], "note 3: the ferry is cancelled")
    hs.redact(room, "@alice:hs.test", sent[20])
    hs.redact(room, "@alice:hs.test", edit)
    ts = [e["origin_server_ts"] for e in hs.rooms[room].timeline if e.get("event_id") in (sent[8], sent[14])]
    for state in (tmp_path / "clean", tmp_path / "flaky"):
        add_purge(state, room, ts[0], ts[1])
    assert _refresh(hs, clean, tmp_path / "clean").rooms_failed == 0

    flaky.fault, flaky.on = fault, on
    summary = _refresh(hs, index, tmp_path / "flaky")
    assert flaky.fired, f"no {on} write happened"
    assert summary.exit_code == 1 and summary.failed_rooms == [room]
    after = index.get_cursor(room)
    stored = {e for p in index.windows_in_span(room, 0, 10**14) for e in p["event_ids"]}
    assert after == before or after.last_event_id in stored  # never past what was stored

    flaky.fault = None
    assert _refresh(hs, index, tmp_path / "flaky").rooms_failed == 0
    assert _content(index) == _content(clean)
    assert sent[20] not in {e for p in index.windows_in_span(room, 0, 10**14) for e in p["event_ids"]}
