"""Two readers side by side: the reader of another checkout against this one's, in one run.

Owns: starting ``huginn-chat serve`` from two checkouts (``--base``, ``--change``; the second is this
repository by default) on the same kept synthetic index (``bench/bench.py --keep-indexes DIR``), and
asking both the same queries in alternating order, each followed by the bare embed + hybrid query
of ``bench/bench.py``'s reader part, so the drift of a shared machine falls on both alike. Prints
each reader's p50 and p95 and its ratio against the bare query measured right after it.

Must not: be imported by the product, or be read as the headline figure: ``make bench`` is. This is
how a change to the reader is judged before it is kept (docs/performance.md, bench/results.md):
on this 2-core machine the same code's ratio moves by ±0.03 between runs, more than most single changes move it.

    python bench/reader_ab.py --base ../huginn-before --index DIR/10000 [--rounds 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import bench  # noqa: E402
from daemon.cli.client import ReaderUnavailable, exchange  # noqa: E402


def start_reader(checkout: Path, index_state: Path, socket_path: str, log: Path) -> subprocess.Popen[bytes]:
    """``huginn-chat serve`` run from ``checkout``'s own code, ready (index and model) when returned."""
    env = bench.base_env(index_state, HUGINN_CHAT_SOCKET=socket_path)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli.main", "serve"],
            env=env,
            cwd=checkout,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the reader of {checkout} exited {process.returncode}: see {log}")
        try:
            status = exchange(socket_path, {"v": 1, "op": "status"}, timeout=5).get("result") or {}
            if status.get("index_ready") and status.get("embedder") == "loaded":
                return process
        except ReaderUnavailable:
            pass
        time.sleep(0.2)
    process.terminate()
    raise SystemExit(f"the reader of {checkout} was not ready in 300 s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--change", type=Path, default=REPO, help="the checkout with the change (this one)")
    parser.add_argument("--index", type=Path, required=True, help="a kept index, e.g. DIR/10000 of --keep-indexes")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.index.port import SearchFilter
    from daemon.reader.search import leg_limit

    samples = json.loads((args.index / "bench-samples.json").read_text())
    queries = [" ".join(s.split()[1:8]) for s in samples]
    work = Path(tempfile.mkdtemp(prefix="reader-ab-"))
    readers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for name, checkout in (("base", args.base), ("change", args.change)):
            socket_path = str(work / f"{name}.sock")
            readers[name] = (
                start_reader(checkout.resolve(), args.index, socket_path, work / f"{name}.log"),
                socket_path,
            )
            exchange(socket_path, bench.search_request([queries[0]]))
        raw_index = EdgeIndexReader.open_latest(args.index / "index", work / "bare")
        assert raw_index is not None
        embedder = bench.load_embedder(1, work / "cache")
        limit = leg_limit(10, 1)

        def bare(text: str) -> None:
            raw_index.hybrid(embedder.embed([text])[0], embedder.sparse_query(text), SearchFilter(), limit)

        bare(queries[0])
        via: dict[str, list[float]] = {"base": [], "change": []}
        after: dict[str, list[float]] = {"base": [], "change": []}
        for n in range(args.rounds):
            text = queries[n % len(queries)]
            for name in ("base", "change") if n % 2 == 0 else ("change", "base"):
                tick = time.perf_counter()
                reply = exchange(readers[name][1], bench.search_request([text]))
                via[name].append((time.perf_counter() - tick) * 1000)
                if not reply.get("ok"):
                    raise SystemExit(f"the {name} reader refused a query: {reply.get('error')}")
                tick = time.perf_counter()
                bare(text)
                after[name].append((time.perf_counter() - tick) * 1000)
        raw_index.close()
        for name in ("base", "change"):
            p50, p95 = bench.pct(via[name], 50), bench.pct(via[name], 95)
            print(
                f"{name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms; bare p50 {bench.pct(after[name], 50):.2f} ms; "
                f"ratio p50 {p50 / bench.pct(after[name], 50):.3f}, p95 {p95 / bench.pct(after[name], 95):.3f}"
            )
    finally:
        for process, _ in readers.values():
            process.terminate()
            process.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
