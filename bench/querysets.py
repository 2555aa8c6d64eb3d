"""Labelled query sets, per corpus, and how their results are grouped and scored.

Owns: the layout of ``bench/queries/`` and the checks on its files. ``irc.jsonl`` is the team's
own set on corpus ``irc1`` (named ``old``, split ``dev``/``heldout``, kept as written);
``<corpus>/<set>.jsonl`` is a set written for that corpus by someone outside the team (e.g.
``irc2/independent.jsonl``), each line ``{"id", "style", "kind", "text", "relevant", "sample"}``
plus a ``split`` (``tune``/``heldout``) assigned once; a line without one counts only under
``all``. Scoring groups each set by split and, within a split, by kind and by style.

Must not: run or know any system (a ranking is a list of hits, each the message keys it holds),
or rewrite a query file (``bench/pool.py merge`` does, for judged relevance).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from bench.corpus import CORPORA, REPO
from bench.metrics import Scores, first_relevant_rank, summarise

QUERY_DIR = REPO / "bench" / "queries"
OLD_SET_FILE = "irc.jsonl"
OLD_SET = "old"
OLD_CORPUS = "irc1"
# A set's splits in report order; "all" is every query of the set, split or not.
OLD_SPLITS = ("dev", "heldout")
NEW_SPLITS = ("tune", "heldout")
UNSPLIT = "unsplit"
NEW_KINDS = ("exact", "paraphrase", "mixed")


class QueryFileError(ValueError):
    """A query file that cannot be used as written; the message names the file, line and field."""


@dataclass(frozen=True)
class LabelledQuery:
    id: str
    kind: str
    text: str
    relevant: tuple[str, ...]
    split: str
    style: str = ""
    sample: int | None = None


@dataclass(frozen=True)
class QuerySet:
    corpus: str
    name: str
    path: Path
    queries: tuple[LabelledQuery, ...] = field(default=())

    @property
    def is_old(self) -> bool:
        return self.name == OLD_SET

    def groups(self) -> tuple[str, ...]:
        """The splits present, in report order, then ``all``."""
        order = OLD_SPLITS if self.is_old else NEW_SPLITS
        present = {q.split for q in self.queries}
        return (*(s for s in order if s in present), "all")

    def in_group(self, group: str) -> list[LabelledQuery]:
        return [q for q in self.queries if group == "all" or q.split == group]


def _field(raw: dict, name: str, where: str, kind: type | tuple[type, ...]):
    if name not in raw:
        raise QueryFileError(f"{where}: missing field {name!r}")
    value = raw[name]
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise QueryFileError(f"{where}: field {name!r} is not a non-empty {getattr(kind, '__name__', kind)}")
    return value


def parse_query(line: str, where: str, *, old: bool) -> LabelledQuery:
    """One line of a query file. ``old`` files must carry ``dev``/``heldout``; the others carry
    ``style`` and one of ``NEW_KINDS``, and a ``split`` of ``tune``/``heldout`` once assigned."""
    try:
        raw = json.loads(line)
    except ValueError as error:
        raise QueryFileError(f"{where}: not JSON ({error.msg})") from None
    if not isinstance(raw, dict):
        raise QueryFileError(f"{where}: not a JSON object")
    qid = _field(raw, "id", where, str)
    where = f"{where} (query {qid})"
    text = _field(raw, "text", where, str)
    kind = _field(raw, "kind", where, str)
    relevant = _field(raw, "relevant", where, list)
    if not relevant or not all(isinstance(r, str) and r for r in relevant):
        raise QueryFileError(f"{where}: field 'relevant' must list at least one message id")
    splits = OLD_SPLITS if old else NEW_SPLITS
    split = raw.get("split", None if old else UNSPLIT)
    if split not in splits and not (split == UNSPLIT and not old):
        raise QueryFileError(f"{where}: field 'split' must be one of {', '.join(splits)}, not {split!r}")
    style = ""
    if not old:
        style = _field(raw, "style", where, str)
        if kind not in NEW_KINDS:
            raise QueryFileError(f"{where}: field 'kind' must be one of {', '.join(NEW_KINDS)}, not {kind!r}")
    sample = raw.get("sample")
    return LabelledQuery(qid, kind, text, tuple(relevant), split, style, sample if isinstance(sample, int) else None)


def load_query_file(path: Path, *, old: bool) -> list[LabelledQuery]:
    out: list[LabelledQuery] = []
    seen: set[str] = set()
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        query = parse_query(line, f"{path}:{number}", old=old)
        if query.id in seen:
            raise QueryFileError(f"{path}:{number}: query id {query.id!r} appears twice")
        seen.add(query.id)
        out.append(query)
    return out


def query_sets(corpus: str, query_dir: Path = QUERY_DIR) -> list[QuerySet]:
    """The sets labelled on ``corpus``: the old set first (irc1 only), then ``<corpus>/*.jsonl``
    by name."""
    if corpus not in CORPORA:
        raise QueryFileError(f"unknown corpus {corpus!r} (known: {', '.join(CORPORA)})")
    out = []
    old = query_dir / OLD_SET_FILE
    if corpus == OLD_CORPUS and old.is_file():
        out.append(QuerySet(corpus, OLD_SET, old, tuple(load_query_file(old, old=True))))
    for path in sorted((query_dir / corpus).glob("*.jsonl")):
        if path.stem == OLD_SET:
            raise QueryFileError(f"{path}: the name {OLD_SET!r} is the team's own set (bench/queries/{OLD_SET_FILE})")
        out.append(QuerySet(corpus, path.stem, path, tuple(load_query_file(path, old=False))))
    return out


def check_relevant(sets: Iterable[QuerySet], keys: set[str]) -> None:
    """Every relevant id names a message of the set's corpus."""
    for qs in sets:
        for q in qs.queries:
            unknown = [r for r in q.relevant if r not in keys]
            if unknown:
                raise QueryFileError(
                    f"{qs.path} (query {q.id}): field 'relevant' names {unknown[0]!r}, not a message of {qs.corpus}"
                )


# Scores of one set: group (split or "all") -> system -> facet ("kind" or "style") -> value -> Scores
SetScores = dict[str, dict[str, dict[str, dict[str, Scores]]]]


def score_set(qs: QuerySet, runs: dict[str, dict[str, Sequence[Iterable[str]]]]) -> SetScores:
    """Per group and system: scores per kind (with ``all``) and, for sets that have styles, per style."""
    out: SetScores = {}
    for group in qs.groups():
        chosen = qs.in_group(group)
        out[group] = {}
        for system, rankings in runs.items():
            ranks = {q.id: first_relevant_rank(rankings.get(q.id, []), q.relevant) for q in chosen}
            facets = {"kind": summarise(ranks, {q.id: q.kind for q in chosen})}
            if any(q.style for q in chosen):
                by_style = summarise(ranks, {q.id: q.style or "-" for q in chosen})
                by_style.pop("all")
                facets["style"] = by_style
            out[group][system] = facets
    return out


def name_value_lines(prefix: str, scored: SetScores) -> list[str]:
    """``<prefix>.<group>.<system>.<facet>.<value>.<metric>: <number>``, e.g.
    ``irc2.independent.tune.product.kind.paraphrase.recall@5: 0.7``."""
    lines = []
    for group, systems in scored.items():
        for system, facets in systems.items():
            for facet, per in facets.items():
                for value, s in per.items():
                    for metric, number in s.as_dict().items():
                        shown = number if metric == "n" else round(number, 3)
                        lines.append(f"{prefix}.{group}.{system}.{facet}.{value}.{metric}: {shown}")
    return lines


def _cell(per: dict[str, Scores], key: str, metric: str) -> str:
    s = per.get(key)
    return f"{s.as_dict()[metric]:.2f}" if s is not None and s.n else "-"


def markdown_tables(title: str, scored: SetScores) -> str:
    """Per group: a table of recall@5 per kind with recall@1 and MRR@10 overall, one row per
    system; then, where the set has styles, recall@5 per style."""
    blocks = []
    for group, systems in scored.items():
        kinds = sorted({k for facets in systems.values() for k in facets["kind"] if k != "all"})
        n = next(iter(systems.values()))["kind"]["all"].n if systems else 0
        head = ["system", "recall@5 all", *kinds, "recall@1", "MRR@10"]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for system, facets in systems.items():
            per = facets["kind"]
            cells = [system, _cell(per, "all", "recall@5"), *(_cell(per, k, "recall@5") for k in kinds)]
            cells += [_cell(per, "all", "recall@1"), _cell(per, "all", "mrr@10")]
            rows.append("| " + " | ".join(cells) + " |")
        block = [f"#### {title}, {group} ({n} queries; recall@5 per kind)", "", *rows]
        styles = sorted({s for facets in systems.values() for s in facets.get("style", {})})
        if styles:
            counts = {s: next(iter(systems.values()))["style"][s].n for s in styles}
            head = ["system", *(f"{s} ({counts[s]})" for s in styles)]
            block += ["", f"recall@5 per style, {group}:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for system, facets in systems.items():
                cells = [system, *(_cell(facets["style"], s, "recall@5") for s in styles)]
                block.append("| " + " | ".join(cells) + " |")
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)


def long_tables(title: str, scored: SetScores) -> str:
    """Per group: recall@1/5/10 and MRR@10 of every system per kind (``all`` first) and, where
    the set has styles, per style; one row per system and kind or style."""
    metrics = ("recall@1", "recall@5", "recall@10", "mrr@10")
    blocks = []
    for group, systems in scored.items():
        for facet in ("kind", "style"):
            values = sorted(
                {v for facets in systems.values() for v in facets.get(facet, {})}, key=lambda v: (v != "all", v)
            )
            if not values:
                continue
            head = ["system", facet, "n", *metrics]
            rows = [
                f"#### {title}, {group}: every metric per {facet}",
                "",
                "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head),
            ]
            for value in values:
                for system, facets in systems.items():
                    s = facets.get(facet, {}).get(value)
                    if s is None:
                        continue
                    rows.append(
                        "| "
                        + " | ".join([system, value, str(s.n), *(_cell(facets[facet], value, m) for m in metrics)])
                        + " |"
                    )
            blocks.append("\n".join(rows))
    return "\n\n".join(blocks)
