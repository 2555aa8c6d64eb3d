"""Where a reader's resident memory lives, mapping by mapping: ``python -m bench.smaps STATE``
starts ``huginn-chat serve`` on a state directory the reader benchmark kept
(``bench/bench.py --only reader --keep-indexes DIR``: ``DIR/<windows>``), asks it ordinary and
max-size queries as the benchmark does, and sums /proc/PID/smaps by what each mapping is: the
index copy's files by kind (segment ids folded), anonymous memory, the model, libraries.

Owns: reading /proc/PID/smaps of the child it started and grouping it.
Must not: be imported by the product; it measures, like ``bench/bench.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench.bench import base_env, memory_mb, search_request, sentence
from bench.reader_process import ReaderProcess

_SEGMENT = re.compile(r"segments/[0-9a-f-]{36}/")
_FIELD_INDEX = re.compile(r"payload_index/[0-9a-z]+-[a-z_]+-")  # <random>-<field>-<kind>
_NUMBERED = re.compile(r"\d+")


def mapping_kind(path: str) -> str:
    """A mapping's group: an index file by its path inside the shard, segment ids, indexed
    fields and file numbers folded (``segments/*/vector_storage-dense/vectors/chunk_N.mmap``,
    ``segments/*/payload_index/*-map/page_N.dat``); else anon, the heap, the model, or a library
    by name."""
    if not path:
        return "anon"
    if path.startswith("["):
        return path
    if "/shard/" in path:
        inside = _FIELD_INDEX.sub("payload_index/*-", _SEGMENT.sub("segments/*/", path.split("/shard/", 1)[1]))
        return "index: " + _NUMBERED.sub("N", inside)
    if path.endswith(".onnx") or "/.models/" in path:
        return "model: " + Path(path).name
    return "file: " + Path(path).name


def breakdown(pid: int) -> dict[str, dict[str, float]]:
    """Per group: Rss, Anonymous and the mapping count, in MB (counts as numbers)."""
    groups: dict[str, dict[str, float]] = defaultdict(lambda: {"rss_mb": 0.0, "anon_mb": 0.0, "mappings": 0})
    current = "anon"
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                current = mapping_kind(fields[5] if len(fields) > 5 else "")
                groups[current]["mappings"] += 1
            elif fields[0] == "Rss:":
                groups[current]["rss_mb"] += int(fields[1]) / 1024
            elif fields[0] == "Anonymous:":
                groups[current]["anon_mb"] += int(fields[1]) / 1024
    return {
        k: {n: round(v, 1) for n, v in g.items()} for k, g in sorted(groups.items(), key=lambda kv: -kv[1]["rss_mb"])
    }


def main(argv: list[str] | None = None) -> int:
    from daemon.cli.client import exchange

    parser = argparse.ArgumentParser(prog="python -m bench.smaps")
    parser.add_argument("state", type=Path, help="a kept reader state (bench.py --keep-indexes DIR: DIR/100000)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--max-queries", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the breakdowns here")
    args = parser.parse_args(argv)
    samples = json.loads((args.state / "bench-samples.json").read_text())
    queries = [" ".join(s.split()[1:8]) for s in samples]
    rng = random.Random(1)
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as work:
        sock = str(Path(work) / "reader.sock")
        env = base_env(args.state, HUGINN_CHAT_SOCKET=sock)
        with ReaderProcess(env, Path(work) / "reader.log", ready_s=180, embedder_loaded=True) as reader:
            assert reader.process is not None
            pid = reader.process.pid
            for i in range(args.queries):
                exchange(sock, search_request([queries[i % len(queries)]]))
            out["after_queries"] = {"totals": memory_mb(pid), "groups": breakdown(pid)}
            for _ in range(args.max_queries):
                texts = [(sentence(rng, 200, 220) + " ")[:1000] for _ in range(8)]
                exchange(sock, search_request(texts, top_k=50), timeout=120)
            out["after_max_queries"] = {"totals": memory_mb(pid), "groups": breakdown(pid)}
    for stage, figures in out.items():
        print(f"== {stage}: {figures['totals']}")  # type: ignore[index]
        for name, group in figures["groups"].items():  # type: ignore[index]
            if group["rss_mb"] >= 0.5:
                print(
                    f"  {group['rss_mb']:8.1f} MB rss {group['anon_mb']:8.1f} anon {group['mappings']:5.0f} maps  {name}"
                )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
