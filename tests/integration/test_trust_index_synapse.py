"""Never serve less, and removed text leaves every copy, against a real Synapse.

Never serve less than the last good generation: the refresher talks to Synapse through
``devtools.fault_proxy`` (loopback), which answers 502 from the N-th ``/messages`` request on. For
each case (a full rebuild after a chat-version change, on the Edge and on the server adapter; a
room rebuild failing half way) the set of messages the READER can find is the same before and
after the failed run, and the next good run converges.

Redacted and purged text leaves every copy: after a redaction (and after a purge) and one
``huginn-chat refresh`` (the real CLI, the real embedder), no file under the state directory holds
the text: bytes grepped, every file.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from bench.reader_process import run_cli
from chunker.fold import Bounds
from daemon.index.edge_reader import EdgeIndexReader
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import RoomCursor, SearchFilter
from daemon.refresher.matrix import NioMatrixSource
from daemon.refresher.run import Refresher, RefreshOptions
from devtools.fault_proxy import FaultProxy
from scope import Policy
from tests.fakes import FakeEmbedder

pytestmark = pytest.mark.synapse

N_MESSAGES = 45


class _Log:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def bind(self, **kw: Any) -> "_Log":
        return self

    def _add(self, event: str, **kw: Any) -> None:
        self.records.append({"event": event, **kw})

    info = warning = error = _add


class _OtherModel(FakeEmbedder):
    model_id = "fake/other-model"


@pytest.fixture(scope="module")
def rooms(synapse) -> dict[str, Any]:
    alice = synapse.new_actor("alice")
    reader = synapse.new_actor("reader")
    out: dict[str, Any] = {"alice": alice, "reader": reader, "ids": []}
    for name in ("north", "south"):
        room = alice.create_room(name=f"{name} field")
        reader.join(room)
        for i in range(N_MESSAGES):
            alice.send_text(room, f"{name} note {i}: the hedge by the {name} gate needs trimming")
        out["ids"].append(room)
    return out


@pytest.fixture
def proxy(synapse):
    with FaultProxy(synapse.base_url) as p:
        yield p


DEFAULT_BOUNDS = Bounds()


def _refresh(proxy, rooms, index, *, embedder=None, bounds=DEFAULT_BOUNDS):
    log = _Log()

    async def go():
        matrix = NioMatrixSource(proxy.url, rooms["reader"].account.access_token)
        try:
            return await Refresher(
                matrix=matrix,
                index=index,
                embedder=embedder or FakeEmbedder(),
                policy=Policy.build(allowed=tuple(rooms["ids"]), exclude=(), bridge_sender_patterns=()),
                log=log,
                options=RefreshOptions(bounds=bounds, page_size=10),
            ).run()
        finally:
            await matrix.close()

    return asyncio.run(go()), log


def _edge(tmp_path: Path) -> EdgeIndexWriter:
    return EdgeIndexWriter(tmp_path / "index")


def _server(tmp_path: Path):
    from qdrant_client import QdrantClient

    from daemon.index.remote_writer import RemoteIndexWriter

    return RemoteIndexWriter(QdrantClient(":memory:"), "trust_test")


def findable(index, tmp_path: Path) -> set[str]:
    """Every message body the reader can find now."""
    if isinstance(index, EdgeIndexWriter):
        reader = EdgeIndexReader.open_latest(index.root, tmp_path / "reader-private")
        assert reader is not None
        try:
            rows = reader.listing(SearchFilter(), None, 100_000)
        finally:
            reader.close()
    else:
        from daemon.index.remote_reader import RemoteIndexReader

        rows = RemoteIndexReader(index._client, index.alias).listing(SearchFilter(), None, 100_000)
    return {m.body for row in rows for m in row.messages}


def served_meta(index, tmp_path: Path):
    if isinstance(index, EdgeIndexWriter):
        with EdgeIndexReader.open_latest(index.root, tmp_path / "reader-private") as reader:
            return reader.read_meta()
    from daemon.index.remote_reader import RemoteIndexReader

    return RemoteIndexReader(index._client, index.alias).read_meta()


@pytest.mark.parametrize("adapter", ["edge", "server"])
def test_a_full_rebuild_with_502s_serves_the_old_index_then_converges(rooms, proxy, tmp_path, adapter):
    index = _edge(tmp_path) if adapter == "edge" else _server(tmp_path)
    try:
        summary, _ = _refresh(proxy, rooms, index)
        assert summary.exit_code == 0
        before = findable(index, tmp_path)
        assert len(before) == 2 * N_MESSAGES

        proxy.fail_after(4, path_contains="/messages")  # the chat version changes, and Synapse 502s
        summary, log = _refresh(proxy, rooms, index, embedder=_OtherModel(), bounds=Bounds(max_bytes=300))
        proxy.heal()
        assert summary.exit_code == 1 and summary.index_rebuilt and proxy.failed > 0
        assert findable(index, tmp_path) == before
        assert summary.rebuild_pending

        summary, _ = _refresh(proxy, rooms, index, embedder=_OtherModel(), bounds=Bounds(max_bytes=300))
        assert summary.exit_code == 0 and not summary.rebuild_pending
        assert findable(index, tmp_path) == before
        assert index.read_meta().model == _OtherModel.model_id
        assert served_meta(index, tmp_path).model == _OtherModel.model_id  # the reader's view switched
    finally:
        index.close()


def test_a_room_rebuild_failing_half_way_keeps_the_room_then_converges(rooms, proxy, tmp_path):
    with _edge(tmp_path) as index:
        summary, _ = _refresh(proxy, rooms, index)
        assert summary.exit_code == 0
        before = findable(index, tmp_path)
        north = rooms["ids"][0]
        cursor = index.get_cursor(north)
        # A cursor from another chat version: this room alone is rebuilt.
        index.set_cursor(RoomCursor(north, cursor.end_token, cursor.last_event_id, cursor.open_window_id, "older"))
        index.commit()

        proxy.fail_after(2, path_contains="/messages")  # two pages of the rebuild, then 502s
        summary, log = _refresh(proxy, rooms, index)
        proxy.heal()
        assert summary.exit_code == 1
        assert [r for r in log.records if r["event"] == "room_rebuild_failed"][0]["kept_old"] is True
        assert findable(index, tmp_path) == before

        summary, _ = _refresh(proxy, rooms, index)
        assert summary.exit_code == 0
        assert findable(index, tmp_path) == before
        assert index.get_cursor(north).chat_version != "older"


# ------------------------------------------------------------------ item 4: every copy


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


@pytest.mark.parametrize("how", ["redaction", "purge"])
def test_removed_text_leaves_every_file_under_the_state_dir(synapse, tmp_path, how):
    alice = synapse.new_actor("alice")
    reader = synapse.new_actor("reader")
    room = alice.create_room(name="Allotments")
    reader.join(room)
    secret = f"WALRUS-{uuid.uuid4().hex[:8]}"
    for i in range(6):
        alice.send_text(room, f"plot {i} is ready for the beans")
    target = alice.send_text(room, f"{secret} my address is 4 Elm Row")
    for i in range(6):
        alice.send_text(room, f"plot {i + 6} needs water")
    token_file = tmp_path / "token"
    token_file.write_text(reader.account.access_token + "\n")
    token_file.chmod(0o600)
    state = tmp_path / "state"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": synapse.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token_file),
        "HUGINN_CHAT_ROOMS": json.dumps([room]),
        "HUGINN_CHAT_STATE_DIR": str(state),
    }
    for _ in range(2):  # two generations published, as a running deployment has
        assert run_cli(env, "refresh").returncode == 0
        alice.send_text(room, "more beans")
    assert _files_holding(state, secret.encode()), "the text was never stored: the test proves nothing"

    if how == "redaction":
        alice.redact(room, target)
    else:
        path = f"/_matrix/client/v3/rooms/{quote(room, safe='')}/event/{quote(target, safe='')}"
        ts = alice.call("GET", path)["origin_server_ts"]
        assert run_cli(env, "purge", room, "--from", str(ts), "--to", str(ts)).returncode == 0
    proc = run_cli(env, "refresh")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _files_holding(state, secret.encode()) == []
    generations = [p.name for p in (state / "index" / "generations").iterdir() if p.name != "CURRENT"]
    assert len(generations) == 1
