"""NioMatrixSource against a real Synapse: what the refresher will actually be handed.

Each test registers its own users (unique localparts) on the shared session server, acts with
the harness's ``Actor`` and reads with the adapter as a service user would.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from daemon.ports import MatrixError, Page
from daemon.refresher.matrix import NioMatrixSource
from devtools.synapse import Actor, SynapseServer

pytestmark = pytest.mark.synapse

T = TypeVar("T")


def read(synapse: SynapseServer, reader: Actor, work: Callable[[NioMatrixSource], Awaitable[T]]) -> T:
    """Run ``work`` with a fresh adapter holding the reader's token, and close it after."""

    async def main() -> T:
        async with NioMatrixSource(synapse.base_url, reader.account.access_token) as source:
            return await work(source)

    return asyncio.run(main())


async def read_all(
    source: NioMatrixSource, room_id: str, start: str | None, limit: int
) -> tuple[list[dict[str, Any]], str | None, int]:
    """Page forwards until the empty page; returns (events, last non-None end, pages read)."""
    events: list[dict[str, Any]] = []
    cursor, pages = start, 0
    while True:
        page = await source.messages(room_id, cursor, limit)
        pages += 1
        if page.end is None:
            assert page.events == []
            return events, cursor, pages
        events.extend(page.events)
        cursor = page.end


def test_whoami_names_the_token_owner_and_repr_hides_the_token(synapse: SynapseServer) -> None:
    reader = synapse.new_actor("reader")

    async def work(source: NioMatrixSource) -> tuple[str, str]:
        return await source.whoami(), repr(source)

    user_id, shown = read(synapse, reader, work)
    assert user_id == reader.user_id
    assert reader.account.access_token not in shown


