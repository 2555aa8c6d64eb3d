"""`make eval`: retrieval quality of huginn-chat on real chat, beside the homeserver's own search
and a textbook hybrid, on every corpus that has labelled queries.

Owns: the end-to-end run, corpus by corpus (``bench.corpus.CORPORA``). A throwaway Synapse
seeded with the corpus (``bench/seed.py``, cached by corpus hash), the real refresher
(``python -m daemon.cli.main refresh``) and reader (``serve``), every query of the corpus's sets
(``bench/querysets.py``: the team's old set on irc1, ``bench/queries/<corpus>/*.jsonl``) sent
through ``huginn-chat search --json``, and the same queries against

- the dense leg alone and the BM25 leg alone: computed in this process against the very
  generation the reader serves (a private copy opened with ``EdgeIndexReader.open_latest``, the
  same embedder and query vectors the reader makes), each leg ranking windows by itself;
- the textbook hybrid (``bench/textbook.py``): BM25 + dense over 1000-byte windows, plain RRF,
  with the product's embedding model;
- Synapse's ``/search`` (``order_by: rank``) as the service user, on the same rooms.

A hit counts when it holds a relevant message: a window that contains it, or for Synapse the
event itself. Prints tables and ``name: value`` lines, writes the tables and the ingest cost of
each configuration to ``.cache/eval/last.md`` and everything (every ranking) to
``.cache/eval/last.json``. ``--pool FILE`` also writes the judging pool of every query of the
outside sets (``bench/pool.py``).

Must not: tune anything (it measures what it is given), or leave Synapse or the reader running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.corpus import CORPORA, REPO, CorpusMessage, corpus_dir, load_messages
from bench.querysets import (
    OLD_SET_FILE,
    QUERY_DIR,
    LabelledQuery,
    QueryFileError,
    QuerySet,
    check_relevant,
    load_query_file,
    markdown_tables,
    name_value_lines,
    query_sets,
    score_set,
)
from bench.reader_process import ReaderProcess, cli as _cli
from bench.seed import CACHE_ROOT, Seeded, seeded_synapse

TOP_K = 10
SYSTEMS = ("product", "textbook", "dense", "bm25", "synapse")
# What the judging pool draws on: the systems a fact can be found by, Synapse's lexical search
# being a weaker copy of the BM25 leg.
POOL_SYSTEMS = ("product", "textbook", "dense", "bm25")

__all__ = ["LabelledQuery", "load_queries"]


def load_queries(paths: list[Path] | None = None) -> list[LabelledQuery]:
    """The team's old set on irc1 (or the files given, in its format): what the tuning harness reads."""
    out: list[LabelledQuery] = []
    for path in paths or [QUERY_DIR / OLD_SET_FILE]:
        out.extend(load_query_file(Path(path), old=True))
    return out


def _journal(stderr: str) -> list[dict[str, Any]]:
    out = []
    for raw in stderr.splitlines():
        if raw.startswith("{"):
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


def product_env(base: Path, seeded: Seeded, overrides: dict[str, str]) -> dict[str, str]:
    token_file = base / "matrix-token"
    token_file.write_text(seeded.service_token + "\n")
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    env.update(
        {
            "HUGINN_CHAT_HOMESERVER": seeded.server.base_url,
            "HUGINN_CHAT_TOKEN_FILE": str(token_file),
            "HUGINN_CHAT_ROOMS": json.dumps(sorted(seeded.aliases.values())),
            "HUGINN_CHAT_STATE_DIR": str(base / "state"),
            "HUGINN_CHAT_SOCKET": str(base / "reader.sock"),
        }
    )
    env.update(overrides)
    return env


def refresh(env: dict[str, str], log: Callable[[str], None]) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.run(
        ["nice", "-n", "5", *_cli("refresh")], env=env, cwd=REPO, capture_output=True, text=True, timeout=3600
    )
    wall = time.monotonic() - started
    lines = _journal(proc.stderr)
    summary = next((line for line in lines if line.get("event") == "run_finished"), {})
    if proc.returncode != 0 or not summary:
        raise RuntimeError(f"refresh exited {proc.returncode}: {proc.stderr[-2000:]}")
    log(
        f"refresh: {summary.get('texts_embedded')} texts embedded, {summary.get('windows_written')} windows, "
        f"{wall:.0f} s wall"
    )
    return {
        "wall_s": round(wall, 1),
        **{
            k: summary.get(k) for k in ("seconds", "texts_embedded", "windows_written", "events_read", "rooms_admitted")
        },
    }


