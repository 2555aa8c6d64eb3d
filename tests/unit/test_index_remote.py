"""What the remote adapter alone does, against qdrant-client local mode (":memory:"): a missing
collection reads as an empty index, and ``reset`` creates the collection as the model needs it.
The port's contract for every backend is test_index_contract.py; faults on the wire are
test_index_remote_transport.py."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient

from daemon.index import schema
from daemon.index.port import IndexMeta, RoomCursor
from daemon.index.remote_reader import RemoteIndexReader
from daemon.index.remote_writer import RemoteIndexWriter

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect")

META = IndexMeta(model="test-model", dim=4, chat_version="c1")
ROOM_A = "!a:example.org"


@pytest.fixture
def client() -> QdrantClient:
    c = QdrantClient(":memory:")
    yield c
    c.close()


def test_a_missing_collection_reads_as_an_empty_index(client):
    writer, reader = RemoteIndexWriter(client, "absent"), RemoteIndexReader(client, "absent")
    assert writer.read_meta() is None and reader.read_meta() is None
    assert sum(writer.window_counts().values()) == 0 and writer.rooms_with_data() == set()
    assert writer.get_cursor(ROOM_A) is None and writer.get_meta_entry("x") is None
    assert reader.room_aliases() == {} and reader.window_counts() == {} and reader.cursors() == {}
    assert writer.purge_room(ROOM_A) == 0
    assert not reader.newer_available() and reader.current_generation is None


def test_reset_replaces_the_collection_with_the_new_dim_and_idf_sparse_vectors(client):
    writer = RemoteIndexWriter(client, "test_chat")
    writer.reset(META)
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$1", None, "c1"))
    writer.reset(IndexMeta(model="other", dim=8, chat_version="c2"))
    assert writer.get_cursor(ROOM_A) is None
    params = client.get_collection("test_chat").config.params
    assert params.vectors[schema.DENSE].size == 8
    assert params.sparse_vectors[schema.SPARSE].modifier.value == "idf"