def test_joined_and_invited_rooms_follow_membership(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    joined = alice.create_room(name="joined")
    reader.join(joined)
    pending = alice.create_room(name="pending", preset="private_chat", invite=[reader.user_id])
    alice.create_room(name="elsewhere")

    async def work(source: NioMatrixSource) -> tuple[list[str], list[str], str, list[str], list[str]]:
        before = await source.joined_rooms(), await source.invited_rooms()
        accepted = await source.join(pending)
        return *before, accepted, await source.joined_rooms(), await source.invited_rooms()

    joined_before, invited_before, accepted, joined_after, invited_after = read(synapse, reader, work)
    assert joined_before == [joined]
    assert invited_before == [pending]
    assert accepted == pending
    assert sorted(joined_after) == sorted([joined, pending])
    assert invited_after == []


def test_alias_resolves_and_joins_and_unknown_alias_is_none(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    localpart = f"general_{alice.user_id[7:17]}"
    room = alice.create_room(name="General", alias_localpart=localpart)
    alias = f"#{localpart}:{synapse.server_name}"

    async def work(source: NioMatrixSource) -> tuple[str | None, str | None, str, list[str]]:
        return (
            await source.resolve_alias(alias),
            await source.resolve_alias(f"#nobody-made-this:{synapse.server_name}"),
            await source.join(alias),
            await source.joined_rooms(),
        )

    resolved, unknown, joined, joined_rooms = read(synapse, reader, work)
    assert resolved == room
    assert unknown is None
    assert joined == room
    assert joined_rooms == [room]


def test_room_state_is_the_raw_state_list(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    room = alice.create_room(name="Bridged")
    alice.send_state(room, "m.bridge", "discord://guild/1", {"protocol": {"id": "discord"}})
    reader.join(room)

    state = read(synapse, reader, lambda source: source.room_state(room))
    by_type = {(e["type"], e["state_key"]): e for e in state}
    assert by_type[("m.room.create", "")]["sender"] == alice.user_id
    assert by_type[("m.room.name", "")]["content"] == {"name": "Bridged"}
    assert by_type[("m.bridge", "discord://guild/1")]["content"] == {"protocol": {"id": "discord"}}
    assert by_type[("m.room.member", reader.user_id)]["content"]["membership"] == "join"


def test_direct_rooms_empty_until_the_account_data_exists(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    dm = alice.create_room(preset="trusted_private_chat", is_direct=True, invite=[reader.user_id])

    before = read(synapse, reader, lambda source: source.direct_rooms())
    reader.set_account_data("m.direct", {alice.user_id: [dm], "@broken:x": "not-a-list"})
    after = read(synapse, reader, lambda source: source.direct_rooms())

    assert before == {}
    assert after == {alice.user_id: [dm]}


def test_messages_page_forward_from_the_start_then_resume_from_the_saved_end(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    room = alice.create_room(name="History")
    first_batch = alice.send_many(room, [f"message {i}" for i in range(25)])
    reader.join(room)

    async def first_read(source: NioMatrixSource) -> tuple[list[dict[str, Any]], str | None, int]:
        return await read_all(source, room, None, 10)

    events, cursor, pages = read(synapse, reader, first_read)
    assert events[0]["type"] == "m.room.create"
    messages = [e for e in events if e["type"] == "m.room.message"]
    assert [e["event_id"] for e in messages] == first_batch
    assert [e["content"]["body"] for e in messages][:2] == ["message 0", "message 1"]
    assert pages == -(-len(events) // 10) + 1  # full pages, then the one empty page
    assert cursor is not None

    second_batch = alice.send_many(room, ["later 1", "later 2", "later 3"])

    async def resumed(source: NioMatrixSource) -> tuple[Page, Page]:
        page = await source.messages(room, cursor, 100)
        return page, await source.messages(room, page.end, 100)

    page, after = read(synapse, reader, resumed)
    assert [e["event_id"] for e in page.events] == second_batch
    assert page.end is not None
    assert after == Page(events=[], end=None)


def test_redaction_arrives_later_and_the_redacted_message_reads_empty(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    room = alice.create_room(name="Regret")
    kept = alice.send_text(room, "this stays")
    regretted = alice.send_text(room, "my password is hunter2")
    reader.join(room)
    _, cursor, _ = read(synapse, reader, lambda source: read_all(source, room, None, 100))

    redaction_id = alice.redact(room, regretted)

    async def reread(source: NioMatrixSource) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        newer, _, _ = await read_all(source, room, cursor, 100)
        everything, _, _ = await read_all(source, room, None, 100)
        return newer, everything

    newer, everything = read(synapse, reader, reread)
    assert [(e["event_id"], e["type"]) for e in newer] == [(redaction_id, "m.room.redaction")]
    assert newer[0]["content"]["redacts"] == regretted  # room v12: inside content
    by_id = {e["event_id"]: e for e in everything}
    assert by_id[regretted]["content"] == {}
    assert by_id[regretted]["unsigned"]["redacted_because"]["event_id"] == redaction_id
    assert by_id[kept]["content"]["body"] == "this stays"


def test_event_returns_the_raw_event_or_none_when_unknown(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    room = alice.create_room(name="Lookup")
    sent = alice.send_text(room, "find me")
    reader.join(room)

    async def work(source: NioMatrixSource) -> tuple[Any, Any]:
        return await source.event(room, sent), await source.event(room, "$doesnotexist")

    found, missing = read(synapse, reader, work)
    assert found["event_id"] == sent
    assert found["content"]["body"] == "find me"
    assert missing is None


def test_reading_a_room_not_joined_raises_403_without_the_token(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    room = alice.create_room(name="Private", preset="private_chat")

    async def work(source: NioMatrixSource) -> None:
        await source.messages(room, None, 10)

    with pytest.raises(MatrixError) as caught:
        read(synapse, reader, work)
    assert caught.value.status == 403
    assert caught.value.errcode == "M_FORBIDDEN"
    assert reader.account.access_token not in str(caught.value)
    assert room in str(caught.value)


def test_puppets_media_reactions_and_encrypted_events_come_through_raw(synapse: SynapseServer) -> None:
    alice, reader = synapse.new_actor("alice"), synapse.new_actor("reader")
    puppet = synapse.actor(synapse.puppet(f"_discord_{alice.user_id[7:17]}"))
    room = alice.create_room(name="Bridged", encrypted=True)
    puppet.join(room)
    from_discord = puppet.send_text(room, "hello from discord")
    image = alice.send_image(room)
    reaction = alice.send_reaction(room, from_discord, "👍")
    encrypted = alice.send_encrypted(room)
    reader.join(room)

    events, _, _ = read(synapse, reader, lambda source: read_all(source, room, None, 100))
    by_id = {e["event_id"]: e for e in events}
    assert by_id[from_discord]["sender"] == puppet.user_id
    assert puppet.user_id.startswith("@_discord_")
    assert by_id[from_discord]["content"]["body"] == "hello from discord"
    assert by_id[image]["content"]["msgtype"] == "m.image"
    assert by_id[image]["content"]["url"].startswith("mxc://")
    assert by_id[reaction]["content"]["m.relates_to"]["key"] == "👍"
    assert by_id[encrypted]["type"] == "m.room.encrypted"
    assert by_id[encrypted]["content"]["algorithm"] == "m.megolm.v1.aes-sha2"
    assert "ciphertext" in by_id[encrypted]["content"]


def test_unreachable_homeserver_is_a_matrix_error(synapse: SynapseServer) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main() -> None:
        async with NioMatrixSource(f"http://127.0.0.1:{port}", "syt_secret_token", timeout=2) as source:
            await source.joined_rooms()

    with pytest.raises(MatrixError) as caught:
        asyncio.run(main())
    assert caught.value.status is None
    assert "syt_secret_token" not in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"homeserver": "matrix.example.org", "token": "t"}, "homeserver"),
        ({"homeserver": "https://matrix.example.org", "token": " "}, "token"),
        ({"homeserver": "https://matrix.example.org", "token": "t", "user_id": "bob"}, "user_id"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        NioMatrixSource(**kwargs)
