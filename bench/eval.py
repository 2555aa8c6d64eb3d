"""`make eval`: retrieval quality of huginn-chat on real chat, beside the homeserver's own search.

Owns: the end-to-end run. A throwaway Synapse seeded with the corpus (``bench/seed.py``, cached
by corpus hash), the real refresher (``python -m daemon.cli.main refresh``) and reader
(``serve``), every labelled query of ``bench/queries/*.jsonl`` sent through
``huginn-chat search --json``, and the same queries against

- the dense leg alone and the BM25 leg alone: computed in this process against the very
  generation the reader serves (a private copy opened with ``EdgeIndexReader.open_latest``, the
  same embedder and query vectors the reader makes), each leg ranking windows by itself;
- Synapse's ``/search`` (``order_by: rank``) as the service user, on the same rooms.

A hit counts when it holds a relevant message: a window that contains it, or for Synapse the
event itself. Prints a table per split and ``name: value`` lines; writes the full result to
``.cache/eval/last.json``.

Must not: tune anything (it measures what it is given), or leave Synapse or the reader running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.corpus import REPO, load_messages
from bench.reader_process import ReaderProcess
from bench.reader_process import cli as _cli
from bench.metrics import Scores, first_relevant_rank, name_value_lines, summarise, table
from bench.seed import CACHE_ROOT, Seeded, seeded_synapse

QUERY_DIR = REPO / "bench" / "queries"
TOP_K = 10
SYSTEMS = ("product", "dense", "bm25", "synapse")


@dataclass(frozen=True)
class LabelledQuery:
    id: str
    kind: str
    text: str
    relevant: tuple[str, ...]
    split: str


def load_queries(paths: list[Path] | None = None) -> list[LabelledQuery]:
    out = []
    for path in paths or sorted(QUERY_DIR.glob("*.jsonl")):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                raw = json.loads(line)
                out.append(LabelledQuery(raw["id"], raw["kind"], raw["text"], tuple(raw["relevant"]), raw["split"]))
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


def hit_keys(messages: list[dict[str, Any]], key_of_event: dict[str, str]) -> set[str]:
    return {key_of_event.get(m.get("event_id"), m.get("event_id")) for m in messages}


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


def run_legs(queries: list[LabelledQuery], env: dict[str, str], key_of_event: dict[str, str]) -> dict[str, dict]:
    """Dense alone and BM25 alone over the generation the reader serves (a private copy)."""
    import qdrant_edge as qe

    from daemon.config import load_settings
    from daemon.index import schema
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.index.edge import conditions, edge_sparse
    from daemon.wiring import edge_index_root, open_embedder

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        settings = load_settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    private = Path(tempfile.mkdtemp(prefix="legs-", dir=Path(env["HUGINN_CHAT_STATE_DIR"]).parent))
    reader = EdgeIndexReader.open_latest(edge_index_root(settings), private)
    embedder = open_embedder(settings, threads=1, cache_dir=private / "fastembed")
    out: dict[str, dict] = {"dense": {}, "bm25": {}}
    try:
        shard = reader._require_shard()
        vectors = embedder.embed([q.text for q in queries])
        for query, vector in zip(queries, vectors):
            sparse = embedder.sparse_query(query.text)
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
        out[query.id] = [{key_of_event.get(r["result"]["event_id"], r["result"]["event_id"])} for r in results[:TOP_K]]
    return out


def score_runs(
    queries: list[LabelledQuery], runs: dict[str, dict[str, list]]
) -> dict[str, dict[str, dict[str, Scores]]]:
    """split ("dev", "heldout", "all") -> system -> kind -> Scores."""
    out: dict[str, dict[str, dict[str, Scores]]] = {}
    for split in ("dev", "heldout", "all"):
        chosen = [q for q in queries if split == "all" or q.split == split]
        kinds = {q.id: q.kind for q in chosen}
        out[split] = {}
        for system, rankings in runs.items():
            ranks = {q.id: first_relevant_rank(rankings.get(q.id, []), q.relevant) for q in chosen}
            out[split][system] = summarise(ranks, kinds)
    return out


def report(scored: dict, cost: dict[str, Any], out=sys.stdout) -> None:
    for split, rows in scored.items():
        print(f"\n## {split} (recall@5 per kind)\n", file=out)
        print(table(rows), file=out)
    print("", file=out)
    for split, rows in scored.items():
        for system, per in rows.items():
            for line in name_value_lines(f"{split}.{system}", per):
                print(line, file=out)
    for name, value in cost.items():
        print(f"ingest.{name}: {value}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make eval", description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=Path, action="append", help="query files (default bench/queries/*.jsonl)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="HUGINN_CHAT_X=V",
        help="a setting for the refresher and reader (repeatable)",
    )
    parser.add_argument("--keep", type=Path, help="keep the state dir (index) here for the tuning harness")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="serve a state dir kept by --keep instead of refreshing (a change to the reader alone)",
    )
    parser.add_argument("--out", type=Path, default=CACHE_ROOT / "last.json")
    args = parser.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    queries = load_queries(args.queries)
    overrides = dict(item.split("=", 1) for item in args.overrides)
    messages = load_messages()
    started = time.monotonic()
    with seeded_synapse(messages, log=log) as seeded:
        log(
            f"synapse: {'cached' if seeded.from_cache else 'seeded'} ({seeded.seed_seconds} s to seed) "
            f"up after {time.monotonic() - started:.0f} s"
        )
        base = Path(tempfile.mkdtemp(prefix="huginn-eval-"))
        try:
            env = product_env(base, seeded, overrides)
            if args.reuse:
                shutil.copytree(args.reuse, base / "state", ignore=shutil.ignore_patterns("event_ids.json"))
                cost = {"reused_state": str(args.reuse)}
            else:
                cost = refresh(env, log)
            key_of_event = seeded.key_of_event
            with ReaderProcess(env, base / "reader.log", ready_s=300):
                runs = {"product": run_product(queries, env, key_of_event)}
            log("product queries done")
            runs.update(run_legs(queries, env, key_of_event))
            runs["synapse"] = run_synapse(queries, seeded)
            if args.keep:
                shutil.rmtree(args.keep, ignore_errors=True)
                shutil.copytree(base / "state", args.keep)
                (args.keep / "event_ids.json").write_text(json.dumps(seeded.event_ids))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    scored = score_runs(queries, runs)
    report(scored, cost)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "settings": overrides,
                "cost": cost,
                "scores": {
                    s: {sys_: {k: v.as_dict() for k, v in per.items()} for sys_, per in rows.items()}
                    for s, rows in scored.items()
                },
                "runs": {sys_: {qid: [sorted(h) for h in hits] for qid, hits in r.items()} for sys_, r in runs.items()},
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
