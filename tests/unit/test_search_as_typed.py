"""`huginn-chat search` reads what people type: bare words are one text, ``--text`` adds more,
``-word`` exclusions need no quoting; and the request the reader gets says so."""

from __future__ import annotations

import contextlib
import io

import pytest

from daemon.cli import client
from daemon.cli.main import build_parser, main
from daemon.reader import protocol


def texts_of(argv: list[str]) -> list[str]:
    args = build_parser(only_client=True).parse_args(argv)
    return client.typed_texts(args)


def test_bare_words_are_one_text() -> None:
    assert texts_of(["search", "the", "laser", "cutter", "is", "broken"]) == ["the laser cutter is broken"]
    assert texts_of(["search", "the laser cutter is broken"]) == ["the laser cutter is broken"]


def test_each_text_option_is_one_more_text_after_the_words() -> None:
    argv = ["search", "kettle", "broken", "--text", "appliance needs repair", "-t", "no tea"]
    assert texts_of(argv) == ["kettle broken", "appliance needs repair", "no tea"]
    assert texts_of(["search", "--text", "only this"]) == ["only this"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["search", "laser", "-chiller"], ["laser -chiller"]),
        (["search", "-chiller", "laser", "--top-k", "3"], ["-chiller laser"]),
        # An option is only ever an option given exactly: "-tea" is not "-t ea".
        (["search", "kettle", "-tea"], ["kettle -tea"]),
        (["search", "kettle", "-t", "tea"], ["kettle", "tea"]),
    ],
)
def test_an_exclusion_typed_unquoted_is_a_word(argv: list[str], expected: list[str]) -> None:
    assert texts_of(argv) == expected


def test_the_reader_gets_the_exclusion_as_an_operator() -> None:
    args = build_parser(only_client=True).parse_args(["search", "laser", "-chiller"])
    request = protocol.parse_request(client._encode_line(client._request("search", args)).rstrip(b"\n"))
    assert request.query.terms == ("laser",) and request.query.excluded == (("chiller",),)


def test_an_unknown_long_flag_is_still_a_usage_error() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["search", "laser", "--chiller"])
    assert exit_.value.code == 2 and "--chiller" in err.getvalue()


def test_the_help_shows_one_text_and_several() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["search", "--help"])
    text = out.getvalue()
    assert "huginn-chat search the laser cutter is broken" in text
    assert "--text 'appliance needs repair'" in text and "search laser -chiller" in text
