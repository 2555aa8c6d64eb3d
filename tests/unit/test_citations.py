"""Citations: matrix.to permalinks, the room-name resolver, and Markdown lines safe to paste.

The Markdown properties are checked against a real CommonMark parser with GFM-style autolinks
(markdown-it-py with linkify): whatever a body, a display name or a room name holds, a citation is
one quote line holding one paragraph whose only link is the permalink, and it renders the text it
was given.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from hypothesis import given, settings, strategies as st
from markdown_it import MarkdownIt

from daemon.index.port import RoomEntry
from daemon.reader.citations import (
    MATRIX_TO,
    _quoted_event_id,
    cite,
    escape_markdown,
    markdown_citation,
    permalink,
    rooms_of,
    safe_link,
)
from daemon.reader.rooms import resolve_rooms

ROOM_V12 = "!lHWJZzOwVjX2hRaCpmPL3hFs"
ROOM_OLD = "!abc:example.org"

# ---------------------------------------------------------------------------------------------
# Permalinks


def test_permalink_percent_encodes_ids_and_lists_each_via_server() -> None:
    assert (
        permalink(ROOM_OLD, "$Ev/+x=:y", ["example.org", "other.net:8448"])
        == "https://matrix.to/#/!abc%3Aexample.org/%24Ev%2F%2Bx%3D%3Ay?via=example.org&via=other.net:8448"
    )
    assert permalink(ROOM_V12, "$e") == f"https://matrix.to/#/{ROOM_V12}/%24e"
    assert permalink(ROOM_V12) == f"https://matrix.to/#/{ROOM_V12}"


def test_permalink_keeps_at_most_three_distinct_via_servers() -> None:
    link = permalink(ROOM_V12, "$e", ["a.org", "b.org", "a.org", "c.org", "d.org"])
    assert link.endswith("?via=a.org&via=b.org&via=c.org")


_URL_SAFE = re.compile(r"^[A-Za-z0-9\-._~%!#/?&=:]+$")


@settings(max_examples=300)
@given(
    room=st.text(min_size=1).map(lambda t: "!" + t),
    event=st.text(min_size=1).map(lambda t: "$" + t),
    via=st.lists(st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True), max_size=4),
)
def test_permalink_round_trips_any_ids_and_holds_only_url_characters(room: str, event: str, via: list[str]) -> None:
    link = permalink(room, event, via)
    assert _URL_SAFE.match(link), link
    assert safe_link(link) == link
    path, _, query = link[len(MATRIX_TO) :].partition("?")
    parts = path.split("/")
    assert len(parts) == 2
    assert [unquote(p) for p in parts] == [room, event]
    servers = [pair.split("=", 1)[1] for pair in query.split("&")] if query else []
    assert servers == list(dict.fromkeys(via))[:3]


def test_a_link_that_could_end_a_markdown_target_is_not_used() -> None:
    assert safe_link("https://matrix.to/#/!a/%24b") == "https://matrix.to/#/!a/%24b"
    for bad in ("https://evil.example/x", "https://matrix.to/#/!a) [x](http://e", "https://matrix.to/#/a b", None):
        assert safe_link(bad) is None


# ---------------------------------------------------------------------------------------------
# cite: names and links on a reply


def test_cite_adds_room_name_display_names_and_permalinks_with_the_rooms_via() -> None:
    directory = {
        ROOM_V12: RoomEntry(ROOM_V12, name="Hackspace lobby", canonical_alias="#lobby:hs.org", via=("hs.org", "b.org"))
    }
    reply = {
        "hits": [
            {
                "room_id": ROOM_V12,
                "room_alias": "#old:hs.org",
                "messages": [
                    {"event_id": "$1", "sender": "@alice:hs.org", "display_name": "Alice", "ts": 1, "body": "x"},
                    {"event_id": "$2", "sender": "@bob:hs.org", "display_name": None, "ts": 2, "body": "y"},
                ],
            }
        ]
    }
    assert rooms_of(reply) == [ROOM_V12]
    hit = cite(reply, directory)["hits"][0]
    assert hit["room_name"] == "Hackspace lobby" and hit["room_alias"] == "#lobby:hs.org"
    assert [m["display_name"] for m in hit["messages"]] == ["Alice", "bob"]  # the localpart stands in
    assert hit["messages"][0]["permalink"] == f"https://matrix.to/#/{ROOM_V12}/%241?via=hs.org&via=b.org"


def test_a_room_without_a_name_is_named_by_its_canonical_alias() -> None:
    directory = {ROOM_V12: RoomEntry(ROOM_V12, canonical_alias="#lobby:hs.org")}
    hit = cite({"hits": [{"room_id": ROOM_V12, "messages": []}]}, directory)["hits"][0]
    assert hit["room_name"] == "#lobby:hs.org" == hit["room_alias"]


def test_cite_without_a_directory_entry_routes_via_the_senders_server() -> None:
    window = {"room_id": ROOM_V12, "event_id": "$1", "messages": [{"event_id": "$1", "sender": "@a:hs.org"}]}
    cited = cite(window, {})
    assert cited["room_name"] is None
    assert cited["messages"][0]["permalink"] == f"https://matrix.to/#/{ROOM_V12}/%241?via=hs.org"
    assert rooms_of(window) == [ROOM_V12]


# ---------------------------------------------------------------------------------------------
# Rooms by any name


DIRECTORY = {
    "!a": RoomEntry(
        "!a",
        name="Lobby",
        canonical_alias="#lobby:hs.org",
        alt_aliases=("#Front-Door:hs.org",),
        aliases=("#published:hs.org",),
        allowed_as=("#ops-name:hs.org",),
    ),
    "!b": RoomEntry("!b", canonical_alias="#garden:hs.org"),
    "!c": RoomEntry("!c", canonical_alias="#Garden:hs.org"),
}


def test_a_room_is_found_by_id_canonical_alt_directory_and_rooms_alias() -> None:
    for name in ("!a", "#lobby:hs.org", "#Front-Door:hs.org", "#published:hs.org", "#ops-name:hs.org"):
        assert resolve_rooms([name], DIRECTORY) == ("!a",), name


def test_aliases_match_case_insensitively_but_an_exact_match_wins() -> None:
    assert resolve_rooms(["#LOBBY:HS.ORG"], DIRECTORY) == ("!a",)
    assert resolve_rooms(["#front-door:hs.org"], DIRECTORY) == ("!a",)
    assert resolve_rooms(["#garden:hs.org"], DIRECTORY) == ("!b",)
    assert resolve_rooms(["#Garden:hs.org"], DIRECTORY) == ("!c",)
    assert resolve_rooms(["#GARDEN:hs.org"], DIRECTORY) == ("!b", "!c")  # only a fold: both answer


def test_unknown_names_resolve_to_nothing_and_ids_pass_through_exactly() -> None:
    assert resolve_rooms(["#nowhere:hs.org"], DIRECTORY) == ()
    assert resolve_rooms(["!A"], DIRECTORY) == ("!A",)  # ids are case-sensitive: no entry, no fold
    assert resolve_rooms(["!b", "#garden:hs.org", "!a"], DIRECTORY) == ("!b", "!a")


# ---------------------------------------------------------------------------------------------
# Markdown citations

MD = MarkdownIt("commonmark", {"linkify": True}).enable(["linkify", "strikethrough", "table"])
LINK = permalink(ROOM_V12, "$event", ["hs.org"])


def _inline_children(line: str) -> list:
    tokens = MD.parse(line)
    assert [t.type for t in tokens] == [
        "blockquote_open",
        "paragraph_open",
        "inline",
        "paragraph_close",
        "blockquote_close",
    ], line
    return tokens[2].children or []


def _unescaped(text: str, what: str) -> bool:
    """True when ``what`` occurs in ``text`` not preceded by an odd run of backslashes."""
    for match in re.finditer(re.escape(what), text):
        run = len(text[: match.start()]) - len(text[: match.start()].rstrip("\\"))
        if run % 2 == 0:
            return True
    return False


def test_a_citation_line_reads_as_the_example() -> None:
    message = {
        "sender": "@alice:hs.org",
        "display_name": "Alice",
        "ts": 1_796_047_320_000,  # 2026-11-30 14:02 UTC
        "body": "the kettle is broken",
        "permalink": LINK,
    }
    assert markdown_citation(message, "#room:hs.org") == (
        f"> **Alice** (\\@alice\\:hs\\.org, 2026-11-30 14:02 UTC, \\#room\\:hs\\.org): the kettle is broken — [link]({LINK})"
    )


def test_markup_in_a_body_stays_text() -> None:
    body = "see [docs](https://evil.example) ![x](y) <b>hi</b> <https://a.b> www.c.d e@f.g https://h.i **j** `k`"
    line = markdown_citation({"sender": "@m:x", "ts": 0, "body": body, "permalink": LINK}, "r")
    children = _inline_children(line)
    links = [c.attrs.get("href") for c in children if c.type == "link_open"]
    assert links == [LINK]
    assert not [c for c in children if c.type in ("image", "html_inline", "code_inline", "em_open")]


@settings(max_examples=400, deadline=None)
@given(body=st.text(), name=st.text(max_size=40), room=st.text(max_size=40))
def test_nothing_in_a_body_or_a_name_breaks_out_of_the_quote_or_adds_a_link(body: str, name: str, room: str) -> None:
    for text in (body, name, room):
        escaped = escape_markdown(text)
        assert escaped.splitlines() in ([escaped], []), escaped
        for syntax in ("[", "](", "<", "`", "*", "_", "!"):
            assert not _unescaped(escaped, syntax), (syntax, escaped)
    message = {"sender": "@m:x", "display_name": name or None, "ts": 0, "body": body, "permalink": LINK}
    line = markdown_citation(message, room or "r")
    assert line.splitlines() == [line]
    assert line.endswith(f" — [link]({LINK})")
    children = _inline_children(line)  # one quote, one paragraph
    assert [c.attrs.get("href") for c in children if c.type == "link_open"] == [LINK]
    assert not [c for c in children if c.type in ("image", "html_inline", "code_inline", "softbreak", "hardbreak")]


_PLAIN = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=_PLAIN))
def test_escaping_renders_the_text_it_was_given(text: str) -> None:
    """An escaped body renders as itself: escaping hides syntax, it does not change the words."""
    rendered = "".join(c.content for c in _inline_children(f"> x {escape_markdown(text)} x") if c.type == "text")
    assert rendered == f"x {text} x"


def test_line_breaks_and_bidi_controls_become_visible_separators() -> None:
    assert escape_markdown("a\nb\r\nc\u2028d") == "a ⏎ b ⏎ c ⏎ d"
    assert escape_markdown("x\u202ey\x00z") == "x y z"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20) | st.from_regex(r"\$[A-Za-z0-9_~.:/+=-]{0,44}", fullmatch=True))
def test_an_event_id_is_encoded_as_quote_encodes_it(event_id: str) -> None:
    # The shortcut for the usual "$" + URL-safe base64 id must agree with urllib's own encoding.
    assert _quoted_event_id(event_id) == quote(event_id, safe="")
