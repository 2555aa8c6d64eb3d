"""The eval's query sets, textbook baseline, judging pool and relevance merge, on hand-made cases:
which file a set comes from, how splits, kinds and styles are scored and reported, what the pool
holds and hides, and that judged ids land in the query file and nowhere else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.corpus import CorpusMessage
from bench.pool import (
    MergeError,
    judge_record,
    main as pool_main,
    merge,
    pool,
    top_messages,
    window_messages,
    with_neighbours,
)
from bench.querysets import (
    QueryFileError,
    QuerySet,
    check_relevant,
    load_query_file,
    markdown_tables,
    name_value_lines,
    query_sets,
    score_set,
)
from tests.fakes import FakeEmbedder


def _q(qid, kind="exact", split=None, style="keywords", relevant=("r/0:1",), text="some words"):
    raw = {"id": qid, "style": style, "kind": kind, "text": text, "relevant": list(relevant), "sample": 1}
    if split:
        raw["split"] = split
    return raw


def _write(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


OLD_LINE = {"id": "irc-1", "kind": "who", "text": "t", "relevant": ["r/0:1"], "split": "dev"}


def test_layout_old_set_belongs_to_irc1_and_each_corpus_folder_holds_its_own_sets(tmp_path):
    _write(tmp_path / "irc.jsonl", [OLD_LINE])
    _write(tmp_path / "irc1" / "independent.jsonl", [_q("a1", split="tune")])
    _write(tmp_path / "irc2" / "independent.jsonl", [_q("b1", split="heldout"), _q("b2")])
    irc1 = query_sets("irc1", tmp_path)
    irc2 = query_sets("irc2", tmp_path)
    assert [(s.corpus, s.name, len(s.queries)) for s in irc1] == [("irc1", "old", 1), ("irc1", "independent", 1)]
    assert [(s.corpus, s.name, len(s.queries)) for s in irc2] == [("irc2", "independent", 2)]
    assert irc1[0].groups() == ("dev", "all")
    # a line not yet split counts only under "all"
    assert irc2[0].groups() == ("heldout", "all")
    assert [q.id for q in irc2[0].in_group("all")] == ["b1", "b2"]


@pytest.mark.parametrize(
    "row, message",
    [
        ({**_q("x"), "kind": "vague"}, "field 'kind' must be one of exact, paraphrase, mixed"),
        ({**_q("x"), "split": "dev"}, "field 'split' must be one of tune, heldout"),
        ({**_q("x"), "relevant": []}, "field 'relevant' must list at least one message id"),
        ({k: v for k, v in _q("x").items() if k != "style"}, "missing field 'style'"),
        ({**_q("x"), "text": "  "}, "field 'text' is not a non-empty str"),
    ],
)
def test_a_bad_query_line_is_named_by_file_line_query_and_field(tmp_path, row, message):
    path = _write(tmp_path / "irc2" / "independent.jsonl", [_q("ok"), row])
    with pytest.raises(QueryFileError) as error:
        load_query_file(path, old=False)
    assert str(error.value).startswith(f"{path}:2 (query x): {message}")


def test_duplicate_ids_and_unknown_messages_are_refused(tmp_path):
    path = _write(tmp_path / "a.jsonl", [_q("x"), _q("x")])
    with pytest.raises(QueryFileError, match="query id 'x' appears twice"):
        load_query_file(path, old=False)
    qs = QuerySet("irc2", "independent", path, tuple(load_query_file(_write(path, [_q("y")]), old=False)))
    with pytest.raises(QueryFileError, match="names 'r/0:1', not a message of irc2"):
        check_relevant([qs], {"r/0:2"})
    check_relevant([qs], {"r/0:1"})
    # the old set's split is required and stays dev/heldout
    with pytest.raises(QueryFileError, match="field 'split' must be one of dev, heldout"):
        load_query_file(_write(tmp_path / "irc.jsonl", [{**OLD_LINE, "split": "tune"}]), old=True)


def _scored_set(tmp_path):
    rows = [
        _q("t1", kind="exact", split="tune", style="keywords", relevant=["m1"]),
        _q("t2", kind="paraphrase", split="tune", style="narrative", relevant=["m2", "m9"]),
        _q("h1", kind="paraphrase", split="heldout", style="narrative", relevant=["m3"]),
        _q("h2", kind="mixed", split="heldout", style="question", relevant=["m4"]),
    ]
    path = _write(tmp_path / "irc2" / "independent.jsonl", rows)
    qs = QuerySet("irc2", "independent", path, tuple(load_query_file(path, old=False)))
    runs = {
        # t1 first, t2 second (m9 is relevant too), h1 sixth, h2 missed
        "product": {
            "t1": [("m1", "x")],
            "t2": [("x",), ("m9",)],
            "h1": [("a",), ("b",), ("c",), ("d",), ("e",), ("m3",)],
            "h2": [("x",)],
        },
        "dense": {"t1": [], "t2": [("m2",)], "h1": [("m3",)], "h2": [("m4",)]},
    }
    return qs, score_set(qs, runs)


def test_tune_and_heldout_are_scored_apart_per_kind_and_per_style(tmp_path):
    _, scored = _scored_set(tmp_path)
    assert list(scored) == ["tune", "heldout", "all"]
    tune = scored["tune"]["product"]
    assert tune["kind"]["all"].n == 2 and tune["kind"]["all"].r1 == 0.5 and tune["kind"]["all"].r5 == 1.0
    assert tune["kind"]["paraphrase"].mrr10 == 0.5
    assert set(tune["kind"]) == {"exact", "paraphrase", "all"}
    held = scored["heldout"]["product"]
    assert held["kind"]["paraphrase"].r5 == 0.0 and held["kind"]["paraphrase"].r10 == 1.0
    assert held["kind"]["mixed"].r10 == 0.0
    assert held["style"]["narrative"].n == 1 and held["style"]["question"].r5 == 0.0
    assert scored["all"]["dense"]["style"]["narrative"].r1 == 1.0
    assert scored["all"]["dense"]["kind"]["all"].r1 == 0.75


def test_report_lines_and_markdown_name_corpus_set_split_system_facet(tmp_path):
    _, scored = _scored_set(tmp_path)
    lines = name_value_lines("irc2.independent", scored)
    assert "irc2.independent.tune.product.kind.paraphrase.recall@5: 1.0" in lines
    assert "irc2.independent.heldout.product.style.narrative.recall@10: 1.0" in lines
    assert "irc2.independent.heldout.product.kind.all.n: 2" in lines
    md = markdown_tables("irc2, independent set", scored)
    assert "#### irc2, independent set, heldout (2 queries; recall@5 per kind)" in md
    assert "| system | recall@5 all | mixed | paraphrase | recall@1 | MRR@10 |" in md
    assert "| product | 0.00 | 0.00 | 0.00 | 0.00 | 0.08 |" in md  # h1 at rank 6: MRR (1/6 + 0) / 2
    assert "| system | narrative (1) | question (1) |" in md


def test_a_window_hit_stands_for_its_best_dense_message_and_those_sharing_a_term():
    dense = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.3}.__getitem__
    shares = {"a": True, "b": False, "c": False, "d": True}.__getitem__
    assert window_messages(["a", "b", "c", "d"], shares, dense) == ["b", "d", "a"]
    assert window_messages(["c"], shares, dense) == ["c"]
    ranking = [("a", "b", "c", "d"), ("d", "e"), ("f",)]
    dense2 = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.3, "e": 0.8, "f": 0.0}.__getitem__
    shares2 = {"a": True, "b": False, "c": False, "d": True, "e": False, "f": False}.__getitem__
    # window 2: e is its best dense message, d is already in; a single message stands for itself
    assert top_messages(ranking, shares2, dense2) == ["b", "d", "a", "e", "f"]
    assert top_messages(ranking, lambda k: True, dense2, limit=2) == ["b", "c"]


def test_the_pool_interleaves_systems_by_rank_skips_known_answers_and_is_capped():
    per = {"product": ["p1", "x", "p3"], "bm25": ["b1", "b2"], "dense": ["x", "d2"]}
    # name order bm25, dense, product; rank 1 of each first
    assert pool(per) == ["b1", "x", "p1", "b2", "d2", "p3"]
    assert pool(per, exclude=["x"]) == ["b1", "p1", "b2", "d2", "p3"]
    assert pool(per, cap=4) == ["b1", "x", "p1", "b2"]
    many = {f"s{i}": [f"m{i}-{r}" for r in range(10)] for i in range(4)}
    assert len(pool(many)) == 25


def _room(name, n, start=0):
    return [
        CorpusMessage(f"#{name}", f"{name}:{i}", f"nick{i % 3}", 1000 * i, f"body {name} {i}") for i in range(start, n)
    ]


def test_the_judge_sees_candidates_with_neighbours_in_their_room_shuffled_and_unattributed():
    messages = _room("r", 6) + _room("s", 3)
    position = {m.key: i for i, m in enumerate(messages)}
    first = with_neighbours("r:0", messages, position)
    assert first["before"] == [] and [m["id"] for m in first["after"]] == ["r:1", "r:2"]
    last = with_neighbours("r:5", messages, position)
    assert [m["id"] for m in last["before"]] == ["r:3", "r:4"] and last["after"] == []  # s:0 is another room
    query = {"id": "q1", "kind": "mixed", "style": "who", "text": "t", "relevant": ["r:2"]}
    candidates = ["r:0", "r:1", "r:3", "r:4", "s:1"]
    record = judge_record(query, candidates, messages, position)
    assert sorted(c["id"] for c in record["candidates"]) == sorted(candidates)
    assert record["answer"] == [{"id": "r:2", "sender": "nick2", "body": "body r 2"}]
    assert record == judge_record(query, candidates, messages, position)  # the same order on a rerun
    orders = {
        tuple(c["id"] for c in judge_record({**query, "id": f"q{i}"}, candidates, messages, position)["candidates"])
        for i in range(8)
    }
    assert len(orders) > 1  # not the systems' order
    text = json.dumps(record)
    assert not any(name in text for name in ("product", "textbook", "dense", "bm25", "system"))


def test_merge_adds_judged_ids_once_keeps_everything_else_and_replaces_the_file(tmp_path):
    target = _write(tmp_path / "independent.jsonl", [_q("a", split="tune", relevant=["r:1"]), _q("b", split="heldout")])
    os.chmod(target, 0o640)
    judged = _write(
        tmp_path / "judged.jsonl", [{"id": "a", "relevant_add": ["r:5", "r:1"]}, {"id": "a", "relevant_add": ["r:6"]}]
    )
    inode = target.stat().st_ino
    assert merge([judged], [target], known={"r:1", "r:5", "r:6"}) == {str(target): 2}
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert rows[0] == {**_q("a", split="tune"), "relevant": ["r:1", "r:5", "r:6"]}
    assert rows[1] == _q("b", split="heldout")
    assert target.stat().st_ino != inode and target.stat().st_mode & 0o777 == 0o640
    assert list(tmp_path.glob(".independent.jsonl.*")) == []


def test_merge_refuses_unknown_queries_and_ids_and_writes_nothing(tmp_path, capsys):
    target = _write(tmp_path / "independent.jsonl", [_q("a")])
    before = target.read_text()
    unknown_query = _write(tmp_path / "j1.jsonl", [{"id": "zz", "relevant_add": ["r/0:1"]}])
    with pytest.raises(MergeError, match="judged query 'zz' is in none of"):
        merge([unknown_query], [target])
    with pytest.raises(MergeError, match="relevant_add names 'nope'"):
        merge([_write(tmp_path / "j2.jsonl", [{"id": "a", "relevant_add": ["nope"]}])], [target], known={"r/0:1"})
    bad = _write(tmp_path / "j3.jsonl", [{"id": "a", "relevant_add": "r/0:1"}])
    assert pool_main(["merge", str(bad), "--into", str(target)]) == 2
    assert f"{bad}:1 (query a): field 'relevant_add' must be a list" in capsys.readouterr().err
    assert target.read_text() == before


def test_textbook_hybrid_windows_are_consecutive_per_room_and_within_1000_bytes(tmp_path):
    from bench.textbook import WINDOW_BYTES, TextbookHybrid
    from bench.tune import VectorCache

    long = [CorpusMessage("#r", f"r:{i}", "alice", 1000 * i, f"line {i} " + "pad " * 40) for i in range(30)]
    long.append(CorpusMessage("#r", "r:30", "bob", 10**12, "the zebra crossing is closed after midnight"))
    messages = long + [CorpusMessage("#s", "s:0", "carol", 5, "a zebra in the other room")]
    embedder = FakeEmbedder()
    hybrid = TextbookHybrid(messages, VectorCache(embedder, tmp_path / "vectors"))
    flat = [k for w in hybrid.windows for k in w.keys]
    assert flat == [m.key for m in messages]  # every message once, in room order, no overlap
    assert all(len(w.text.encode()) <= WINDOW_BYTES for w in hybrid.windows)
    assert all(len({k.split(":")[0] for k in w.keys}) == 1 for w in hybrid.windows)
    # a day's gap does not cut a window: textbook windows have no time bound
    assert any("r:29" in w.keys and "r:30" in w.keys for w in hybrid.windows)
    assert hybrid.cost()["texts_embedded"] == len(hybrid.windows)
    query = "zebra crossing midnight"
    top = hybrid.rank(query, embedder.embed([query])[0], top_k=2)
    assert "r:30" in top[0]
    # a second build embeds nothing: the vectors are cached by text
    embedder.embedded.clear()
    again = TextbookHybrid(messages, VectorCache(embedder, tmp_path / "vectors"))
    assert embedder.embedded == [] and again.cost()["embed_seconds"] is None and again.cost()["embedded_now"] == 0
    assert hybrid.cost()["embedded_now"] == len(hybrid.windows) and hybrid.cost()["embed_seconds"] is not None


def test_eval_pools_every_outside_query_from_the_four_systems_hits_and_never_the_old_set(tmp_path):
    from bench.eval import POOL_SYSTEMS, pool_records
    from bench.querysets import LabelledQuery
    from bench.tune import VectorCache

    messages = [CorpusMessage("#r", f"r:{i}", f"n{i}", i, f"message {i} about topic{i % 7}") for i in range(200)]
    embedder = FakeEmbedder()
    outside = LabelledQuery("q1", "paraphrase", "topic3 message", ("r:3",), "tune", "keywords")
    old = QuerySet("irc1", "old", Path("irc.jsonl"), (LabelledQuery("o1", "who", "x", ("r:1",), "dev"),))
    sets = [old, QuerySet("irc1", "independent", Path("i.jsonl"), (outside,))]
    windows = [tuple(f"r:{j}" for j in range(i, i + 10)) for i in range(0, 200, 10)]
    runs = {system: {"q1": windows[n : n + 10], "o1": windows[:3]} for n, system in enumerate(POOL_SYSTEMS)}
    runs["synapse"] = {"q1": [("r:199",)]}
    vectors = {"q1": embedder.embed([outside.text])[0]}
    records = pool_records(sets, runs, messages, embedder, VectorCache(embedder, tmp_path / "v"), vectors)
    assert [r["id"] for r in records] == ["q1"]
    ids = [c["id"] for c in records[0]["candidates"]]
    assert 10 <= len(ids) <= 25 and len(set(ids)) == len(ids)
    assert "r:3" not in ids and records[0]["answer"][0]["id"] == "r:3"
    hit = {k for system in POOL_SYSTEMS for w in runs[system]["q1"] for k in w}
    assert set(ids) <= hit and "r:199" not in ids  # Synapse is not pooled
    # every pooled system contributes its top messages
    for system in POOL_SYSTEMS:
        assert set(ids) & {k for w in runs[system]["q1"][:2] for k in w}


def test_report_writes_both_corpora_sets_and_the_ingest_cost_table(tmp_path):
    import io

    from bench.eval import report

    qs, scored = _scored_set(tmp_path)
    result = {
        "messages": 14618,
        "seed": {"seconds": 900.0, "from_cache": True},
        "cost": {
            "product": {"seconds": 120.5, "wall_s": 130.0, "texts_embedded": 15000, "index_bytes": 52_000_000},
            "textbook": {
                "texts_embedded": 1100,
                "embed_seconds": None,
                "vector_bytes": 1_689_600,
                "sparse_entries": 90000,
            },
        },
        "scores": {"independent": scored},
    }
    out = io.StringIO()
    markdown = report({"irc2": result}, {"irc2": [qs]}, out=out)
    printed = out.getvalue()
    assert "### irc2 (14618 messages)" in markdown and "#### irc2, independent set, tune" in markdown
    assert (
        "| irc2 | product (dense and bm25 legs: the same index) | 15000 | 120.5 s (wall 130.0 s) | 52.0 MB |"
        in markdown
    )
    assert "| irc2 | textbook hybrid | 1100 | cached | 1.7 MB of vectors + 90000 postings |" in markdown
    assert "irc2.independent.tune.product.kind.all.recall@5: 1.0" in printed
    assert "irc2.ingest.product.index_bytes: 52000000" in printed
    assert "irc2.seed.seconds: 900.0" in printed


def test_index_size_counts_blocks_on_disk_not_the_apparent_size_of_sparse_files(tmp_path):
    from bench.eval import disk_bytes

    (tmp_path / "sub").mkdir()
    with open(tmp_path / "sub" / "sparse.bin", "wb") as handle:
        handle.truncate(50_000_000)  # preallocated-looking, nothing written
    (tmp_path / "data.bin").write_bytes(b"x" * 100_000)
    assert 100_000 <= disk_bytes(tmp_path) < 1_000_000
