"""The idle check's one homeserver call, over the standard library's HTTP client.

Owns: ``SyncProbe.changes_since`` — one filtered incremental ``/sync`` (``timeout=0``) from a stored
``next_batch`` — and ``SyncProbe.wait_for_changes``, the same ``/sync`` held open by the server
until something arrives or ``wait_s`` passed (the long poll of ``huginn-chat follow``); and the two
things it shares with ``daemon.refresher.matrix``: the filter (``SYNC_FILTER``) and reading an
answer into ``SyncChanges`` (``sync_changes``). A run that finds nothing new makes no other call,
so it need not import matrix-nio and aiohttp (about half of an idle run's CPU time went to
importing them); the full run uses the nio adapter as before.

Must not: make any other call, retry (a failure starts a full run, which retries), follow proxies
from the environment (the unit allows only the homeserver), or put the token anywhere but the
Authorization header (never in a message, a URL or the journal).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import uuid
from typing import Any
from urllib.parse import quote, urlencode, urlparse

from daemon.ports import MatrixError, SyncChanges

# One /sync that returns as little as the server allows: no presence, no account data, no
# ephemeral events, each room's timeline cut to its newest event.
SYNC_FILTER = {
    "room": {
        "timeline": {"limit": 1},
        "state": {"lazy_load_members": True},
        "ephemeral": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
    },
    "presence": {"not_types": ["*"]},
    "account_data": {"not_types": ["*"]},
}


def sync_query(since: str | None, wait_ms: int = 0) -> dict[str, str]:
    """The query of one filtered /sync that answers at once, or (``wait_ms``) once something
    arrives or that many milliseconds passed."""
    # Synapse caches a /sync answer for 2 minutes keyed by the filter text and ``since``, so a
    # second call would still list an invite we have just accepted, or (from a stored ``since``)
    # miss a message sent since the first. A fresh, ignored field (filters allow unknown fields)
    # makes every call a new cache key.
    sync_filter = {**SYNC_FILTER, "org.huginn.request": uuid.uuid4().hex}
    query = {
        "filter": json.dumps(sync_filter, separators=(",", ":")),
        "timeout": str(max(0, int(wait_ms))),
        "set_presence": "offline",
    }
    if since is not None:
        query["since"] = since
    return query


def _has_events(room: Any, section: str) -> bool:
    part = room.get(section) if isinstance(room, dict) else None
    events = part.get("events") if isinstance(part, dict) else None
    return isinstance(events, list) and bool(events)


def sync_changes(body: Any) -> SyncChanges:
    """An incremental /sync answer as ``SyncChanges``. An answer without ``next_batch`` is no
    /sync answer: reading it as "nothing happened" could skip events, so it raises."""
    if not isinstance(body, dict) or not isinstance(body.get("next_batch"), str):
        raise MatrixError("changes_since (no next_batch in answer)", 200)
    rooms = body.get("rooms")
    rooms = rooms if isinstance(rooms, dict) else {}
    joined, invited, left = rooms.get("join"), rooms.get("invite"), rooms.get("leave")
    changed = [
        room_id
        for room_id, room in (joined.items() if isinstance(joined, dict) else ())
        if isinstance(room_id, str) and (_has_events(room, "timeline") or _has_events(room, "state"))
    ]
    return SyncChanges(
        changed_rooms=sorted(changed),
        invited_rooms=sorted(r for r in invited if isinstance(r, str)) if isinstance(invited, dict) else [],
        left_rooms=sorted(r for r in left if isinstance(r, str)) if isinstance(left, dict) else [],
    )


class SyncProbe:
    """``changes_since`` against ``homeserver`` with ``token``; nothing else."""

    def __init__(self, homeserver: str, token: str, *, timeout: float = 30):
        parsed = urlparse(homeserver or "")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("homeserver: expected an http(s) URL such as https://matrix.example.org")
        if not token or not token.strip():
            raise ValueError("token: the service user's access token is empty")
        self._url = parsed
        self._token = token.strip()
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"SyncProbe({self._url.scheme}://{self._url.netloc})"

    async def changes_since(self, since: str) -> SyncChanges:
        if not isinstance(since, str) or not since:
            raise ValueError("since: expected a next_batch token from an earlier /sync")
        status, body = await asyncio.to_thread(self._get, sync_query(since))
        if status != 200:
            errcode = body.get("errcode") if isinstance(body, dict) else None
            raise MatrixError("changes_since", status, errcode if isinstance(errcode, str) else None)
        return sync_changes(body)

    def wait_for_changes(self, since: str, wait_s: float) -> tuple[SyncChanges, str]:
        """The /sync from ``since``, held open by the homeserver until a change the filter lets
        through arrives or ``wait_s`` passed: (what it shows, its ``next_batch``). Blocking, on
        the calling thread (the follow loop has no other work and forks its refresh runs: it
        keeps no thread of its own)."""
        if not isinstance(since, str) or not since:
            raise ValueError("since: expected a next_batch token from an earlier /sync")
        status, body = self._get(sync_query(since, int(wait_s * 1000)), self._timeout + max(0.0, wait_s))
        if status != 200:
            errcode = body.get("errcode") if isinstance(body, dict) else None
            raise MatrixError("changes_since", status, errcode if isinstance(errcode, str) else None)
        return sync_changes(body), body["next_batch"]

    def _get(self, query: dict[str, str], timeout: float | None = None) -> tuple[int, Any]:
        base = self._url.path.rstrip("/")
        path = f"{base}/_matrix/client/v3/sync?{urlencode(query, quote_via=quote)}"
        timeout = self._timeout if timeout is None else timeout
        connection: http.client.HTTPConnection
        if self._url.scheme == "https":
            connection = http.client.HTTPSConnection(self._url.hostname or "", self._url.port, timeout=timeout)
        else:
            connection = http.client.HTTPConnection(self._url.hostname or "", self._url.port, timeout=timeout)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {self._token}"})
            response = connection.getresponse()
            raw = response.read()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            raise MatrixError(f"changes_since ({type(exc).__name__})") from None
        finally:
            connection.close()
        try:
            return status, json.loads(raw)
        except ValueError:
            if 200 <= status < 300:  # a cut or garbled answer is a fault, not "nothing"
                raise MatrixError("changes_since (unreadable body)", status) from None
            return status, None

    async def close(self) -> None:
        return None
