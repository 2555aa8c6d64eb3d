"""A ranked hit says why it matched in terms a reader can judge: the query words it holds, its
best message's similarity, a 0..1 relevance; a hit that holds no query word and is far less
similar than the best is not padded in; a sender filter marks only that sender's messages; a
very long message shows a bounded snippet; two senders of one display name stay apart."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from daemon.cli.client import SNIPPET_CHARS, _message_line, snippet
from daemon.reader.citations import markdown_citation
from daemon.reader.explain import explain
from daemon.reader.search import execute_search, make_query, unrelated
from tests.reader_fakes import ALICE, BOB, ROOM_A, FakeEmbedder, FakeIndex, Running, make_window
from tests.reader_sockets import ask, service_over


def test_explain_names_the_words_the_similarity_and_a_relevance() -> None:
    hits = [
        {"messages": [{"body": "the laser cutter is broken", "matched": ["lexical"]}, {"body": "oh no"}]},
        {"messages": [{"body": "lunch plans", "matched": ["dense"]}]},
    ]
    explain(hits, [(0.4, 0.1), (0.25,)], ["laser cutter chiller"])
    assert hits[0]["matched_words"] == ["laser", "cutter"] and hits[0]["similarity"] == 0.4
    assert hits[0]["relevance"] == round(2 / 3, 3)  # two of three query words beat 0.4
    assert hits[1]["matched_words"] == [] and hits[1]["relevance"] == 0.25


class SynonymEmbedder(FakeEmbedder):
    """The bag-of-words embedder with a thesaurus for query texts: "espresso machine broke" lands
    where "coffee maker broken" does, so a paraphrase is near in meaning without a shared word."""

    SYNONYMS = {"espresso": "coffee", "machine": "maker", "broke": "broken"}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return super().embed([" ".join(self.SYNONYMS.get(w, w) for w in t.split()) for t in texts])


def _kitchen_and_office() -> list[dict]:
    return [
        make_window(ROOM_A, [("$err", ALICE, 1_000, "the deploy died with ERR_CONN_RESET again")]),
        make_window(ROOM_A, [("$badge", BOB, 2_000, "My badge hasn't opened the front door")]),
        make_window(ROOM_A, [("$coffee", BOB, 3_000, "the coffee maker is broken, descale it")]),
    ]


def test_an_identifier_search_is_not_padded_with_unrelated_hits(sock_dir: Path) -> None:
    index = FakeIndex(_kitchen_and_office())
    service = service_over(index, SynonymEmbedder())
    path = sock_dir / "r.sock"
    with Running(service, path):
        reply = ask(path, {"v": 1, "op": "search", "texts": ["ERR_CONN_RESET"], "top_k": 5})
        paraphrase = ask(path, {"v": 1, "op": "search", "texts": ["espresso machine broke"], "top_k": 5})
    # The index ranked all three windows (its dense leg ranks every eligible one); the two that
    # hold no query word and have no similarity to it were left out, not padded in.
    assert index.candidates >= 3
    hits = reply["result"]["hits"]
    assert [h["first_event_id"] for h in hits] == ["$err"] and hits[0]["matched_words"] == ["err_conn_reset"]
    assert service._log.audit()[0]["excluded"]["floor"] == 2
    # No shared word, but the nearest in meaning by far: the paraphrase still finds its window.
    (found,) = paraphrase["result"]["hits"]
    assert found["first_event_id"] == "$coffee" and found["matched_words"] == [] and found["similarity"] > 0.5


def test_the_floor_keeps_a_word_holder_and_a_near_miss_and_judges_nothing_without_similarity() -> None:
    terms = ["laser cutter"]
    candidates = [(["laser cutter broke"], 0.8), (["the chiller is warm"], 0.78), (["lunch?"], 0.05)]
    assert unrelated(candidates, terms) == [False, False, True]
    # A hit holding a query word stays however far it is; so does one the index gave no similarity.
    assert unrelated([(["laser cutter"], 0.9), (["who has the LASER key"], 0.01)], terms) == [False, False]
    assert unrelated([(["x"], None), (["y"], None)], terms) == [False, False]


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
