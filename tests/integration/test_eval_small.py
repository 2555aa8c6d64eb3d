"""A small retrieval eval in `make test`: real IRC chat (a few hundred messages of the
irc-disentanglement corpus, original senders and timestamps) in the session's real Synapse, the
real refresher and reader, and 20 labelled queries through `huginn-chat search --json`.

It fails when quality drops below a floor set from measurement (see FLOOR_*): a change that
breaks windows, a leg, fusion or the lexical analysis shows here before `make eval` is run.
Figures, not timings: speed lives in bench/.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bench.corpus import DEFAULT_CORPUS, load_messages
from bench.eval import LabelledQuery, load_queries, product_env, refresh, run_product
from bench.metrics import first_relevant_rank, score
from bench.reader_process import ReaderProcess
from bench.seed import Seeded, seed

pytestmark = pytest.mark.synapse

# Two contiguous stretches: #stripe/0 lines 300..500 and #rust/0 lines 80..240 (~360 messages).
SPANS = {"stripe/0": (300, 500), "rust/0": (80, 240)}

# Measured on this subset with 18 queries: recall@5 0.94, recall@1 0.78, MRR@10 0.84 with a
# context row per answering message (chunker.context; 665 texts embedded). Without context rows
# it was 0.94 / 0.83 / 0.87 (360 texts): the rows won paraphrases on both outside query sets and
# cost first places on the team's own short queries (one here, five of 119 on its dev half;
# docs/quality.md). With the legs weighted by what each query text looks like
# (daemon.reader.search.leg_weights). Equal weights gave 1.00 / 0.78 / 0.86 before context rows:
# the language-heavy weights win a first place and lose "when did we conclude you can only cancel
# a PaymentIntent stuck needing authentication" from the top 5 (on the full dev set that query is
# missed either way; bench/results.md). One vector per window gave 1.00 / 0.72 / 0.82, the
# per-text RRF before that 1.00 / 0.67 / 0.81, the BM25 leg switched off 0.94 / 0.61 / 0.74. The
# floors sit just under today's figures: one more query lost from the top 5 fails, so does one
# query lost from first place, and so does more than one slipping from first to second.
FLOOR_RECALL_AT_5 = 0.94
FLOOR_RECALL_AT_1 = 0.77
FLOOR_MRR_AT_10 = 0.81

EXTRA = [
    ("paraphrase", "capture what a child process prints while it is still running", "rust/0:227"),
    ("mixed", "fragment specifier for a tuple index in a macro rule", "rust/0:161"),
    ("mixed", "default payment method for a customer's subscriptions and invoices", "stripe/0:359"),
    ("exact", "requires_confirmation requires_authentication", "stripe/0:355"),
    ("paraphrase", "why follow a pointer and then borrow the value again", "rust/0:207"),
    ("exact", "text_io", "rust/0:88"),
]


def _in_subset(key: str) -> bool:
    room, line = key.rsplit(":", 1)
    span = SPANS.get(room)
    return span is not None and span[0] <= int(line) <= span[1]


def subset_queries() -> list[LabelledQuery]:
    chosen = [q for q in load_queries() if all(_in_subset(k) for k in q.relevant)]
    chosen += [LabelledQuery(f"small-{i}", kind, text, (key,), "dev") for i, (kind, text, key) in enumerate(EXTRA)]
    return chosen


@pytest.mark.skipif(not (DEFAULT_CORPUS / "messages.jsonl").is_file(), reason="eval corpus not present")
def test_small_eval_stays_above_its_floor(synapse) -> None:
    messages = [m for m in load_messages() if _in_subset(m.key)]
    queries = subset_queries()
    assert 300 <= len(messages) <= 500 and len(queries) >= 18
    record = seed(synapse, messages, log=lambda _: None)
    seeded = Seeded(
        server=synapse,
        service_token=record["service_token"],
        aliases=record["aliases"],
        room_ids=record["room_ids"],
        event_ids=record["event_ids"],
        seed_seconds=0,
        from_cache=False,
    )
    # Not tmp_path: the reader's socket lives here, and a socket path has ~108 bytes. Where the
    # test temp root is in memory (tests/conftest.py), so is this: the refresh's Edge commits
    # fsync every file, most of its time on a disk.
    base = Path(tempfile.mkdtemp(prefix="huginn-small-eval-", dir=os.environ.get("PYTEST_DEBUG_TEMPROOT")))
    try:
        env = product_env(base, seeded, {})
        cost = refresh(env, lambda _: None)
        assert cost["texts_embedded"] > 0
        with ReaderProcess(env, base / "reader.log", ready_s=300):
            runs = run_product(queries, env, seeded.key_of_event)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ranks = {q.id: first_relevant_rank(runs[q.id], q.relevant) for q in queries}
    figures = score(list(ranks.values()))
    missed = sorted(q.text for q in queries if ranks[q.id] is None or ranks[q.id] > 5)
    detail = json.dumps(
        {
            "recall@5": figures.r5,
            "recall@1": figures.r1,
            "mrr@10": figures.mrr10,
            "texts_embedded": cost["texts_embedded"],
            "missed@5": missed,
        }
    )
    print(f"small eval: {detail}")  # shown with -s / -rP: the figures the floors were set from
    assert figures.r5 >= FLOOR_RECALL_AT_5, detail
    assert figures.r1 >= FLOOR_RECALL_AT_1, detail
    assert figures.mrr10 >= FLOOR_MRR_AT_10, detail
