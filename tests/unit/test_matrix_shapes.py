"""NioMatrixSource when a homeserver answers 2xx with a body nio cannot class: a body of the
wrong JSON shape is a ``MatrixError`` naming the call, like every other failure of the adapter.

A stand-in HTTP server on 127.0.0.1 gives the odd answers; the real Synapse runs in
tests/integration/test_matrix_adapter.py.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Awaitable, Callable

import pytest
from aiohttp import web

from daemon.ports import MatrixError
from daemon.refresher.matrix import NioMatrixSource


def answering(body: Any, call: Callable[[NioMatrixSource], Awaitable[Any]], seen: list[Any] | None = None) -> Any:
    """Run ``call`` against a server that answers every request 200 with ``body``; each request's
    path, query and Authorization header are appended to ``seen`` when one is given."""

    async def handler(request: web.Request) -> web.Response:
        if seen is not None:
            seen.append((request.path, dict(request.query), request.headers.get("Authorization")))
        return web.json_response(body)

    async def main() -> Any:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        port = sock.getsockname()[1]
        source = NioMatrixSource(
            f"http://127.0.0.1:{port}", "syt_dGVzdA_NotARealToken_000000", user_id="@reader:hs.test", timeout=5
        )
        try:
            return await call(source)
        finally:
            await source.close()
            await runner.cleanup()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "what, call",
    [
        ("joined_rooms", lambda m: m.joined_rooms()),
        ("resolve_alias", lambda m: m.resolve_alias("#town:hs.test")),
        ("join", lambda m: m.join("!room:hs.test")),
        ("messages", lambda m: m.messages("!room:hs.test", None, 10)),
    ],
)
def test_a_list_where_an_object_belongs_is_a_matrix_error(what, call):
    with pytest.raises(MatrixError, match=what) as raised:
        answering(["not", "an", "object"], call)
    assert raised.value.status == 200


def test_an_object_where_the_state_list_belongs_is_a_matrix_error():
    with pytest.raises(MatrixError, match="room_state") as raised:
        answering({"not": "a list"}, lambda m: m.room_state("!room:hs.test"))
    assert raised.value.status == 200


def test_a_messages_page_is_read_as_sent_without_nio_classing_each_event(monkeypatch):
    """``messages`` reads the page as plain JSON: every event stays the dict the server sent (an
    event nio's schemas would refuse included; chunker.events classes it), ``state`` comes with
    it, and nio's per-event schema checks (the refresher's largest CPU cost beside embedding on
    a backfill) never run. The token travels in the Authorization header, never in the URL."""
    import nio

    classed: list[Any] = []
    real = nio.RoomMessagesResponse.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: Any, *args: Any, **kwargs: Any) -> Any:
        classed.append(args)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(nio.RoomMessagesResponse, "from_dict", classmethod(counting))
    odd = {"type": "m.room.message", "sender": "not a user id", "event_id": "$odd", "content": "not an object"}
    good = {
        "type": "m.room.message",
        "sender": "@alice:hs.test",
        "event_id": "$good",
        "origin_server_ts": 1,
        "content": {"msgtype": "m.text", "body": "hello"},
    }
    member = {"type": "m.room.member", "state_key": "@alice:hs.test", "sender": "@alice:hs.test", "content": {}}
    seen: list[Any] = []
    body = {"chunk": [good, odd, "not an event"], "end": "t2", "state": [member]}
    page = answering(body, lambda source: source.messages("!room:hs.test", "t1", 50), seen)
    assert page.events == [good, odd] and page.end == "t2" and page.state == [member]
    assert classed == []
    [(path, query, auth)] = seen
    assert path == "/_matrix/client/v3/rooms/!room:hs.test/messages"
    assert query["from"] == "t1" and query["dir"] == "f" and query["limit"] == "50"
    assert "lazy_load_members" in query["filter"]
    assert "access_token" not in query and auth == "Bearer syt_dGVzdA_NotARealToken_000000"
