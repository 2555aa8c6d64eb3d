"""Retrieval metrics for known-item queries: recall@k, MRR@k, and their means per query kind.

Owns: what counts as a hit being relevant (it holds at least one of the query's relevant
messages), ``recall_at``, ``reciprocal_rank``, ``summarise`` (per kind and overall), and the
table and ``name: value`` lines the eval prints.

Must not: know how a ranking was produced (product, single leg or homeserver); a ranking here is
a list of hits, each the set of message keys it holds, best first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

KS = (1, 5, 10)


def first_relevant_rank(ranking: Sequence[Iterable[str]], relevant: Iterable[str]) -> int | None:
    """1-based rank of the first hit holding any relevant message; None when none does."""
    wanted = set(relevant)
    for rank, hit in enumerate(ranking, start=1):
        if wanted.intersection(hit):
            return rank
    return None


def recall_at(rank: int | None, k: int) -> float:
    """Known-item recall@k: 1 when the item is found within the first k hits."""
    return 1.0 if rank is not None and rank <= k else 0.0


def reciprocal_rank(rank: int | None, k: int = 10) -> float:
    """1/rank when the item is within the first k hits, else 0 (MRR@k averages this)."""
    return 1.0 / rank if rank is not None and rank <= k else 0.0


@dataclass(frozen=True, slots=True)
class Scores:
    n: int
    r1: float
    r5: float
    r10: float
    mrr10: float

    def as_dict(self) -> dict[str, float]:
        return {"n": self.n, "recall@1": self.r1, "recall@5": self.r5, "recall@10": self.r10, "mrr@10": self.mrr10}


def score(ranks: Sequence[int | None]) -> Scores:
    n = len(ranks)
    if n == 0:
        return Scores(0, 0.0, 0.0, 0.0, 0.0)
    return Scores(
        n=n,
        r1=sum(recall_at(r, 1) for r in ranks) / n,
        r5=sum(recall_at(r, 5) for r in ranks) / n,
        r10=sum(recall_at(r, 10) for r in ranks) / n,
        mrr10=sum(reciprocal_rank(r, 10) for r in ranks) / n,
    )


def summarise(ranks: dict[str, int | None], kinds: dict[str, str]) -> dict[str, Scores]:
    """``ranks`` and ``kinds`` keyed by query id -> scores per kind and under ``"all"``."""
    by_kind: dict[str, list[int | None]] = {}
    for qid, rank in ranks.items():
        by_kind.setdefault(kinds[qid], []).append(rank)
    out = {kind: score(values) for kind, values in sorted(by_kind.items())}
    out["all"] = score(list(ranks.values()))
    return out


def rrf(rankings: Sequence[Sequence[str]], k: int = 60) -> list[str]:
    """Reciprocal rank fusion of ranked id lists: ``sum 1/(k + rank)``, 1-based; ties by first
    appearance. The reader's cross-text fusion (``daemon.reader.search.fuse``) is the product's;
    this one is for the bench's single-leg baselines and its tests pin the formula."""
    scores: dict[str, float] = {}
    order: dict[str, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            order.setdefault(item, len(order))
    return sorted(scores, key=lambda item: (-scores[item], order[item]))


def table(rows: dict[str, dict[str, Scores]], metric: str = "recall@5") -> str:
    """A markdown table: one row per system, one column per kind, of ``metric``; plus overall
    recall@1 and MRR@10."""
    kinds = sorted({k for per in rows.values() for k in per if k != "all"})
    head = ["system", f"{metric} all", *kinds, "recall@1 all", "recall@10 all", "MRR@10"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, per in rows.items():
        cells = [system, f"{per['all'].as_dict()[metric]:.2f}"]
        cells += [f"{per[k].as_dict()[metric]:.2f}" if k in per else "-" for k in kinds]
        cells += [f"{per['all'].r1:.2f}", f"{per['all'].r10:.2f}", f"{per['all'].mrr10:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def name_value_lines(prefix: str, per: dict[str, Scores]) -> list[str]:
    lines = []
    for kind, s in per.items():
        for name, value in s.as_dict().items():
            lines.append(f"{prefix}.{kind}.{name}: {value if name == 'n' else round(value, 3)}")
    return lines
