"""The eval's metric code against hand-computed cases: recall@k, MRR@10, per-kind means, RRF."""

from __future__ import annotations

import pytest

from bench.metrics import first_relevant_rank, recall_at, reciprocal_rank, rrf, score, summarise


def test_first_relevant_rank_finds_the_first_hit_holding_any_relevant_message():
    ranking = [{"a", "b"}, {"c"}, {"d", "x"}, {"x"}]
    assert first_relevant_rank(ranking, ["x"]) == 3
    assert first_relevant_rank(ranking, ["c", "x"]) == 2
    assert first_relevant_rank(ranking, ["zz"]) is None
    assert first_relevant_rank([], ["a"]) is None


@pytest.mark.parametrize(
    "rank, k, expected",
    [(1, 1, 1.0), (2, 1, 0.0), (5, 5, 1.0), (6, 5, 0.0), (None, 10, 0.0), (10, 10, 1.0)],
)
def test_recall_at(rank, k, expected):
    assert recall_at(rank, k) == expected


def test_reciprocal_rank_is_cut_at_k():
    assert reciprocal_rank(1) == 1.0
    assert reciprocal_rank(4) == 0.25
    assert reciprocal_rank(10) == 0.1
    assert reciprocal_rank(11) == 0.0
    assert reciprocal_rank(None) == 0.0


def test_score_by_hand():
    # ranks 1, 3, 7, none: r@1 = 1/4, r@5 = 2/4, r@10 = 3/4, MRR = (1 + 1/3 + 1/7 + 0) / 4
    s = score([1, 3, 7, None])
    assert (s.n, s.r1, s.r5, s.r10) == (4, 0.25, 0.5, 0.75)
    assert s.mrr10 == pytest.approx((1 + 1 / 3 + 1 / 7) / 4)
    assert score([]).n == 0


def test_summarise_per_kind_and_overall():
    ranks = {"q1": 1, "q2": None, "q3": 2, "q4": 6}
    kinds = {"q1": "exact", "q2": "exact", "q3": "paraphrase", "q4": "paraphrase"}
    out = summarise(ranks, kinds)
    assert out["exact"].r1 == 0.5 and out["exact"].r5 == 0.5
    assert out["paraphrase"].r1 == 0.0 and out["paraphrase"].r5 == 0.5 and out["paraphrase"].r10 == 1.0
    assert out["paraphrase"].mrr10 == pytest.approx((1 / 2 + 1 / 6) / 2)
    assert out["all"].n == 4 and out["all"].r5 == 0.5


def test_rrf_by_hand():
    # k=60: a = 1/61 + 1/62, b = 1/62 + 1/61, c = 1/63 -> a and b tie, a was seen first
    assert rrf([["a", "b", "c"], ["b", "a"]]) == ["a", "b", "c"]
    # d only in list 2 at rank 1 (1/61) beats e at rank 2 of list 1 (1/62)
    assert rrf([["x", "e"], ["d"]]) == ["x", "d", "e"]
    # with k=0: x = 1/1, y = 1/2 + 1/1 -> y first
    assert rrf([["x", "y"], ["y"]], k=0) == ["y", "x"]


def test_a_childs_peak_is_its_own_not_the_bench_processs_at_the_fork() -> None:
    # wait4's ru_maxrss keeps the parent's RSS at the fork: a refresher that peaked at ~420 MB read
    # 1,017 MB after the reader part had grown the bench process.
    import os
    import sys

    from bench.bench import rss_mb, run_measured

    ballast = bytearray(160 * 1024 * 1024)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # resident, not just reserved
    assert rss_mb(os.getpid())[0] > 150
    code, _, peak, _ = run_measured([sys.executable, "-c", "import time; time.sleep(0.3)"], dict(os.environ))
    assert code == 0 and 0 < peak < 80
    del ballast
