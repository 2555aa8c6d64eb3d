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


def test_reset_builds_beside_and_the_alias_switches_only_on_a_complete_commit(client):
    from daemon.index.port import SearchFilter

    writer = RemoteIndexWriter(client, "test_chat")
    reader = RemoteIndexReader(client, "test_chat")
    writer.reset(META)
    writer.set_cursor(RoomCursor(ROOM_A, "t1", "$1", None, "c1"))
    writer.commit()
    served = writer._collection
    assert {a.alias_name: a.collection_name for a in client.get_aliases().aliases} == {"test_chat": served}

    new_meta = IndexMeta(model="other", dim=8, chat_version="c2")
    writer.reset(new_meta)
    assert writer.rebuilding and writer.read_meta() == new_meta and writer.get_cursor(ROOM_A) is None
    writer.commit(complete=False)
    assert reader.read_meta() == META  # the reader still reads the served collection

    again = RemoteIndexWriter(client, "test_chat")  # the next run resumes the unswitched rebuild
    assert again.read_meta() == new_meta and again.rebuilding
    again.commit(complete=True)
    assert not again.rebuilding and reader.read_meta() == new_meta
    assert reader.listing(SearchFilter(), None, 10) == []
    params = client.get_collection(again._collection).config.params
    assert params.vectors[schema.DENSE].size == 8
    assert params.sparse_vectors[schema.SPARSE].modifier.value == "idf"
    assert not client.collection_exists(served)  # the old collection goes once unaliased


def test_a_legacy_collection_under_the_plain_name_serves_until_the_first_switch(client):
    from qdrant_client import models

    client.create_collection(
        "legacy", vectors_config={schema.DENSE: models.VectorParams(size=4, distance=models.Distance.COSINE)}
    )
    writer = RemoteIndexWriter(client, "legacy")
    assert writer.read_meta() is None and not writer.rebuilding
    writer.reset(META)
    assert writer.rebuilding and client.collection_exists("legacy")
    writer.commit()
    assert {a.alias_name for a in client.get_aliases().aliases} == {"legacy"}
    assert RemoteIndexReader(client, "legacy").read_meta() == META