def hit_keys(messages: list[dict[str, Any]], key_of_event: dict[str, str]) -> tuple[str, ...]:
    """A hit's message keys in the hit's order (the pool reads them in order; scoring as a set)."""
    return tuple(dict.fromkeys(key_of_event.get(m.get("event_id"), m.get("event_id")) for m in messages))


def run_product(queries: list[LabelledQuery], env: dict[str, str], key_of_event: dict[str, str]) -> dict[str, list]:
    client_env = {k: v for k, v in env.items() if not k.startswith("HUGINN_CHAT_")}
    client_env["HUGINN_CHAT_SOCKET"] = env["HUGINN_CHAT_SOCKET"]

    def one(query: LabelledQuery) -> list:
        proc = subprocess.run(
            _cli("search", "--json", "--top-k", str(TOP_K), "--", query.text),
            env=client_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"search {query.id} exited {proc.returncode}: {proc.stderr[-500:]}")
        result = json.loads(proc.stdout)
        return [hit_keys(hit["messages"], key_of_event) for hit in result["hits"]]

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((q.id for q in queries), pool.map(one, queries)))


def eval_settings(env: dict[str, str]):
    """The product's settings as the refresher and reader load them under ``env``."""
    from daemon.config import load_settings

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return load_settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def open_eval_embedder(env: dict[str, str], cache_dir: Path):
    """The product's settings and embedder as the refresher and reader see them under ``env``."""
    from daemon.wiring import open_embedder

    settings = eval_settings(env)
    return settings, open_embedder(settings, threads=2, cache_dir=cache_dir)


def run_legs(
    queries: list[LabelledQuery],
    env: dict[str, str],
    key_of_event: dict[str, str],
    embedder=None,
    vectors: Sequence[Sequence[float]] | None = None,
) -> dict[str, dict]:
    """Dense alone and BM25 alone over the generation the reader serves (a private copy)."""
    import qdrant_edge as qe

    from daemon.index import schema
    from daemon.index.edge import conditions, edge_sparse
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.wiring import edge_index_root

    private = Path(tempfile.mkdtemp(prefix="legs-", dir=Path(env["HUGINN_CHAT_STATE_DIR"]).parent))
    if embedder is None:
        settings, own = open_eval_embedder(env, private / "fastembed")
    else:
        settings, own = eval_settings(env), embedder
    reader = EdgeIndexReader.open_latest(edge_index_root(settings), private)
    out: dict[str, dict] = {"dense": {}, "bm25": {}}
    try:
        shard = reader._require_shard()
        vectors = vectors if vectors is not None else own.embed([q.text for q in queries])
        for query, vector in zip(queries, vectors):
            sparse = own.sparse_query(query.text)
            legs = {"dense": qe.Query.Nearest(list(vector), using=schema.DENSE)}
            if sparse.indices:
                legs["bm25"] = qe.Query.Nearest(edge_sparse(sparse), using=schema.SPARSE)
            for leg in ("dense", "bm25"):
                if leg not in legs:
                    out[leg][query.id] = []
                    continue
                hits = shard.query(
                    qe.QueryRequest(
                        limit=TOP_K,
                        query=legs[leg],
                        with_payload=True,
                        filter=qe.Filter(must=conditions([schema.IS_WINDOW])),
                    )
                )
                out[leg][query.id] = [hit_keys(h.payload.get("messages") or [], key_of_event) for h in hits]
    finally:
        reader.close()
        shutil.rmtree(private, ignore_errors=True)
    return out


