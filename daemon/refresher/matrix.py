"""The Matrix adapter: ``daemon.ports.MatrixSource`` over matrix-nio's ``AsyncClient``.

Owns: every call the refresher makes to the homeserver with the service user's token, and
turning each failure into ``MatrixError(what, status, errcode)``. Events leave this module as
the raw dicts the server sent (``event.source``), never as nio classes, so nothing is lost to a
class that does not model a field and no parse failure can stop a room.

Must not: decide scope (which rooms to read or refuse: that is ``scope/``), log or raise with the
token in any message, or retry (``daemon.refresher.retry`` does, counted and under a deadline; nio's
own retries are off so that no failure is retried twice over).

nio has a call for most of what we need. Where it has none, or its answer would be lossy, this
module speaks HTTP through nio's own session:

- ``direct_rooms``: ``GET /user/{userId}/account_data/m.direct`` (404 -> ``{}``: clients write it,
  Synapse never does, so it is usually absent for a service user).
- ``rooms_overview``: one ``/sync`` whose filter keeps presence and account data empty and each
  timeline to its newest event: ``rooms.invite`` gives each invite's stripped state
  (``invite_state.events``), which is what the homeserver shows of the room before a join
  (``invites`` and ``invited_rooms`` are read from it); ``rooms.join`` gives each joined room's
  newest event id, which lets a run skip ``/messages`` for a room with nothing new; its
  ``next_batch`` is where a later ``changes_since`` starts.
- ``changes_since``: the same filtered ``/sync`` from a stored ``since``: which joined rooms have
  new timeline or state events, which invites arrived, which rooms were left.
- ``room_summary``: ``GET /_matrix/client/v1/room_summary/{id}`` (MSC3266, stable; Synapse 1.163
  serves it with no ``experimental_features``), falling back to the unstable
  ``/_matrix/client/unstable/im.nheko.summary/summary/{id}`` where the stable path is unknown
  (``M_UNRECOGNIZED``). A room the user may not see answers 404: ``None``.
- ``room_aliases``: ``GET /rooms/{id}/aliases`` (the local directory; members or world-readable).
- ``membership``: the service user's own ``m.room.member`` state event (``?format=event``, so a
  kick shows who kicked). A user that left or was kicked still reads the state it left at.
- ``leave``: ``POST /rooms/{id}/leave``.
- ``messages``: ``GET /rooms/{id}/messages?dir=f`` with a ``lazy_load_members`` filter, read as
  plain JSON: the page's events as sent, and its ``state`` (its senders' member events at its
  first event, which gives display names at the time). nio's ``room_messages`` would check every
  event against its JSON schemas and class it (the refresher's largest CPU cost beside embedding)
  and drops ``state``.

nio validates some answers against a JSON schema (e.g. every state event's sender must look
like a user id). When the server answered 2xx but nio refused the shape, we take the body as
the server sent it rather than lose a room to an unusual historical event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlparse

import aiohttp
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    JoinedRoomsResponse,
    JoinResponse,
    Response,
    RoomGetEventResponse,
    RoomGetStateResponse,
    RoomResolveAliasResponse,
    WhoamiResponse,
)

from daemon.config import public_text
from daemon.ports import MatrixError, Page, RoomsOverview, SyncChanges
from daemon.refresher.sync_probe import SYNC_FILTER, sync_changes, sync_query

# /messages caps limit at 1000 server-side; asking for more is a caller bug, not a wish.
MAX_PAGE_LIMIT = 1000

# One /sync that returns invites and as little else as the server allows.
INVITES_SYNC_FILTER = SYNC_FILTER

# /messages sends, with each page, the member state of its senders at the page's first event.
MESSAGES_FILTER = {"lazy_load_members": True}
_MESSAGES_FILTER_JSON = json.dumps(MESSAGES_FILTER, separators=(",", ":"))

_CLIENT_API = "/_matrix/client/v3"
_NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_R = TypeVar("_R", bound=Response)


def quiet_nio_logging() -> None:
    """nio logs whole jsonschema errors at ERROR for every event it cannot class, and every
    403; in the journal that is noise (and may quote event content). Failures reach the caller
    as MatrixError instead."""
    logging.getLogger("nio").setLevel(logging.CRITICAL)


def _segment(value: str) -> str:
    return quote(value, safe="")


class NioMatrixSource:
    """The homeserver as the service user sees it. ``user_id`` saves a whoami round trip when
    the caller already knows it; otherwise it is learned on first need."""

    def __init__(self, homeserver: str, token: str, *, user_id: str | None = None, timeout: float = 30):
        parsed = urlparse(homeserver or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"homeserver: expected an http(s) URL such as https://matrix.example.org, got {public_text(repr(homeserver))}"
            )
        if not token or not token.strip():
            raise ValueError("token: the service user's access token is empty")
        if user_id is not None and not (user_id.startswith("@") and ":" in user_id):
            raise ValueError(f"user_id: expected @localpart:server, got {user_id!r}")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
        quiet_nio_logging()
        config = AsyncClientConfig(
            max_limit_exceeded=0,  # a 429 reaches the caller with its retry_after_ms
            max_timeouts=0,  # so does a reset or timed-out connection
            request_timeout=timeout,
            encryption_enabled=False,  # the reader never decrypts; no olm store
            store_sync_tokens=False,
        )
        self._client = AsyncClient(homeserver.rstrip("/"), user_id or "", config=config)
        self._client.access_token = token.strip()
        self.homeserver = self._client.homeserver

    def __repr__(self) -> str:
        return f"NioMatrixSource({self.homeserver!r}, user_id={self._client.user_id or None!r})"

    async def __aenter__(self) -> "NioMatrixSource":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ----------------------------------------------------------------------------

    async def _nio(self, what: str, call: Any, ok_type: type[_R]) -> _R | ErrorResponse:
        """Await one nio call. Returns the success response, or the ErrorResponse when the
        server said 2xx but nio refused the body (see ``_body_nio_refused``). Raises MatrixError else."""
        try:
            resp = await call
        except _NETWORK_ERRORS as err:
            raise MatrixError(f"{what} ({type(err).__name__})") from None
        if isinstance(resp, ok_type):
            return resp
        status = resp.transport_response.status if resp.transport_response is not None else None
        if status is not None and 200 <= status < 300:
            return resp
        raise MatrixError(what, status, getattr(resp, "status_code", None), getattr(resp, "retry_after_ms", None))

    async def _body_nio_refused(self, what: str, resp: Response, shape: type = dict) -> Any:
        """The JSON body of a 2xx answer nio refused (aiohttp keeps the body it already read).
        ``MatrixError`` unless it is JSON of the expected ``shape`` (an object, or a list)."""
        status = resp.transport_response.status
        try:
            body = await resp.transport_response.json(content_type=None)
        except (ValueError, *_NETWORK_ERRORS):
            raise MatrixError(f"{what} (unreadable body)", status) from None
        if not isinstance(body, shape):
            raise MatrixError(f"{what} (not a JSON {'object' if shape is dict else shape.__name__})", status)
        return body

    async def _raw_get(self, what: str, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
        """GET through nio's session (same timeouts, same connection pool); returns (status, body).
        The token travels only in the Authorization header."""
        if query:
            path = f"{path}?{urlencode(query)}"
        headers = {"Authorization": f"Bearer {self._client.access_token}"}
        try:
            resp = await self._client.send("GET", path, None, headers)
            try:
                status = resp.status
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    if 200 <= status < 300:  # a cut or garbled answer is a fault, not "nothing"
                        raise MatrixError(f"{what} (unreadable body)", status) from None
                    body = None
            finally:
                resp.release()
        except _NETWORK_ERRORS as err:
            raise MatrixError(f"{what} ({type(err).__name__})") from None
        return status, body

    @staticmethod
    def _raise_for(what: str, status: int, body: Any) -> None:
        errcode = body.get("errcode") if isinstance(body, dict) else None
        retry_after = body.get("retry_after_ms") if isinstance(body, dict) else None
        raise MatrixError(what, status, errcode, retry_after if isinstance(retry_after, int) else None)

    async def _user_id(self) -> str:
        return self._client.user_id or await self.whoami()

    # -- MatrixSource ------------------------------------------------------------------------

    async def whoami(self) -> str:
        resp = await self._nio("whoami", self._client.whoami(), WhoamiResponse)
        if not isinstance(resp, WhoamiResponse):
            raise MatrixError("whoami (malformed answer)", resp.transport_response.status)
        # With a bare token nio leaves user_id "" until told; set it for every later call.
        self._client.user_id = resp.user_id
        return resp.user_id

    async def joined_rooms(self) -> list[str]:
        resp = await self._nio("joined_rooms", self._client.joined_rooms(), JoinedRoomsResponse)
        if isinstance(resp, JoinedRoomsResponse):
            return list(resp.rooms)
        rooms = (await self._body_nio_refused("joined_rooms", resp)).get("joined_rooms")
        return [r for r in rooms if isinstance(r, str)] if isinstance(rooms, list) else []

    async def invited_rooms(self) -> list[str]:
        return list(await self.invites())

    async def invites(self) -> dict[str, list[dict[str, Any]]]:
        return (await self.rooms_overview()).invites

    async def _sync(self, what: str, since: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """One filtered /sync that returns at once (``sync_probe.sync_query``): (its body, its ``rooms``)."""
        status, body = await self._raw_get(what, f"{_CLIENT_API}/sync", sync_query(since))
        if status != 200:
            self._raise_for(what, status, body)
        body = body if isinstance(body, dict) else {}
        rooms = body.get("rooms")
        return body, rooms if isinstance(rooms, dict) else {}

    async def changes_since(self, since: str) -> SyncChanges:
        if not isinstance(since, str) or not since:
            raise ValueError("since: expected a next_batch token from an earlier /sync")
        status, body = await self._raw_get("changes_since", f"{_CLIENT_API}/sync", sync_query(since))
        if status != 200:
            self._raise_for("changes_since", status, body)
        return sync_changes(body)

    async def rooms_overview(self) -> RoomsOverview:
        body, rooms = await self._sync("invited_rooms", None)
        invites = rooms.get("invite") or {}
        out: dict[str, list[dict[str, Any]]] = {}
        for room_id, invite in invites.items() if isinstance(invites, dict) else ():
            if not isinstance(room_id, str):
                continue
            events = ((invite or {}).get("invite_state") or {}).get("events") if isinstance(invite, dict) else None
            out[room_id] = [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
        # The filter's timeline limit of 1: each joined room's newest event, in stream order.
        latest: dict[str, str] = {}
        joined = rooms.get("join") or {}
        for room_id, room in joined.items() if isinstance(joined, dict) else ():
            timeline = room.get("timeline") if isinstance(room, dict) else None
            events = timeline.get("events") if isinstance(timeline, dict) else None
            last = events[-1] if isinstance(events, list) and events else None
            if isinstance(room_id, str) and isinstance(last, dict) and isinstance(last.get("event_id"), str):
                latest[room_id] = last["event_id"]
        next_batch = body.get("next_batch")
        return RoomsOverview(
            invites=out,
            latest_event=latest,
            next_batch=next_batch if isinstance(next_batch, str) and next_batch else None,
        )

    async def room_summary(self, room_id_or_alias: str) -> dict[str, Any] | None:
        what = f"room_summary {room_id_or_alias}"
        for path in (
            f"/_matrix/client/v1/room_summary/{_segment(room_id_or_alias)}",
            f"/_matrix/client/unstable/im.nheko.summary/summary/{_segment(room_id_or_alias)}",
        ):
            status, body = await self._raw_get(what, path)
            errcode = body.get("errcode") if isinstance(body, dict) else None
            if status == 200 and isinstance(body, dict):
                return body
            if errcode == "M_UNRECOGNIZED" or (status in (404, 405) and errcode is None):
                continue  # this server does not serve this path: try the next one
            if status in (403, 404):
                return None  # not visible to us before a join
            self._raise_for(what, status, body)
        return None

    async def room_aliases(self, room_id: str) -> list[str]:
        what = f"room_aliases {room_id}"
        status, body = await self._raw_get(what, f"{_CLIENT_API}/rooms/{_segment(room_id)}/aliases")
        if status in (403, 404):
            return []
        if status != 200:
            self._raise_for(what, status, body)
        aliases = body.get("aliases") if isinstance(body, dict) else None
        return [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []

    async def membership(self, room_id: str) -> dict[str, Any] | None:
        what = f"membership {room_id}"
        user_id = await self._user_id()
        path = f"{_CLIENT_API}/rooms/{_segment(room_id)}/state/m.room.member/{_segment(user_id)}"
        status, body = await self._raw_get(what, path, {"format": "event"})
        if status in (403, 404):
            return None  # never a member (or the room is unknown here)
        if status != 200 or not isinstance(body, dict):
            self._raise_for(what, status, body)
        # ``format=event`` gives the whole event; an older server may give the content only.
        content = body.get("content") if isinstance(body.get("content"), dict) else body
        membership = content.get("membership")
        sender = body.get("sender")
        return {
            "membership": membership if isinstance(membership, str) else "unknown",
            "sender": sender if isinstance(sender, str) else None,
        }

    async def leave(self, room_id: str) -> None:
        what = f"leave {room_id}"
        path = f"{_CLIENT_API}/rooms/{_segment(room_id)}/leave"
        headers = {"Authorization": f"Bearer {self._client.access_token}", "Content-Type": "application/json"}
        try:
            resp = await self._client.send("POST", path, "{}", headers)
            try:
                status = resp.status
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    body = None
            finally:
                resp.release()
        except _NETWORK_ERRORS as err:
            raise MatrixError(f"{what} ({type(err).__name__})") from None
        if status != 200:
            self._raise_for(what, status, body)

    async def resolve_alias(self, alias: str) -> str | None:
        if not isinstance(alias, str) or not alias.startswith("#") or ":" not in alias:
            raise ValueError(f"alias: expected #name:server, got {alias!r}")
        try:
            resp = await self._nio(
                f"resolve_alias {alias}", self._client.room_resolve_alias(alias), RoomResolveAliasResponse
            )
        except MatrixError as err:
            if err.status == 404:
                return None
            raise
        if isinstance(resp, RoomResolveAliasResponse):
            return resp.room_id
        room_id = (await self._body_nio_refused(f"resolve_alias {alias}", resp)).get("room_id")
        return room_id if isinstance(room_id, str) else None

    async def join(self, room_id_or_alias: str) -> str:
        if not isinstance(room_id_or_alias, str) or room_id_or_alias[:1] not in ("!", "#"):
            raise ValueError(f"room_id_or_alias: expected !room id or #alias:server, got {room_id_or_alias!r}")
        what = f"join {room_id_or_alias}"
        resp = await self._nio(what, self._client.join(room_id_or_alias), JoinResponse)
        if isinstance(resp, JoinResponse):
            return resp.room_id
        room_id = (await self._body_nio_refused(what, resp)).get("room_id")
        if not isinstance(room_id, str):
            raise MatrixError(f"{what} (no room_id in answer)", resp.transport_response.status)
        return room_id

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        what = f"room_state {room_id}"
        resp = await self._nio(what, self._client.room_get_state(room_id), RoomGetStateResponse)
        events = (
            resp.events if isinstance(resp, RoomGetStateResponse) else await self._body_nio_refused(what, resp, list)
        )
        return [e for e in events if isinstance(e, dict)]

    async def direct_rooms(self) -> dict[str, list[str]]:
        user_id = await self._user_id()
        path = f"{_CLIENT_API}/user/{_segment(user_id)}/account_data/m.direct"
        status, body = await self._raw_get("direct_rooms", path)
        if status == 404:
            return {}
        if status != 200:
            self._raise_for("direct_rooms", status, body)
        if not isinstance(body, dict):
            return {}
        # Clients write m.direct; keep only well-formed entries rather than trust them.
        return {
            user: [r for r in rooms if isinstance(r, str)]
            for user, rooms in body.items()
            if isinstance(user, str) and isinstance(rooms, list)
        }

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_LIMIT:
            raise ValueError(f"limit: expected 1..{MAX_PAGE_LIMIT}, got {limit!r}")
        what = f"messages {room_id}"
        # Plain HTTP, not nio's ``room_messages``: nio checks every event of a page against its
        # JSON schemas and builds a class per event, only for us to take ``event.source`` back
        # (and ``state``, which its class drops, from a second parse of the body). That was the
        # refresher's largest CPU cost beside embedding (~30% of its event loop on a backfill),
        # taken from the embedder on a small machine. Events stay the raw dicts the server sent;
        # chunker.events classes each one and counts a malformed one, as it did.
        query = {"dir": "f", "limit": str(limit), "filter": _MESSAGES_FILTER_JSON}
        if start:
            query["from"] = start
        status, body = await self._raw_get(what, f"{_CLIENT_API}/rooms/{_segment(room_id)}/messages", query)
        if status != 200:
            self._raise_for(what, status, body)
        if not isinstance(body, dict):
            raise MatrixError(f"{what} (not a JSON object)", status)
        chunk = body.get("chunk")
        events = [e for e in chunk if isinstance(e, dict)] if isinstance(chunk, list) else []
        end = body.get("end")
        state = body.get("state")
        state = [e for e in state if isinstance(e, dict)] if isinstance(state, list) else []
        # After the last page the server answers an empty chunk; only then is end None.
        return Page(events=events, end=end if events and isinstance(end, str) else None, state=state)

    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        what = f"event {room_id} {event_id}"
        try:
            resp = await self._nio(what, self._client.room_get_event(room_id, event_id), RoomGetEventResponse)
        except MatrixError as err:
            if err.status == 404:
                return None
            raise
        if isinstance(resp, RoomGetEventResponse):
            return resp.event.source
        return await self._body_nio_refused(what, resp)

    async def close(self) -> None:
        await self._client.close()
