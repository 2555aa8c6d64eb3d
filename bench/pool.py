"""Pooling for relevance judging, and folding the judgements back into the query files.

Owns: turning each system's ranked hits into its top ``PER_SYSTEM`` messages (a window hit stands
for its messages that share a term with the query plus its best message by dense score, best
dense first), the pool of a query (the systems' lists interleaved by rank, de-duplicated, the
writer's own relevant messages left out, at most ``POOL_CAP``), the judge's record of it (every
candidate with its sender, body and ``NEIGHBOURS`` messages either side, shuffled by a seed drawn
from the query id, never saying which system found it), and ``merge``:
``python -m bench.pool merge JUDGED.jsonl ... --into bench/queries/irc2/independent.jsonl``
adds each judged line's ``relevant_add`` (``{"id": qid, "relevant_add": [...]}``) to that
query's ``relevant``.

Must not: run a system (the eval hands it rankings, terms and dense scores), or rewrite a query
file other than through a temporary file and ``os.replace``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Sequence

from bench.corpus import CorpusMessage

PER_SYSTEM = 10
POOL_CAP = 25
NEIGHBOURS = 2


def window_messages(
    keys: Sequence[str], shares_term: Callable[[str], bool], dense_score: Callable[[str], float]
) -> list[str]:
    """The messages a window hit contributes: its best message by dense score, then those that
    share a term with the query, best dense first. A single message is itself."""
    if len(keys) <= 1:
        return list(keys)
    ordered = sorted(keys, key=lambda k: -dense_score(k))
    return [ordered[0], *(k for k in ordered[1:] if shares_term(k))]


def top_messages(
    ranking: Sequence[Sequence[str]],
    shares_term: Callable[[str], bool],
    dense_score: Callable[[str], float],
    limit: int = PER_SYSTEM,
) -> list[str]:
    """A system's first ``limit`` distinct messages, walking its hits in rank order."""
    out: list[str] = []
    for hit in ranking:
        for key in window_messages(hit, shares_term, dense_score):
            if key not in out:
                out.append(key)
                if len(out) == limit:
                    return out
    return out


def pool(per_system: dict[str, Sequence[str]], exclude: Iterable[str] = (), cap: int = POOL_CAP) -> list[str]:
    """Round-robin over the systems (in name order) by rank, so every system's best messages get in
    before any system's tail; de-duplicated; ``exclude`` left out; at most ``cap``."""
    skip = set(exclude)
    out: list[str] = []
    lists = [per_system[name] for name in sorted(per_system)]
    for rank in range(max((len(lst) for lst in lists), default=0)):
        for lst in lists:
            if rank < len(lst) and lst[rank] not in skip and lst[rank] not in out:
                out.append(lst[rank])
                if len(out) == cap:
                    return out
    return out


def _line(m: CorpusMessage) -> dict[str, str]:
    return {"id": m.key, "sender": m.sender, "body": m.body}


def with_neighbours(key: str, messages: Sequence[CorpusMessage], position: dict[str, int]) -> dict:
    """One candidate for the judge: the message and up to ``NEIGHBOURS`` of its room either side."""
    i = position[key]
    room = messages[i].room
    before = [m for m in messages[max(0, i - NEIGHBOURS) : i] if m.room == room]
    after = [m for m in messages[i + 1 : i + 1 + NEIGHBOURS] if m.room == room]
    return {**_line(messages[i]), "before": [_line(m) for m in before], "after": [_line(m) for m in after]}


def judge_record(
    query: dict, candidates: Sequence[str], messages: Sequence[CorpusMessage], position: dict[str, int]
) -> dict:
    """What the judge sees of one query: its text, kind and style, the writer's own relevant
    messages as ``answer``, and the candidates shuffled (seeded by the query id, so a rerun writes
    the same order)."""
    shuffled = list(candidates)
    random.Random(hashlib.sha256(query["id"].encode()).hexdigest()).shuffle(shuffled)
    return {
        "id": query["id"],
        "kind": query["kind"],
        "style": query.get("style", ""),
        "text": query["text"],
        "answer": [_line(messages[position[k]]) for k in query["relevant"] if k in position],
        "candidates": [with_neighbours(k, messages, position) for k in shuffled],
    }


