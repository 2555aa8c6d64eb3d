"""Citations people can follow: permalinks, names, and Markdown lines safe to paste.

Owns: ``permalink`` (a ``matrix.to`` link to one event, percent-encoded, with its ``via``
servers), ``cite`` (a reply's hits, or a window, given each room's name and each message's
``display_name`` and ``permalink`` from the room directory entries), and the Markdown citation
line of ``huginn-chat search|window --format md`` (``markdown_citation``, ``escape_markdown``).

Must not: import anything outside the standard library and ``daemon.index.port`` (the stdlib-only
CLI client imports it), do I/O, or let a message or a name carry Markdown into a citation: a body
or a display name is text someone else wrote, and a pasted citation must neither grow a link the
message did not show as text, nor end the quote it sits in.

Permalinks follow the spec's ``matrix.to`` form: ``https://matrix.to/#/<room id>/<event id>?via=<server>``,
each identifier percent-encoded (``:``, ``$``, ``/``, ``+`` and the rest; the leading ``!`` of a
room id is kept, as the spec's examples keep it), one ``via`` per routing server (up to three, as
``chunker.members.via_servers`` chose them when the refresher last read the room). Without a
directory entry the servers of the message's sender and of the room id (rooms before version 12
carry one) stand in, so a link never goes without a ``via`` while any server is known.

Markdown. One citation is one line::

    > **Alice** (2026-11-30 14:02 UTC, Hackspace lobby): the kettle is broken — [link](https://matrix.to/#/...)

Inside it every character CommonMark could read as syntax is backslash-escaped (an escaped ASCII
punctuation character renders as itself), ``:`` included so that no bare ``https://`` or
``www.`` in a body turns into an autolink, and every line break, control or bidi character becomes
a space or ``⏎``, so nothing ends the quote line.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping
from urllib.parse import quote

from daemon.index.port import RoomEntry

MATRIX_TO = "https://matrix.to/#/"
MAX_VIA = 3

# Every ASCII punctuation character CommonMark (and GFM's autolinks, tables, strikethrough) could
# read as syntax in the middle of a line, and "." so no bare domain (0.al, www.x.org) is linkified
# by a fuzzy autolinker. Left alone: , ' " ; ? / % $ = ^ - + which start nothing there (a list
# marker or heading needs the start of a line, and a citation line starts with "> **").
_MD_SPECIAL = frozenset("\\`*_{}[]()<>#!|~&:@.")
_WWW = re.compile(r"(www)\.", re.IGNORECASE)
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _server(identifier: Any) -> str | None:
    if isinstance(identifier, str) and ":" in identifier and identifier[:1] in "@!#":
        return identifier.split(":", 1)[1] or None
    return None


def permalink(room_id: str, event_id: str | None = None, via: Iterable[str] = ()) -> str:
    """The ``matrix.to`` link to ``event_id`` in ``room_id`` (to the room when no event)."""
    link = _room_link(room_id)
    if event_id:
        link += "/" + _quoted_event_id(event_id)
    return link + _via_query(tuple(via))


def _quoted_event_id(event_id: str) -> str:
    """``quote(event_id, safe="")``, without its per-character work for the usual id: "$" then
    URL-safe base64, which only the "$" changes in."""
    if event_id[:1] == "$" and _URL_SAFE.fullmatch(event_id, 1):
        return "%24" + event_id[1:]
    return quote(event_id, safe="")


_URL_SAFE = re.compile(r"[A-Za-z0-9_.~-]*")  # what quote() never encodes


# A reply cites every message of every hit, and a page's messages share a few rooms and servers:
# their encoded forms are kept rather than percent-encoded again for each message (the reader's
# share of a search, bench: reader_vs_raw_ratio).
@functools.lru_cache(maxsize=4096)
def _room_link(room_id: str) -> str:
    return MATRIX_TO + quote(room_id, safe="!")


@functools.lru_cache(maxsize=4096)
def _via_query(via: tuple[Any, ...]) -> str:
    """``?via=...`` for the first ``MAX_VIA`` distinct non-empty server names of ``via``."""
    servers = tuple(s for s in dict.fromkeys(via) if isinstance(s, str) and s)[:MAX_VIA]
    return "?" + "&".join("via=" + quote(server, safe=":") for server in servers) if servers else ""


def localpart(user_id: Any) -> str:
    text = str(user_id or "")
    if text.startswith("@") and ":" in text:
        return text[1 : text.index(":")]
    return text


def room_label(entry: RoomEntry | None, room_id: str, alias: str | None = None) -> str:
    """What a person calls the room: its name, else its canonical alias, else the id."""
    if entry is not None and (entry.name or entry.canonical_alias):
        return str(entry.name or entry.canonical_alias)
    return alias or room_id


def _cite_messages(messages: Iterable[dict[str, Any]], room_id: str, via: tuple[str, ...]) -> None:
    for message in messages:
        if not message.get("display_name"):
            message["display_name"] = localpart(message.get("sender"))
        servers = via or tuple(s for s in (_server(message.get("sender")), _server(room_id)) if s)
        message["permalink"] = permalink(room_id, str(message.get("event_id") or ""), servers)


def _cite_one(holder: dict[str, Any], directory: Mapping[str, RoomEntry]) -> None:
    room_id = str(holder.get("room_id") or "")
    entry = directory.get(room_id)
    if entry is not None and entry.canonical_alias:
        holder["room_alias"] = entry.canonical_alias  # the room's alias now, not when the window was cut
    # What people call the room: its m.room.name, else its canonical alias (null with neither).
    holder["room_name"] = (entry.name if entry is not None else None) or holder.get("room_alias") or None
    messages = list(holder.get("messages") or ())
    if isinstance(holder.get("root"), dict):  # a thread reply: its root is cited like its messages
        messages.append(holder["root"])
    _cite_messages(messages, room_id, entry.via if entry is not None else ())


def rooms_of(result: dict[str, Any]) -> list[str]:
    """The room ids a search/listing reply (``hits``) or a window reply names."""
    holders = result.get("hits") if "hits" in result else [result]
    return sorted({str(h.get("room_id")) for h in holders or () if h.get("room_id")})


def cite(result: dict[str, Any], directory: Mapping[str, RoomEntry]) -> dict[str, Any]:
    """``result`` (a search/listing reply with ``hits``, or a window or thread reply) with ``room_name`` on
    each hit (the window) and ``display_name`` and ``permalink`` on each message. In place."""
    holders = result.get("hits") if "hits" in result else [result]
    for holder in holders or ():
        _cite_one(holder, directory)
    return result


# ---------------------------------------------------------------------------------------------
# Markdown


def escape_markdown(text: Any) -> str:
    """``text`` as inert Markdown on one line: syntax characters backslash-escaped, line breaks as
    `` ⏎ ``, control and bidi characters as spaces, ``www.`` broken so it cannot autolink."""
    out: list[str] = []
    for ch in str(text or "").replace("\r\n", "\n"):
        if ch in _LINE_BREAKS:
            out.append(" ⏎ ")
        elif ch in _BIDI or (ord(ch) < 32 or ord(ch) == 127):
            out.append(" ")
        elif ch in _MD_SPECIAL:
            out.append("\\" + ch)
        else:
            out.append(ch)
    # GFM autolinks "www." without a scheme: escaping its dot keeps it text.
    return _WWW.sub(lambda m: m.group(1) + "\\.", "".join(out))


def _short_time(ts: Any) -> str:
    if isinstance(ts, bool) or not isinstance(ts, int):
        return "unknown time"
    return datetime.fromtimestamp(ts / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def safe_link(link: Any) -> str | None:
    """``link`` when it is a ``matrix.to`` link that cannot end a Markdown link target early."""
    if not isinstance(link, str) or not link.startswith(MATRIX_TO):
        return None
    if any(ch.isspace() or ch in "()<>[]\\`\"'" or ord(ch) < 32 for ch in link):
        return None
    return link


def markdown_citation(message: dict[str, Any], room: str) -> str:
    """One message as a quote line ready to paste (see the module docstring)."""
    name = escape_markdown(message.get("display_name") or localpart(message.get("sender")) or "someone")
    # The user id beside the name: two people may share a display name, and the quote must say which.
    sender = message.get("sender")
    who = f"{escape_markdown(sender)}, " if isinstance(sender, str) and sender else ""
    when = _short_time(message.get("ts"))
    line = f"> **{name}** ({who}{when}, {escape_markdown(room)}): {escape_markdown(message.get('body'))}"
    link = safe_link(message.get("permalink"))
    return line + (f" — [link]({link})" if link else "")
