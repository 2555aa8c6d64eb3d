"""The tuning harness's fusion pieces against hand-computed cases, and its min-max scaling against
the product's (``daemon.index.queries.fuse_legs``), so a dev figure measures what the index ranks."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bench import tune
from bench.corpus import CorpusMessage
from daemon.index.queries import fuse_legs


def test_minmax_scaling_is_the_products_fusion_of_one_leg():
    scores = np.array([9.0, 7.5, 4.0, 1.0])
    product = fuse_legs([("lexical", [(str(i), s) for i, s in enumerate(scores)])], limit=10, weights={"lexical": 1.0})
    assert tune.scale_leg(scores, "minmax").tolist() == pytest.approx([s for _, s, _ in product])


def test_other_scalings_keep_a_leading_gap_and_start_at_zero():
    scores = np.array([10.0, 5.0, 4.0])
    assert tune.scale_leg(scores, "top").tolist() == pytest.approx([1.0, 0.5, 0.4])
    z = tune.scale_leg(scores, "z")
    assert z[-1] == pytest.approx(0.0) and z[0] > z[1] > z[2]


def _corpus(bodies: list[tuple[str, str, int]]) -> SimpleNamespace:
    messages = [CorpusMessage("#r", f"r:{i}", sender, ts, body) for i, (sender, body, ts) in enumerate(bodies)]
    return SimpleNamespace(messages=messages, names={m.sender: m.sender for m in messages})


def test_soft_maxsim_pools_a_windows_lines():
    corpus = _corpus([("a", "x", 1), ("b", "y", 2), ("c", "z", 3)])
    windows = [tune.Unit("#r", ("r:0", "r:1"), ""), tune.Unit("#r", ("r:2",), "")]
    pool = tune.WindowPool(corpus, windows)
    cosines = np.array([0.5, 0.8, 0.7])
    assert pool.pool(cosines, "second:0.5").tolist() == pytest.approx([0.8 + 0.25, 0.7])
    soft = pool.pool(cosines, "lse:0.001")
    assert soft.tolist() == pytest.approx([0.8, 0.7], abs=1e-3)  # a small temperature is the max


def test_a_repeated_lines_first_posting_moves_above_the_later_one():
    corpus = _corpus(
        [
            ("t", "SDL error: no GLX visual", 100),
            ("u", "unrelated", 150),
            ("t", "sdl error:  no glx visual (again)", 900),
        ]
    )
    windows = [tune.Unit("#r", ("r:0",), ""), tune.Unit("#r", ("r:1",), ""), tune.Unit("#r", ("r:2",), "")]
    best = [corpus.messages[0], corpus.messages[1], corpus.messages[2]]
    fused = np.array([1.2, 1.0, 1.5])
    out = tune.first_posting_first(corpus, windows, best, fused)
    assert list(np.argsort(-out, kind="stable")) == [0, 2, 1]
    other_room = [tune.Unit("#other", ("r:0",), ""), windows[1], windows[2]]
    assert tune.first_posting_first(corpus, other_room, best, fused).tolist() == fused.tolist()


def test_named_sender_reads_what_did_x_say_about(monkeypatch):
    monkeypatch.setattr(tune, "_LOCALPARTS", {"koopajah", "timebox"})
    assert tune.named_sender("what did koopajah say about the webhook") == ("koopajah", "the webhook")
    assert tune.named_sender("what did timebox tell muyassarov about the API keys") == ("timebox", "the API keys")
    assert tune.named_sender("what did nobody say about it") is None
    assert tune.sender_line("what did Koopajah say about refunds") == "koopajah: refunds"