def write_lines(path: Path, records: Iterable[dict]) -> None:
    """JSON lines through a temporary file beside ``path`` and ``os.replace``: a reader never sees a
    half-written file. The file keeps the mode an existing one had (0644 for a new one)."""
    path = Path(path)
    if path.is_symlink():
        raise OSError(f"{path}: is a symbolic link; not written through it")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class MergeError(ValueError):
    """A judged file that cannot be folded in; the message names the file, line and field."""


def read_judged(paths: Sequence[Path]) -> dict[str, list[str]]:
    """query id -> relevant ids to add, from every judged file in order."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                raw = json.loads(line)
            except ValueError as error:
                raise MergeError(f"{where}: not JSON ({error.msg})") from None
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
                raise MergeError(f"{where}: field 'id' missing or not a string")
            add = raw.get("relevant_add")
            if not isinstance(add, list) or not all(isinstance(k, str) and k for k in add):
                raise MergeError(f"{where} (query {raw['id']}): field 'relevant_add' must be a list of message ids")
            out.setdefault(raw["id"], []).extend(add)
    return out


def merge_lines(lines: Sequence[str], judged: dict[str, list[str]], known: set[str] | None = None) -> list[dict]:
    """The query file's records with each judged query's ``relevant`` extended (order kept, no
    duplicates). ``known``: the corpus's message ids, when given every added id must be one."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        add = judged.get(record.get("id"), [])
        if known is not None:
            unknown = [k for k in add if k not in known]
            if unknown:
                raise MergeError(
                    f"query {record['id']}: relevant_add names {unknown[0]!r}, not a message of the corpus"
                )
        record["relevant"] = list(dict.fromkeys([*record["relevant"], *add]))
        out.append(record)
    return out


def merge(judged_paths: Sequence[Path], into: Sequence[Path], known: set[str] | None = None) -> dict[str, int]:
    """Fold judged files into query files; every judged query id must be in one of them. Returns
    per query file how many ids were added. Nothing is written unless every file merges."""
    judged = read_judged(judged_paths)
    merged: dict[Path, list[dict]] = {}
    found: set[str] = set()
    added: dict[str, int] = {}
    for path in into:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        before = sum(len(json.loads(line)["relevant"]) for line in lines if line.strip())
        records = merge_lines(lines, judged, known)
        found.update(r["id"] for r in records)
        merged[Path(path)] = records
        added[str(path)] = sum(len(r["relevant"]) for r in records) - before
    missing = sorted(set(judged) - found)
    if missing:
        raise MergeError(f"judged query {missing[0]!r} is in none of {', '.join(str(p) for p in into)}")
    for path, records in merged.items():
        write_lines(path, records)
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool", description="fold judged relevance into query files")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="add each judged line's relevant_add to its query's relevant")
    m.add_argument("judged", type=Path, nargs="+", help='judged files: lines {"id": qid, "relevant_add": [...]}')
    m.add_argument("--into", type=Path, action="append", required=True, help="query file (repeatable)")
    m.add_argument("--corpus", help="check every added id against this corpus (irc1, irc2)")
    args = parser.parse_args(argv)
    known = None
    if args.corpus:
        from bench.corpus import CORPORA, corpus_dir, load_messages

        if args.corpus not in CORPORA:
            parser.error(f"--corpus: unknown corpus {args.corpus!r} (known: {', '.join(CORPORA)})")
        known = {m.key for m in load_messages(corpus_dir(args.corpus))}
    for path in [*args.judged, *args.into]:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    try:
        added = merge(args.judged, args.into, known)
    except (MergeError, ValueError, KeyError) as error:
        print(f"merge: {error}", file=sys.stderr)
        return 2
    for path, count in added.items():
        print(f"{path}: {count} relevant ids added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