def run_synapse(queries: list[LabelledQuery], seeded: Seeded) -> dict[str, list]:
    from devtools.synapse import Account, Actor

    actor = Actor(seeded.server.base_url, Account(f"@huginn-service:{seeded.server.server_name}", seeded.service_token))
    rooms = sorted(seeded.room_ids.values())
    # Synapse searches only the rooms its user is in. The refresher joins them; with --reuse no
    # refresher ran on this copy of the homeserver, so join here (a no-op when already joined).
    for room_id in rooms:
        actor.join(room_id)
    key_of_event = seeded.key_of_event
    out = {}
    for query in queries:
        body = {
            "search_categories": {
                "room_events": {
                    "search_term": query.text,
                    "order_by": "rank",
                    "filter": {"rooms": rooms, "limit": TOP_K},
                }
            }
        }
        try:
            answer = actor.call("POST", "/_matrix/client/v3/search", body)
            results = answer["search_categories"]["room_events"].get("results") or []
        except Exception:  # noqa: BLE001 - a query Synapse cannot parse finds nothing for its user
            results = []
        out[query.id] = [(key_of_event.get(r["result"]["event_id"], r["result"]["event_id"]),) for r in results[:TOP_K]]
    return out


def vector_cache_for(model: str, embedder):
    from bench.tune import CACHE, VectorCache

    # One cache per model: vectors of one model must never answer for another.
    return VectorCache(embedder, CACHE / ("vectors-" + re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")))


def run_textbook(queries: list[LabelledQuery], messages: list[CorpusMessage], cache, query_vectors):
    from bench.textbook import TextbookHybrid

    hybrid = TextbookHybrid(messages, cache)
    runs = {q.id: hybrid.rank(q.text, v, TOP_K) for q, v in zip(queries, query_vectors)}
    return runs, hybrid.cost()


def pool_records(
    sets: list[QuerySet],
    runs: dict[str, dict[str, list]],
    messages: list[CorpusMessage],
    embedder,
    cache,
    query_vectors: dict[str, Sequence[float]],
    text_of: Callable[[CorpusMessage], str] = lambda m: m.body,
) -> list[dict]:
    """The judging pool of every query of the outside sets (``bench/pool.py``): each pooled
    system's top messages, a window standing for its messages that share a BM25 term with the
    query plus its best one by dense score (of ``text_of`` the message: its body, or the line
    the product embeds)."""
    import numpy as np

    from bench.pool import judge_record, pool, top_messages

    position = {m.key: i for i, m in enumerate(messages)}
    outside = [q for qs in sets if not qs.is_old for q in qs.queries]
    needed = sorted(
        {k for q in outside for system in POOL_SYSTEMS for hit in runs[system].get(q.id, []) for k in hit}
        & set(position)
    )
    texts = [text_of(messages[position[k]]) for k in needed]
    bodies = [messages[position[k]].body for k in needed]
    matrix = np.asarray(cache.get(texts), dtype=np.float32) if bodies else np.zeros((0, 1), np.float32)
    row = {k: i for i, k in enumerate(needed)}
    terms = {k: set(sv.indices) for k, sv in zip(needed, embedder.sparse(bodies))}
    out = []
    for q in outside:
        qv = np.asarray(query_vectors[q.id], dtype=np.float32)
        dense = matrix @ qv if len(needed) else np.zeros(0)
        qterms = set(embedder.sparse_query(q.text).indices)

        def dense_score(key: str, dense=dense) -> float:
            return float(dense[row[key]]) if key in row else -1.0

        def shares_term(key: str, qterms=qterms) -> bool:
            return bool(terms.get(key, set()) & qterms)

        per_system = {
            system: top_messages([h for h in runs[system].get(q.id, []) if h], shares_term, dense_score)
            for system in POOL_SYSTEMS
        }
        per_system = {s: [k for k in keys if k in position] for s, keys in per_system.items()}
        candidates = pool(per_system, exclude=q.relevant)
        record = judge_record(
            {"id": q.id, "kind": q.kind, "style": q.style, "text": q.text, "relevant": q.relevant},
            candidates,
            messages,
            position,
        )
        out.append(record)
    return out


def disk_bytes(path: Path) -> int:
    """Bytes a folder takes on disk (allocated blocks, as ``du`` counts them): the index's files are
    sparse or preallocated, so their apparent sizes overstate it many times."""
    return sum(p.lstat().st_blocks * 512 for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def run_corpus(corpus: str, sets: list[QuerySet], args, overrides: dict[str, str], log) -> dict[str, Any]:
    """Seed (or reuse) the homeserver, refresh, serve and ask every system every query of ``sets``."""
    messages = load_messages(corpus_dir(corpus))
    check_relevant(sets, {m.key for m in messages})
    queries = [q for qs in sets for q in qs.queries]
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise QueryFileError(f"query id {twice!r} is in more than one set of {corpus}")
    started = time.monotonic()
    result: dict[str, Any] = {"messages": len(messages)}
    with seeded_synapse(messages, log=log) as seeded:
        log(
            f"{corpus}: synapse {'cached' if seeded.from_cache else 'seeded'} ({seeded.seed_seconds} s to seed) "
            f"up after {time.monotonic() - started:.0f} s"
        )
        result["seed"] = {"seconds": seeded.seed_seconds, "from_cache": seeded.from_cache}
        base = Path(tempfile.mkdtemp(prefix="huginn-eval-"))
        try:
            env = product_env(base, seeded, overrides)
            if args.reuse:
                shutil.copytree(args.reuse / corpus, base / "state", ignore=shutil.ignore_patterns("event_ids.json"))
                cost: dict[str, Any] = {"reused_state": str(args.reuse / corpus)}
            else:
                cost = refresh(env, log)
            # The index root holds the refresher's working shard and the generation it published.
            cost["index_bytes"] = disk_bytes(base / "state" / "index")
            cost["state_bytes"] = disk_bytes(base / "state")
            key_of_event = seeded.key_of_event
            with ReaderProcess(env, base / "reader.log", ready_s=300):
                runs: dict[str, dict[str, list]] = {"product": run_product(queries, env, key_of_event)}
            log(f"{corpus}: product queries done")
            settings, embedder = open_eval_embedder(env, base / "fastembed")
            vectors = embedder.embed([q.text for q in queries])
            query_vectors = {q.id: v for q, v in zip(queries, vectors)}
            cache = vector_cache_for(settings.embed_model, embedder)
            runs["textbook"], textbook_cost = run_textbook(queries, messages, cache, vectors)
            log(f"{corpus}: textbook hybrid done")
            runs.update(run_legs(queries, env, key_of_event, embedder, vectors))
            runs["synapse"] = run_synapse(queries, seeded)
            if args.pool:
                result["pool"] = pool_records(sets, runs, messages, embedder, cache, query_vectors)
            if args.keep:
                keep = args.keep / corpus
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(base / "state", keep)
                (keep / "event_ids.json").write_text(json.dumps(seeded.event_ids))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    result["cost"] = {"product": cost, "textbook": textbook_cost}
    result["runs"] = {system: runs[system] for system in SYSTEMS}
    result["scores"] = {qs.name: score_set(qs, result["runs"]) for qs in sets}
    return result


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def cost_lines(corpus: str, result: dict[str, Any]) -> list[str]:
    lines = [f"{corpus}.corpus.messages: {result['messages']}"]
    lines += [f"{corpus}.seed.{k}: {v}" for k, v in result["seed"].items()]
    for config, cost in result["cost"].items():
        lines += [f"{corpus}.ingest.{config}.{k}: {v}" for k, v in cost.items()]
    return lines


def cost_table(results: dict[str, dict[str, Any]]) -> str:
    head = "| corpus | configuration | texts embedded | refresh / embed time | index size on disk |"
    rows = [head, "|---|---|---|---|---|"]
    for corpus, result in results.items():
        p, t = result["cost"]["product"], result["cost"]["textbook"]
        refresh_s = f"{p['seconds']} s (wall {p['wall_s']} s)" if "seconds" in p else "reused"
        rows.append(
            f"| {corpus} | product (dense and bm25 legs: the same index) | {p.get('texts_embedded', '-')} "
            f"| {refresh_s} | {_mb(p.get('index_bytes'))} |"
        )
        embed_s = (
            "cached"
            if t["embed_seconds"] is None
            else f"{t['embed_seconds']} s to embed {t['embedded_now']} (nothing else to build)"
        )
        rows.append(
            f"| {corpus} | textbook hybrid | {t['texts_embedded']} | {embed_s} "
            f"| {_mb(t['vector_bytes'])} of vectors + {t['sparse_entries']} postings |"
        )
        rows.append(
            f"| {corpus} | Synapse /search | 0 | seeding: {result['seed']['seconds']} s | (inside the homeserver's database) |"
        )
    return "\n".join(rows)


def report(results: dict[str, dict[str, Any]], sets: dict[str, list[QuerySet]], out=sys.stdout) -> str:
    """Prints the tables and ``name: value`` lines; returns the markdown for ``last.md``."""
    md = ["## Retrieval quality (make eval)", ""]
    for corpus, result in results.items():
        md.append(f"### {corpus} ({result['messages']} messages)")
        for qs in sets[corpus]:
            md += ["", markdown_tables(f"{corpus}, {qs.name} set", result["scores"][qs.name])]
        md.append("")
    md += ["### Ingest cost per configuration", "", cost_table(results), ""]
    text = "\n".join(md)
    print(text, file=out)
    for corpus, result in results.items():
        for qs in sets[corpus]:
            for line in name_value_lines(f"{corpus}.{qs.name}", result["scores"][qs.name]):
                print(line, file=out)
        for line in cost_lines(corpus, result):
            print(line, file=out)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make eval", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus",
        action="append",
        choices=sorted(CORPORA),
        help="corpus to run (repeatable; default every corpus that has queries)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="HUGINN_CHAT_X=V",
        help="a setting for the refresher and reader (repeatable)",
    )
    parser.add_argument("--keep", type=Path, help="keep each corpus's state dir (index) under DIR/<corpus>")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="serve the state dirs kept by --keep instead of refreshing (a change to the reader alone)",
    )
    parser.add_argument(
        "--query-dir",
        type=Path,
        default=QUERY_DIR,
        help="read the query sets from this folder, laid out as bench/queries/ (default that)",
    )
    parser.add_argument("--pool", type=Path, help="write the judging pool of the outside query sets here")
    parser.add_argument("--out", type=Path, default=CACHE_ROOT / "last.json")
    args = parser.parse_args(argv)
    for item in args.overrides:
        if "=" not in item or not item.startswith("HUGINN_CHAT_"):
            parser.error(f"--set {item!r}: expected HUGINN_CHAT_NAME=VALUE")
    if args.pool is not None and args.pool.is_symlink():
        parser.error(f"--pool {args.pool}: is a symbolic link")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    overrides = dict(item.split("=", 1) for item in args.overrides)
    try:
        sets = {corpus: query_sets(corpus, args.query_dir) for corpus in (args.corpus or sorted(CORPORA))}
    except QueryFileError as error:
        print(f"make eval: {error}", file=sys.stderr)
        return 2
    sets = {corpus: found for corpus, found in sets.items() if found}
    for corpus in sets:
        if not (corpus_dir(corpus) / "messages.jsonl").is_file():
            print(f"make eval: corpus {corpus}: {corpus_dir(corpus) / 'messages.jsonl'} not found", file=sys.stderr)
            return 2
    results: dict[str, dict[str, Any]] = {}
    try:
        for corpus, found in sets.items():
            results[corpus] = run_corpus(corpus, found, args, overrides, log)
    except QueryFileError as error:
        print(f"make eval: {error}", file=sys.stderr)
        return 2
    markdown = report(results, sets)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    (args.out.parent / "last.md").write_text(markdown + "\n")
    args.out.write_text(
        json.dumps(
            {
                "settings": overrides,
                "corpora": {
                    corpus: {
                        "seed": r["seed"],
                        "cost": r["cost"],
                        "scores": {
                            name: {
                                group: {
                                    system: {
                                        facet: {v: s.as_dict() for v, s in per.items()} for facet, per in facets.items()
                                    }
                                    for system, facets in systems.items()
                                }
                                for group, systems in scored.items()
                            }
                            for name, scored in r["scores"].items()
                        },
                        "runs": {
                            system: {qid: [list(h) for h in hits] for qid, hits in rs.items()}
                            for system, rs in r["runs"].items()
                        },
                    }
                    for corpus, r in results.items()
                },
            },
            indent=1,
        )
    )
    if args.pool is not None:
        from bench.pool import write_lines

        records = [rec for r in results.values() for rec in r.get("pool", [])]
        write_lines(args.pool, records)
        log(f"pool: {len(records)} queries, {sum(len(r['candidates']) for r in records)} candidates -> {args.pool}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
