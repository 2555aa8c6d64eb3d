"""The server adapter creates a collection a Qdrant cluster can shard and replicate: shard number
and replication factor are settings, passed when ``reset`` creates the collection. qdrant-client's
local mode checks the call's API surface (it keeps one shard whatever it is told)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx
from qdrant_client import QdrantClient, models

from daemon.index import schema
from daemon.index.port import IndexMeta, SearchFilter, SparseVector
from daemon.index.remote import connect
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter


class _Recording:
    """A QdrantClient that remembers the keyword arguments of create_collection."""

    def __init__(self, inner: QdrantClient) -> None:
        self._inner = inner
        self.created: list[dict[str, Any]] = []

    def create_collection(self, *args: Any, **kwargs: Any) -> Any:
        self.created.append(kwargs)
        return self._inner.create_collection(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


META = IndexMeta(model="m", dim=8, chat_version="v")


def test_reset_creates_the_collection_with_the_configured_shards_and_copies():
    client = _Recording(QdrantClient(":memory:"))
    writer = RemoteIndexWriter(client, "cluster_test", shard_number=6, replication_factor=2)  # type: ignore[arg-type]
    writer.reset(META)
    assert client.created[-1]["shard_number"] == 6 and client.created[-1]["replication_factor"] == 2
    assert writer.read_meta() == META  # local mode accepted the call and the collection works


def test_without_settings_the_servers_defaults_apply():
    client = _Recording(QdrantClient(":memory:"))
    RemoteIndexWriter(client, "single_test").reset(META)  # type: ignore[arg-type]
    assert client.created[-1]["shard_number"] is None and client.created[-1]["replication_factor"] is None


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_a_bad_shard_number_or_replication_factor_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="shard_number"):
        RemoteIndexWriter(QdrantClient(":memory:"), "x", shard_number=bad)
    with pytest.raises(ValueError, match="replication_factor"):
        RemoteIndexWriter(QdrantClient(":memory:"), "x", replication_factor=bad)


def test_the_settings_reach_the_writer(tmp_path, monkeypatch):
    from daemon import wiring
    from daemon.config import Settings

    monkeypatch.setattr(wiring, "qdrant_client", lambda settings: QdrantClient(":memory:"))
    settings = Settings(
        state_dir=tmp_path,
        qdrant_url="http://127.0.0.1:6333",
        qdrant_api_key_file=None,
        qdrant_shard_number=3,
        qdrant_replication_factor=2,
    )
    writer = wiring.open_index_writer(settings)
    assert (writer._shard_number, writer._replication_factor) == (3, 2)


def _server(request: httpx.Request) -> httpx.Response:
    """A Qdrant server with no collections, answering what ``reset`` asks."""
    path, method = request.url.path, request.method
    if method == "GET" and path == "/collections":
        result: Any = {"collections": []}
    elif method == "GET" and path == "/aliases":
        result = {"aliases": []}
    elif method == "GET" and path.endswith("/exists"):
        result = {"exists": False}
    elif method == "PUT" and (path.endswith("/index") or path.endswith("/points")):
        result = {"operation_id": 1, "status": "completed"}
    else:
        result = True
    return httpx.Response(200, json={"result": result, "status": "ok", "time": 0.0})


@respx.mock(base_url="http://127.0.0.1:6333", assert_all_called=True)
def test_the_create_request_a_cluster_receives_carries_the_shards_and_copies(respx_mock):
    """On the wire (respx for a Qdrant server): the body of PUT /collections/<name>__v1."""
    route = respx_mock.route().mock(side_effect=_server)
    writer = RemoteIndexWriter(
        connect("http://127.0.0.1:6333", None), "huginn_chat", shard_number=6, replication_factor=2
    )
    writer.reset(META)
    creates = [
        c.request
        for c in route.calls
        if c.request.method == "PUT" and c.request.url.path == "/collections/huginn_chat__v1"
    ]
    assert len(creates) == 1
    body = json.loads(creates[0].content)
    assert body["shard_number"] == 6 and body["replication_factor"] == 2
    assert body["vectors"]["dense"]["size"] == META.dim


def test_the_message_vectors_are_created_1_bit_in_ram_with_the_originals_on_disk():
    """As the embedded index lays them out (edge_writer's sealed layout): a server scans 1-bit
    TurboQuant copies and rescores with the float32 originals, so its RAM holds a 32nd of the vectors."""
    client = _Recording(QdrantClient(":memory:"))
    RemoteIndexWriter(client, "quantised_test").reset(META)  # type: ignore[arg-type]
    dense = client.created[-1]["vectors_config"]["dense"]
    assert dense.on_disk is True
    turbo = dense.quantization_config.turbo
    assert turbo.bits == models.TurboQuantBitSize.BITS1 and turbo.always_ram is True


@pytest.mark.filterwarnings("ignore:Local mode performs exact")
def test_the_dense_leg_asks_the_server_to_rescore_four_times_its_depth():
    """The 1-bit scan keeps RESCORE_OVERSAMPLING x the depth for the originals to rank, as the
    Edge reader does (a server's default, 1, ranks too few: bench/quantisation.py)."""
    client = _Recording(QdrantClient(":memory:"))
    writer = RemoteIndexWriter(client, "rescored")  # type: ignore[arg-type]
    writer.reset(META)
    writer.commit()
    asked: list[Any] = []
    inner = client.query_batch_points
    client.query_batch_points = lambda name, requests, **kw: asked.extend(requests) or inner(name, requests, **kw)  # type: ignore[method-assign]
    RemoteIndexReader(client, "rescored").hybrid([1.0] * META.dim, SparseVector((1,), (1.0,)), SearchFilter(), 10)  # type: ignore[arg-type]
    dense, lexical = asked
    assert dense.using == schema.DENSE and lexical.using == schema.SPARSE
    assert dense.params.quantization.rescore is True and dense.params.quantization.oversampling == 4
    assert lexical.params is None
