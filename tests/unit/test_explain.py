"""A ranked hit says why it matched in terms a reader can judge: the query words it holds, its
best message's similarity, a 0..1 relevance; a sender filter marks only that sender's messages;
a very long message shows a bounded snippet; two senders of one display name stay apart."""

from __future__ import annotations

from daemon.cli.client import SNIPPET_CHARS, _message_line, snippet
from daemon.reader.citations import markdown_citation
from daemon.reader.explain import explain
from daemon.reader.search import execute_search, make_query
from tests.reader_fakes import ALICE, BOB, ROOM_A, FakeEmbedder, FakeIndex, make_window


def test_explain_names_the_words_the_similarity_and_a_relevance() -> None:
    hits = [
        {"messages": [{"body": "the laser cutter is broken", "matched": ["lexical"]}, {"body": "oh no"}]},
        {"messages": [{"body": "lunch plans", "matched": ["dense"]}]},
    ]
    explain(hits, [(0.4, 0.1), (0.25,)], ["laser cutter chiller"])
    assert hits[0]["matched_words"] == ["laser", "cutter"] and hits[0]["similarity"] == 0.4
    assert hits[0]["relevance"] == round(2 / 3, 3)  # two of three query words beat 0.4
    assert hits[1]["matched_words"] == [] and hits[1]["relevance"] == 0.25


def test_a_sender_filter_marks_only_that_senders_messages() -> None:
    # Bob's message holds every query word; the filter asked for Alice, so hers is the match.
    window = make_window(
        ROOM_A, [("$a", ALICE, 1_000, "the pump broke"), ("$b", BOB, 2_000, "pump chiller broke again badly")]
    )
    index = FakeIndex([window], generation=1)
    for senders in ([ALICE], None):
        result = execute_search(index, FakeEmbedder(), make_query(["pump chiller broke"], senders=senders))
        marked = [m["sender"] for hit in result.hits for m in hit["messages"] if m["matched"]]
        assert marked and (set(marked) == {ALICE} if senders else BOB in marked)


def test_a_very_long_message_shows_a_bounded_snippet_around_the_match() -> None:
    body = "filler " * 200 + "the ERR_CONN_RESET came back " + "tail " * 200
    short = snippet(body, {"err_conn_reset"})
    assert "ERR_CONN_RESET" in short and len(short) <= SNIPPET_CHARS + 2
    line = _message_line({"event_id": "$long", "sender": ALICE, "ts": 0, "body": body}, True, "lexical", set())
    assert f"[{len(body)} characters: huginn-chat window '$long']" in line and len(line) < SNIPPET_CHARS + 200


def test_two_senders_with_one_display_name_stay_apart_in_every_output() -> None:
    one = {"sender": "@sam:a.org", "display_name": "Sam", "ts": 0, "body": "hi", "event_id": "$1"}
    other = {**one, "sender": "@sam:b.org", "event_id": "$2"}
    assert markdown_citation(one, "r") != markdown_citation(other, "r")
    assert "@sam:a.org" in _message_line(one, False) and "@sam:b.org" in _message_line(other, False)
