"""The in-process eval (bench/inproc.py) on hand-made corpora: its product is the reader's own
ranking over an in-memory index (verbatim holders first, one text's legs fused by the product's
``fuse_legs``), its dense leg is MaxSim over message rows, the levers change only what they name,
and held-out halves stay out unless asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import inproc
from bench.corpus import CorpusMessage
from bench.querysets import LabelledQuery, QuerySet, long_tables, score_set
from bench.tune import Corpus
from tests.fakes import FakeEmbedder

HOUR = 3_600_000


def _systems(tmp_path: Path, bodies: list[str]) -> inproc.Systems:
    # An hour apart: every message is a window of its own.
    messages = [CorpusMessage("#r", f"r:{i}", f"n{i}", i * HOUR, body) for i, body in enumerate(bodies)]
    return inproc.Systems(Corpus(FakeEmbedder(), tmp_path / "vectors", messages=messages))


def test_the_product_puts_a_window_holding_the_text_verbatim_first_as_the_reader_does(tmp_path):
    from daemon.embedder import Bm25Sparse
    from daemon.index.port import SearchFilter

    systems = _systems(
        tmp_path,
        [
            "apt-get dist-upgrade fails here today with some other unrelated noise words around it",
            "dist-upgrade apt-get fails",
            "nothing to see",
        ],
    )
    text = "apt-get dist-upgrade fails"
    index = systems.index()
    fused = index.hybrid(systems.vectors([text])[0], Bm25Sparse().sparse_query(text), SearchFilter(), 10)
    assert fused[0].window.messages[0].event_id == "r:1"  # the legs alone prefer the scrambled one
    ranked = systems.rank_product(text)
    assert ranked[0] == ("r:0",) and ranked[1] == ("r:1",)
    assert systems.rank_dense(text)[0] == ("r:1",) and ("r:2",) not in systems.rank_bm25(text)


def test_the_dense_leg_is_the_best_message_row_and_a_context_row_counts_for_its_message(tmp_path):
    messages = [
        CorpusMessage("#r", "r:0", "ann", 0, "how do I mount the usb stick"),
        CorpusMessage("#r", "r:1", "bob", 1000, "ann: try this"),
        CorpusMessage("#r", "r:2", "cid", 2000, "unrelated chatter"),
    ]
    corpus = Corpus(FakeEmbedder(), tmp_path / "vectors", messages=messages)
    plain, ctx = (
        inproc.InMemoryIndex(corpus, inproc.ContextRows("none")),
        inproc.InMemoryIndex(corpus, inproc.ContextRows("prev")),
    )
    product = inproc.InMemoryIndex(corpus)
    assert len(plain.windows) == 1
    # The product's context rows are the refresher's own (chunker.context), laid over its windows.
    assert product.ctx_texts == [
        "ann: how do I mount the usb stick\nbob: ann: try this",
        "bob: ann: try this\ncid: unrelated chatter",
    ]
    q = np.asarray(corpus.vectors.get(["mount usb stick"])[0])
    rows = plain.message_scores(q)
    assert plain.dense_scores(q)[0] == pytest.approx(rows.max())
    assert len(ctx.ctx_texts) == 2 and ctx.ctx_texts[0].endswith("bob: ann: try this")
    assert ctx.message_scores(q)[1] > rows[1]  # the answer now carries its question
    assert ctx.message_scores(q)[0] == pytest.approx(rows[0])  # the first line has no context


def test_query_forms_split_only_long_texts_and_keep_the_readers_text_limit():
    from daemon.reader.wire import MAX_TEXTS

    short = "apt-get dist-upgrade fails"
    for form in inproc.QUERY_FORMS.values():
        assert form(short) == [short]
    long = (
        "someone's laptop kept freezing whenever they ran virtual machines, sometimes it came back and "
        "sometimes it needed a hard reset; someone suggested watching the system log while reproducing it"
    )
    clauses = inproc.QUERY_FORMS["clauses"](long)
    assert 2 <= len(clauses) <= MAX_TEXTS and all(len(c.split()) >= 4 for c in clauses)
    assert inproc.QUERY_FORMS["whole+clauses"](long)[0] == long
    sentences = inproc.QUERY_FORMS["sentences"](long)
    assert sentences[0].endswith("hard reset;") and sentences[1].startswith("someone suggested")
    keys = inproc.QUERY_FORMS["keywords"](long)[0]
    assert "laptop" in keys and "virtual" in keys and "someone's" not in keys.split() and " the " not in f" {keys} "


def test_long_text_weights_change_only_long_plain_language_texts_and_are_restored():
    from daemon.reader import search

    long = "someone said the laptop kept freezing whenever they ran virtual machines and had to reset it hard every single time"
    shipped = search.leg_weights
    with inproc.long_text_weights((4.0, 1.0)):
        assert search.leg_weights(long) == {"dense": 4.0, "lexical": 1.0}
        assert search.leg_weights("laptop freezing") == shipped("laptop freezing")
        ident = " ".join(["foo_bar.baz()"] * 25)
        assert search.leg_weights(ident) == shipped(ident)
    assert search.leg_weights is shipped


def test_held_out_halves_are_dropped_unless_asked(tmp_path, monkeypatch):
    folder = tmp_path / "irc2"
    folder.mkdir()
    rows = [
        {"id": f"q{i}", "style": "keywords", "kind": "exact", "text": "t", "relevant": ["r/0:1"], "split": split}
        for i, split in enumerate(["tune", "heldout", "tune"])
    ]
    (folder / "independent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(
        inproc, "query_sets", lambda corpus: __import__("bench.querysets").querysets.query_sets(corpus, tmp_path)
    )
    assert [q.id for q in inproc.chosen_sets("irc2", False, None)[0].queries] == ["q0", "q2"]
    assert [q.id for q in inproc.chosen_sets("irc2", True, None)[0].queries] == ["q0", "q1", "q2"]


def test_long_tables_give_every_metric_per_kind_and_per_style():
    queries = (
        LabelledQuery("a", "exact", "t", ("r:1",), "tune", "keywords"),
        LabelledQuery("b", "paraphrase", "t", ("r:2",), "tune", "narrative"),
    )
    qs = QuerySet("irc1", "independent", Path("x.jsonl"), queries)
    text = long_tables("irc1", score_set(qs, {"product": {"a": [("r:1",)], "b": [("r:9",), ("r:2",)]}}))
    assert "| product | all | 2 | 0.50 | 1.00 | 1.00 | 0.75 |" in text
    assert "| product | paraphrase | 1 | 0.00 | 1.00 | 1.00 | 0.50 |" in text
    assert "| product | narrative | 1 | 0.00 | 1.00 | 1.00 | 0.50 |" in text


def test_the_pool_scores_a_windows_messages_by_the_text_it_is_given(tmp_path):
    from bench.eval import POOL_SYSTEMS, pool_records
    from bench.tune import VectorCache

    messages = [CorpusMessage("#r", f"r:{i}", f"n{i}", i, f"message {i}") for i in range(20)]
    embedder = FakeEmbedder()
    outside = LabelledQuery("q1", "paraphrase", "message 3", ("r:3",), "tune", "keywords")
    sets = [QuerySet("irc1", "independent", Path("i.jsonl"), (outside,))]
    runs = {system: {"q1": [tuple(f"r:{j}" for j in range(10))]} for system in POOL_SYSTEMS}
    cache = VectorCache(embedder, tmp_path / "v")
    pool_records(
        sets,
        runs,
        messages,
        embedder,
        cache,
        {"q1": embedder.embed(["message 3"])[0]},
        text_of=lambda m: f"{m.sender}: {m.body}",
    )
    assert "n4: message 4" in embedder.embedded and "message 4" not in embedder.embedded
