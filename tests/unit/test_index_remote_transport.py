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
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote import connect
from daemon.index.remote_writer import RemoteIndexWriter
from daemon.index.port import IndexWriteError, RoomCursor, SearchFilter, SparseVector, WindowPoint

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")

API_KEY = "sekrit-api-key-4f1c9e"
BASE = "http://127.0.0.1:6333"
ROOM = "!room:example.org"
BATCH = "/collections/huginn_chat/points/batch"  # write_windows, purge_room
UPSERT = "/collections/huginn_chat/points"  # set_cursor, set_meta_entry


def a_window() -> WindowPoint:
    return WindowPoint(
        point_id=str(uuid.uuid4()),
        dense=[1.0, 0.0],
        sparse=SparseVector((3,), (1.0,)),
        payload={schema.ROOM_ID: ROOM, schema.TS_START: 1, schema.TS_END: 1, schema.N_MESSAGES: 1},
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
