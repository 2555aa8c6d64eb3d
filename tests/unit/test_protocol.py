"""daemon.reader.protocol: every line becomes a typed request or a ProtocolError naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from daemon.reader.protocol import (
    BAD_JSON,
    BAD_REQUEST,
    LINE_TOO_LONG,
    MAX_LINE_BYTES,
    UNKNOWN_OP,
    UNSUPPORTED_VERSION,
    ProtocolError,
    SearchRequest,
    StatusRequest,
    WindowRequest,
    error_reply,
    ok_reply,
    parse_reply,
    parse_request,
    search_request,
    window_request,
)
from daemon.reader.search import make_query, make_window_query


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def refused(obj_or_line: Any) -> ProtocolError:
    line = obj_or_line if isinstance(obj_or_line, bytes) else _line(obj_or_line)
    with pytest.raises(ProtocolError) as err:
        parse_request(line)
    return err.value


def test_a_search_request_parses_with_defaults() -> None:
    request = parse_request(_line({"v": 1, "id": "r1", "op": "search", "texts": ["hello"]}))
    assert isinstance(request, SearchRequest)
    assert request.id == "r1"
    assert request.query.texts == ("hello",) and request.query.top_k == 8


def test_a_listing_is_a_search_without_texts() -> None:
    request = parse_request(_line({"v": 1, "op": "search", "rooms": ["#dev:example.org"], "top_k": 3}))
    assert isinstance(request, SearchRequest) and request.query.texts == ()


def test_window_and_status_requests() -> None:
    window = parse_request(_line({"v": 1, "op": "window", "event_id": "$e", "before": 0}))
    assert isinstance(window, WindowRequest) and (window.query.before, window.query.after) == (0, 2)
    assert isinstance(parse_request(b'{"v":1,"op":"status","id":7}'), StatusRequest)


@pytest.mark.parametrize(
    "request_obj, code, field",
    [
        ({"op": "search", "texts": ["x"]}, BAD_REQUEST, "v"),
        ({"v": 2, "op": "search", "texts": ["x"]}, UNSUPPORTED_VERSION, "v"),
        ({"v": "1", "op": "search"}, UNSUPPORTED_VERSION, "v"),
        ({"v": True, "op": "search"}, UNSUPPORTED_VERSION, "v"),
        ({"v": 1}, UNKNOWN_OP, "op"),
        ({"v": 1, "op": "delete"}, UNKNOWN_OP, "op"),
        ({"v": 1, "op": "upsert"}, UNKNOWN_OP, "op"),
        ({"v": 1, "op": ["search"]}, UNKNOWN_OP, "op"),
        ({"v": 1, "op": "search", "text": "x"}, BAD_REQUEST, "text"),
        ({"v": 1, "op": "window", "event_id": "$e", "top_k": 3}, BAD_REQUEST, "top_k"),
        ({"v": 1, "op": "search", "texts": "x"}, BAD_REQUEST, "texts"),
        ({"v": 1, "op": "search", "texts": None}, BAD_REQUEST, "texts"),
        ({"v": 1, "op": "search", "texts": ["x"] * 9}, BAD_REQUEST, "texts"),
        ({"v": 1, "op": "search", "texts": ["x" * 1001]}, BAD_REQUEST, "texts"),
        ({"v": 1, "op": "search", "texts": [""]}, BAD_REQUEST, "texts"),
        ({"v": 1, "op": "search", "texts": ["x"], "top_k": 51}, BAD_REQUEST, "top_k"),
        ({"v": 1, "op": "search", "texts": ["x"], "top_k": "8"}, BAD_REQUEST, "top_k"),
        ({"v": 1, "op": "search", "rooms": [1]}, BAD_REQUEST, "rooms"),
        ({"v": 1, "op": "search", "senders": "@a:b"}, BAD_REQUEST, "senders"),
        ({"v": 1, "op": "search", "after": "soon"}, BAD_REQUEST, "after"),
        ({"v": 1, "op": "search", "before": {"ms": 1}}, BAD_REQUEST, "before"),
        ({"v": 1, "op": "search", "cursor": 5}, BAD_REQUEST, "cursor"),
        ({"v": 1, "op": "window"}, BAD_REQUEST, "event_id"),
        ({"v": 1, "op": "window", "event_id": "$e", "after": 21}, BAD_REQUEST, "after"),
        ({"v": 1, "op": "status", "id": [1]}, BAD_REQUEST, "id"),
        ({"v": 1, "op": "status", "id": True}, BAD_REQUEST, "id"),
    ],
)
def test_bad_requests_name_the_field(request_obj: dict, code: str, field: str) -> None:
    err = refused(request_obj)
    assert (err.code, err.field) == (code, field)


@pytest.mark.parametrize("line", [b"", b"{", b"[]", b"null", b"42", b'"search"', b"\xff\xfe", b"NaN", b'{"v": NaN}'])
def test_malformed_lines_are_bad_json(line: bytes) -> None:
    assert refused(line).code == BAD_JSON


def test_deep_nesting_is_bad_json_not_a_crash() -> None:
    assert refused(b"[" * 60_000).code == BAD_JSON


def test_an_oversize_line_is_refused() -> None:
    line = _line({"v": 1, "op": "search", "texts": ["x" * MAX_LINE_BYTES]})
    assert refused(line).code == LINE_TOO_LONG


def test_the_request_id_is_kept_for_the_error_reply() -> None:
    err = refused({"v": 1, "id": "abc", "op": "search", "top_k": 0})
    assert err.request_id == "abc"
    reply = parse_reply(error_reply(err.request_id, err.code, err.message, err.field))
    assert reply == {
        "v": 1,
        "id": "abc",
        "ok": False,
        "error": {"code": BAD_REQUEST, "field": "top_k", "message": err.message},
    }


def test_a_maximal_search_fits_in_one_line() -> None:
    # every character escaped: the worst a client's JSON encoder can do with 8 x 1000 bytes
    query = make_query(["\u0001" * 1000 for _ in range(8)])
    body = json.dumps(search_request(query) | {"texts": ["\u0001" * 1000 + str(i) for i in range(8)]})
    assert len(body.encode()) < MAX_LINE_BYTES


def test_client_request_builders_round_trip() -> None:
    query = make_query(
        ["a", "b"], rooms=["#r:x"], senders=["@s:x"], after="2026-01-01", before=2_000_000_000_000, top_k=5
    )
    parsed = parse_request(json.dumps(search_request(query, "id1")))
    assert isinstance(parsed, SearchRequest) and parsed.query == query and parsed.id == "id1"
    window = make_window_query("$e", 3, 4)
    parsed_window = parse_request(json.dumps(window_request(window)))
    assert isinstance(parsed_window, WindowRequest) and parsed_window.query == window


def test_replies_are_one_line_each() -> None:
    line = ok_reply(1, {"hits": [{"messages": [{"body": "two\nlines"}]}], "next": None, "degraded": None})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_reply(line)["result"]["hits"][0]["messages"][0]["body"] == "two\nlines"


def test_parse_reply_rejects_foreign_lines() -> None:
    for line in (b"{}", b'{"v": 2, "ok": true, "result": {}}', b'{"v": 1, "ok": true}', b"[1]"):
        with pytest.raises(ValueError):
            parse_reply(line)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_any_bytes_parse_or_refuse(line: bytes) -> None:
    try:
        parse_request(line)
    except ProtocolError as err:
        assert err.code and err.message


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(["search", "window", "status", "nope"]),
    fields=st.dictionaries(
        st.sampled_from(
            ["texts", "rooms", "senders", "after", "before", "top_k", "cursor", "event_id", "id", "v", "x"]
        ),
        _json,
        max_size=5,
    ),
)
def test_fuzz_wrong_types_parse_or_refuse_naming_a_field(op: str, fields: dict) -> None:
    obj = {"v": 1, "op": op} | fields
    try:
        parse_request(_line(obj))
    except ProtocolError as err:
        assert err.code in {BAD_REQUEST, UNKNOWN_OP, UNSUPPORTED_VERSION}
        assert err.field  # always names what is wrong


# A lone surrogate is legal as a JSON escape but has no UTF-8 form.
LONE = "\ud800"


def test_a_lone_surrogate_echoed_back_still_makes_a_reply_line() -> None:
    request = parse_request(_line({"v": 1, "id": LONE, "op": "status"}))
    line = ok_reply(request.id, {})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_reply(line)["id"] == LONE  # the escape it arrived as
    err = refused({"v": 1, "op": "status", LONE: 1})
    reply = parse_reply(error_reply(err.request_id, err.code, err.message, err.field))
    assert reply["error"]["code"] == BAD_REQUEST and reply["error"]["field"] == LONE


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"op": "search", "rooms": ["!" + LONE]}, "rooms"),
        ({"op": "search", "rooms": ["#a" + LONE + ":example.org"]}, "rooms"),
        ({"op": "search", "senders": ["@a" + LONE + ":example.org"]}, "senders"),
        ({"op": "window", "event_id": "$" + LONE}, "event_id"),
    ],
)
def test_ids_holding_a_lone_surrogate_are_refused_naming_the_field(fields: dict, field: str) -> None:
    err = refused({"v": 1} | fields)
    assert err.code == BAD_REQUEST and err.field == field
