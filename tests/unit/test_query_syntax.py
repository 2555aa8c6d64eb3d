"""daemon.reader.query_syntax and daemon.reader.times: the operators typed in a text, and relative times.

Pure parsers, so hypothesis where it fits: no identifier, flag or negative number ever becomes
an exclusion; every duration and calendar word resolves to the instant the grammar defines.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, strategies as st

from daemon.reader import times
from daemon.reader.query_syntax import SyntaxProblem, analysed, holds_phrase, parse_text
from daemon.reader.search import QueryError, make_query

# ---------------------------------------------------------------------------------------------
# Query syntax


def test_a_text_without_operators_is_searched_as_it_is() -> None:
    text = "  why did the deploy   fail?  "
    parsed = parse_text(text)
    assert parsed.words == text and not parsed.operators
    assert parsed.phrases == parsed.excluded == parsed.senders == parsed.rooms == ()


def test_phrase_exclusion_sender_and_room_are_taken_apart() -> None:
    parsed = parse_text('"deploy key" rotation -staging from:@alice:x.org in:#ops:x.org in:!abc -"dry run"')
    assert parsed.words == "deploy key rotation"
    assert parsed.phrases == (("deploy", "key"),)
    assert parsed.excluded == (("staging",), ("dry", "run"))
    assert parsed.senders == ("@alice:x.org",)
    assert parsed.rooms == ("#ops:x.org", "!abc")


@pytest.mark.parametrize(
    "text",
    [
        "x-forwarded-for header",
        "run it with --verbose",
        "offset -5 then -0.5",
        "a - b",
        "-- separator",
        "--dry-run flag",
        "apt-get -s dist-upgrade",
        "tar -x then ls -l",
        'an "unclosed quote',
        "from: nobody",
        "in: short",
        'empty "" quotes',
    ],
)
def test_hyphens_inside_words_flags_numbers_and_stray_quotes_stay_words(text: str) -> None:
    parsed = parse_text(text)
    assert parsed.excluded == () and parsed.phrases == () and not parsed.operators
    assert parsed.words == text


@pytest.mark.parametrize(
    "text, message",
    [("from:alice", "from:"), ("from:@alice", "from:"), ("in:general", "in:"), ("in:#general", "in:")],
)
def test_an_operator_with_a_bad_value_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(SyntaxProblem) as err:
        parse_text(f"deploy {text}")
    assert err.value.message.startswith(message) and text not in err.value.message


def test_make_query_merges_typed_filters_with_the_flags_and_names_texts_on_error() -> None:
    query = make_query(["deploy in:#ops:x.org from:@a:x.org"], rooms=["!r:x.org"], senders=["@a:x.org"])
    assert query.terms == ("deploy",)
    assert query.rooms == ("!r:x.org", "#ops:x.org") and query.senders == ("@a:x.org",)
    with pytest.raises(QueryError) as err:
        make_query(["deploy from:bob"])
    assert err.value.field == "texts" and "bob" not in err.value.message
    with pytest.raises(QueryError) as err:
        make_query(["-staging"])
    assert err.value.field == "texts"


def test_only_filters_in_a_text_make_a_listing() -> None:
    query = make_query(["from:@a:x.org in:#ops:x.org"])
    assert query.terms == () and query.sort == "oldest"
    assert query.rooms == ("#ops:x.org",) and query.senders == ("@a:x.org",)


def test_phrases_hold_in_order_inside_one_message() -> None:
    phrase = analysed("X-Forwarded-For header")
    assert holds_phrase(["set the x forwarded-for HEADER please"], phrase)
    assert not holds_phrase(["header x-forwarded-for"], phrase)
    assert not holds_phrase(["x-forwarded-for", "header"], phrase)  # never across two messages


_IDENT = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){1,3}", fullmatch=True)
_FLAG = st.from_regex(r"--[a-z][a-z-]{0,10}", fullmatch=True)
_NUMBER = st.from_regex(r"-[0-9]{1,4}(\.[0-9]{1,3})?", fullmatch=True)
_WORD = st.from_regex(r"[a-z]{1,8}", fullmatch=True)
_EXCLUDABLE = st.from_regex(r"[a-z]{2,8}", fullmatch=True)  # "-s" alone is a one-letter flag


@given(st.lists(st.one_of(_IDENT, _FLAG, _NUMBER, _WORD), min_size=1, max_size=8))
def test_no_identifier_flag_or_negative_number_is_ever_an_exclusion(tokens: list[str]) -> None:
    text = " ".join(tokens)
    parsed = parse_text(text)
    assert parsed.excluded == () and parsed.words == text


@given(st.lists(_WORD, min_size=1, max_size=5), st.lists(_EXCLUDABLE, min_size=1, max_size=3))
def test_every_minus_word_after_whitespace_is_excluded_and_not_searched(kept: list[str], dropped: list[str]) -> None:
    text = " ".join(kept) + " " + " ".join(f"-{w}" for w in dropped)
    parsed = parse_text(text)
    assert parsed.words == " ".join(kept)
    assert parsed.excluded == tuple(dict.fromkeys((w,) for w in dropped))


@given(st.text(max_size=80))
def test_any_text_either_parses_or_is_refused_with_a_syntax_problem(text: str) -> None:
    try:
        parsed = parse_text(text)
    except SyntaxProblem:
        return
    assert all(phrase for phrase in parsed.phrases) and all(term for term in parsed.excluded)


# ---------------------------------------------------------------------------------------------
# Relative times

NOW = int(datetime(2026, 11, 4, 15, 30, tzinfo=timezone.utc).timestamp() * 1000)  # a Wednesday


@pytest.mark.parametrize(
    "value, expected",
    [
        ("90m", NOW - 90 * 60_000),
        ("36h", NOW - 36 * 3_600_000),
        ("2d", NOW - 2 * 86_400_000),
        ("1w", NOW - 7 * 86_400_000),
        ("2D", NOW - 2 * 86_400_000),
        ("today", datetime(2026, 11, 4, tzinfo=timezone.utc)),
        ("yesterday", datetime(2026, 11, 3, tzinfo=timezone.utc)),
        ("Yesterday  UTC", datetime(2026, 11, 3, tzinfo=timezone.utc)),
        ("this week", datetime(2026, 11, 2, tzinfo=timezone.utc)),
        ("last week", datetime(2026, 10, 26, tzinfo=timezone.utc)),
        ("yesterday Europe/Berlin", datetime(2026, 11, 3, tzinfo=ZoneInfo("Europe/Berlin"))),
        ("today America/New_York", datetime(2026, 11, 4, tzinfo=ZoneInfo("America/New_York"))),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=timezone.utc)),
        ("1793518739000", 1_793_518_739_000),
        (1_793_518_739_000, 1_793_518_739_000),
    ],
)
def test_times_resolve_to_the_instant_the_grammar_defines(value: object, expected: object) -> None:
    if isinstance(expected, datetime):
        expected = int(expected.timestamp() * 1000)
    assert times.parse_spec(value).resolve(NOW) == expected
    assert make_query(["x"], after=value, now_ms=NOW).after_ms == expected


def test_a_calendar_day_across_a_daylight_saving_change_is_counted_in_wall_time() -> None:
    # 2026-03-29: Berlin moves from +01:00 to +02:00; "yesterday" on the 30th is a 23-hour day.
    now = int(datetime(2026, 3, 30, 12, tzinfo=timezone.utc).timestamp() * 1000)
    start = times.parse_spec("yesterday Europe/Berlin").resolve(now)
    assert datetime.fromtimestamp(start / 1000, tz=ZoneInfo("Europe/Berlin")).isoformat() == "2026-03-29T00:00:00+01:00"
    end = times.parse_spec("today Europe/Berlin").resolve(now)
    assert end - start == 23 * 3_600_000


@pytest.mark.parametrize(
    "value",
    ["last tuesday", "2 days", "5y", "-2d", "yesterday Mars/Olympus", "today ../../etc/passwd", "tomorrow", "", "2x"],
)
def test_other_words_are_refused(value: str) -> None:
    with pytest.raises(times.TimeError):
        times.parse_spec(value)
    with pytest.raises(QueryError) as err:
        make_query(["x"], before=value)
    assert err.value.field == "before" and (not value or value not in err.value.message)


_ZONES = st.sampled_from([None, "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"])
_NOWS = st.integers(min_value=400 * 86_400_000, max_value=4_000_000_000_000)


@given(_NOWS, st.sampled_from(["today", "yesterday", "this week", "last week"]), _ZONES)
def test_calendar_words_are_local_midnights_at_or_before_now(now: int, word: str, zone: str | None) -> None:
    spec = times.parse_spec(word + (f" {zone}" if zone else ""))
    instant = spec.resolve(now)
    tz = ZoneInfo(zone) if zone else timezone.utc
    local = datetime.fromtimestamp(instant / 1000, tz=tz)
    today = datetime.fromtimestamp(now / 1000, tz=tz).date()
    assert (local.hour, local.minute, local.second) == (0, 0, 0) and instant <= now
    expected_date = {
        "today": today,
        "yesterday": today - timedelta(days=1),
        "this week": today - timedelta(days=today.weekday()),
        "last week": today - timedelta(days=today.weekday() + 7),
    }[word]
    assert local.date() == expected_date
    assert times.parse_spec(times.spec_text(spec)) == spec


@given(_NOWS, st.integers(min_value=0, max_value=999_999), st.sampled_from(["m", "h", "d", "w"]))
def test_durations_are_exactly_that_long_before_now(now: int, amount: int, unit: str) -> None:
    spec = times.parse_spec(f"{amount}{unit}")
    span = amount * {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}[unit]
    assert spec.resolve(now) == max(0, now - span)
    assert times.parse_spec(times.spec_text(spec)) == spec


def test_purge_times_stay_absolute() -> None:
    from daemon.reader.search import parse_time

    with pytest.raises(QueryError):
        parse_time("2d", "from")
    assert parse_time("2026-11-01", "from") == 1_793_491_200_000
