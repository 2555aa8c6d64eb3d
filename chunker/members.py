"""Who spoke, by the name people saw, and where a link to the room routes: the pure half of citations.

Owns: ``clean_name`` (a display name or room name as the index may keep it: scrubbed like a body,
one line, no control or bidi characters, bounded), ``DisplayNames`` (each sender's display name at
the time of each message, from ``m.room.member`` state and member events in stream order) and
``via_servers`` (the servers a ``matrix.to`` link should route through, as the Matrix spec
recommends, from a room's state).

Must not: do I/O, import anything from ``daemon``, or keep any member text but a cleaned display
name (display names are user-controlled text: a credential pasted into one must not reach the
index any more than one pasted into a body).

Display names at the time. The refresher reads a room forwards. Before the first page of a run it
hands ``learn`` the room's state it read at the start; each ``/messages`` page may carry the member
state of its senders at the page's first event (``lazy_load_members``), which ``learn`` applies
next; then ``annotate`` walks the page in order, applying each member event before the messages
after it. A rename mid-history therefore shows the old name on earlier messages and the new one on
later messages. A member event without a usable ``displayname`` (none set, redacted, not a
string) means no display name: readers fall back to the localpart.

Routing (spec, "Appendices: Routing"): up to three servers — first the server of the joined user
with the highest power level if it is at least 50, then the servers with the most joined members;
never an IP literal, never a server the room's ``m.room.server_acl`` denies. In room versions
where the creators hold unlimited power (12 and later) they count as the highest. With no joined
member to go by, the caller's fallback (the homeserver's own name) is used.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import unicodedata
from typing import Any, Iterable, Sequence

from chunker.events import Message
from chunker.scrub import scrub

MAX_NAME_CHARS = 80
MAX_VIA = 3
MEMBER = "m.room.member"
# Room versions in which creators are ordinary power-level users; later ones give them unlimited power.
_CLASSIC_VERSIONS = frozenset({str(v) for v in range(1, 12)})
# Characters that would let a name break a line or reorder what is around it when printed.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def clean_name(value: Any, limit: int = MAX_NAME_CHARS) -> str | None:
    """``value`` as the index may keep a name: scrubbed (before it is cut, so a cut cannot hide
    a secret's shape), control, separator and bidi characters turned into spaces, whitespace
    collapsed, at most ``limit`` characters (an ellipsis marks a cut). None for no usable name."""
    if not isinstance(value, str):
        return None
    text = scrub(value)
    text = "".join(" " if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") else ch for ch in text)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or None


def _member_name(event: Any) -> tuple[str, str | None] | None:
    """(user id, cleaned display name) of a member event, or None when ``event`` is not one."""
    if not isinstance(event, dict) or event.get("type") != MEMBER:
        return None
    user = event.get("state_key")
    if not isinstance(user, str) or not user:
        return None
    content = event.get("content")
    return user, clean_name(content.get("displayname")) if isinstance(content, dict) else None


class DisplayNames:
    """Each sender's display name as the room's history reaches it (see the module docstring)."""

    def __init__(self) -> None:
        self._names: dict[str, str | None] = {}

    def learn(self, state_events: Iterable[Any]) -> None:
        """Apply member state (the room's state, or a page's ``state``); other events are ignored."""
        for event in state_events or ():
            found = _member_name(event)
            if found is not None:
                self._names[found[0]] = found[1]

    def name_of(self, user_id: str) -> str | None:
        return self._names.get(user_id)

    def annotate(self, raw_events: Sequence[Any], events: Sequence[Any]) -> list[Any]:
        """``events`` (``parse_event`` of each of ``raw_events``, same order) with every
        ``Message`` given its sender's display name at that point of the stream."""
        out: list[Any] = []
        for raw, event in zip(raw_events, events, strict=True):
            found = _member_name(raw)
            if found is not None:
                self._names[found[0]] = found[1]
            if isinstance(event, Message):
                event = dataclasses.replace(event, display_name=self._names.get(event.sender))
            out.append(event)
        return out


# ---------------------------------------------------------------------------------------------
# Routing servers


def server_of(user_id: str) -> str | None:
    """``@alice:example.org:8448`` -> ``example.org:8448``; None when it is not a user id."""
    if not isinstance(user_id, str) or not user_id.startswith("@") or ":" not in user_id:
        return None
    return user_id.split(":", 1)[1] or None


def _host(server: str) -> str:
    if server.startswith("["):
        return server[: server.find("]") + 1] if "]" in server else server
    return server.rsplit(":", 1)[0] if server.count(":") == 1 else server


def is_ip_literal(server: str) -> bool:
    host = _host(server)
    if host.startswith("[") and host.endswith("]"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.I | re.S)


def _acl_allows(acl: dict[str, Any] | None, server: str) -> bool:
    """The spec's server ACL check (the port is ignored; globs ``*`` and ``?``)."""
    if acl is None:
        return True
    host = _host(server)
    if acl.get("allow_ip_literals", True) is False and is_ip_literal(server):
        return False
    deny = [p for p in acl.get("deny") or () if isinstance(p, str)] if isinstance(acl.get("deny"), list) else []
    if any(_glob(p).fullmatch(host) for p in deny):
        return False
    allow = [p for p in acl.get("allow") or () if isinstance(p, str)] if isinstance(acl.get("allow"), list) else []
    return any(_glob(p).fullmatch(host) for p in allow)


def via_servers(state_events: Iterable[Any], fallback: str | None = None, limit: int = MAX_VIA) -> list[str]:
    """The routing servers of a room's permalinks, from its current state (see the module
    docstring). Malformed entries are skipped."""
    joined: dict[str, int] = {}
    joined_users: list[str] = []
    levels: dict[str, float] = {}
    acl: dict[str, Any] | None = None
    creators: list[str] = []
    classic = True
    for event in state_events or ():
        if not isinstance(event, dict) or not isinstance(event.get("state_key"), str):
            continue
        raw_content = event.get("content")
        content: dict[str, Any] = raw_content if isinstance(raw_content, dict) else {}
        kind, key = event.get("type"), event["state_key"]
        if kind == MEMBER and content.get("membership") == "join":
            server = server_of(key)
            if server:
                joined[server] = joined.get(server, 0) + 1
                joined_users.append(key)
        elif kind == "m.room.power_levels" and key == "" and isinstance(content.get("users"), dict):
            levels = {
                u: float(v)
                for u, v in content["users"].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
        elif kind == "m.room.server_acl" and key == "":
            acl = content
        elif kind == "m.room.create" and key == "":
            classic = str(content.get("room_version", "1")) in _CLASSIC_VERSIONS
            extra = content.get("additional_creators")
            creators = [event.get("sender")] + (list(extra) if isinstance(extra, list) else [])
    if not classic:
        levels.update({c: float("inf") for c in creators if isinstance(c, str)})

    def usable(server: str | None) -> bool:
        return bool(server) and not is_ip_literal(server) and _acl_allows(acl, server)  # type: ignore[arg-type]

    chosen: list[str] = []
    ranked = sorted((u for u in joined_users if levels.get(u, 0) >= 50), key=lambda u: (-levels[u], u))
    top = next((server_of(u) for u in ranked if usable(server_of(u))), None)
    if top:
        chosen.append(top)
    for server in sorted(joined, key=lambda s: (-joined[s], s)):
        if len(chosen) >= limit:
            break
        if server not in chosen and usable(server):
            chosen.append(server)
    if not chosen and fallback and usable(fallback):
        chosen.append(fallback)
    return chosen[:limit]
