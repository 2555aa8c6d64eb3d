"""The speed and memory benchmark: `make bench` (full) and `make bench-quick` (CI, < 3 min on 2 cores).

Owns: measuring the headline figures (docs/performance.md) side by side in one run (every target is a ratio
of two things measured on the same machine in the same minute, because these machines are noisy),
printing one ``name: value`` line per figure at the end, and writing them with the machine and the
command to ``bench/results/<name>.json``.

Must not: be imported by the product, reach beyond 127.0.0.1, print a token or message text, or
leave a process behind (Synapse and the reader are stopped in ``finally``).

Parts:
- ingest: a real Synapse (devtools/synapse.py), 16 rooms seeded through the history appservice
  (``?ts=``, concurrently); a backfill refresh in its own process (its peak RSS from wait4), then
  the pure embedding of the very texts it stored (its distinct message lines, dense, in one call:
  the product's own length-sorted batching at its best; its windows, BM25), in this process with
  the same model, threads and batch size: ``ingest_vs_embed_ratio`` = pure embedding seconds /
  refresh run seconds (beside them the CPU seconds of each side and of the homeserver). Then a
  refresh with nothing new (texts embedded, homeserver requests per room from the run summary),
  and one new message in one of the 16 rooms (texts embedded).
- reader: synthetic windows (random unit vectors, generated chat text) written through the real
  Edge writer and published; ``huginn-chat serve`` in its own process; each query timed through
  the socket and, alternately, as a bare embed + hybrid query of the same text in this process on
  a copy of the same generation: ``reader_vs_raw_ratio`` at p50 and p95. 16 concurrent clients;
  the reader's RSS after start, after ordinary queries and after max-size queries.
- cli: whole-process wall of the Personas' ``huginn-chat search`` (the ``-I -S`` launcher) against
  ``python -c pass`` and ``python -I -S -c pass``, interleaved: against a stub reader that answers
  at once (the CLI's own cost) and, in the reader part, against the real reader:
  ``cli_search_overhead_ms_p50`` is that command's median less ``python -c pass``'s, the same loop
  (``cli_own_overhead_ms_p50`` the same against the stub).
- freshness (full only, bench/freshness.py): the shipped units on a real Synapse (the follow
  service beside the timer's runs at its cadence): ``freshness_p95_s`` (send to found by
  ``huginn-chat search``) and ``idle_core_share``.
- publish (full only, bench/publish.py): a generation published after 100 new windows on a 10k
  and a 100k index, on a loop-mounted reflink XFS when the bench can make one: seconds and bytes
  written, the reader's opening of the new generation (``publish_reader_open_*``), beside a full
  copy of the same shard.
- scale (full only): a synthetic 1M-message backfill (bench/scale.py) through the real refresher
  and Edge index with a hashed embedder: ``refresher_peak_rss_mb_1m``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.reader_process import ReaderProcess, cli  # noqa: E402 - after the path line above

MODEL_DIR = REPO / ".models" / "all-MiniLM-L6-v2"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ROOMS = 16
BATCH_SIZE = 16  # the refresher's default (daemon/config.py embed_batch_size)

WORDS = (
    "build deploy server cache index query window room message token latency memory thread socket "
    "release branch merge review test failure timeout retry config password login backup disk "
    "network proxy certificate python rust kernel driver update upgrade install package version "
    "issue ticket meeting lunch coffee weekend holiday garden kitten weather train ticket music"
).split()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def sentence(rng: random.Random, low: int = 6, high: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a live process in MB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(rest.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def memory_mb(pid: int) -> dict[str, float]:
    """A live process's memory in MB: VmRSS, VmHWM (its peak), RssAnon (heap, model, Python),
    RssFile (mapped files: the index's segments) and Pss (smaps_rollup: a page mapped twice, as
    Edge maps an appendable segment's vector chunks, counted once)."""
    fields: dict[str, float] = {}
    for source in (f"/proc/{pid}/status", f"/proc/{pid}/smaps_rollup"):
        try:
            text = Path(source).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Pss") and rest.split():
                fields[name] = round(int(rest.split()[0]) / 1024, 1)
    return fields


# The reader gives memory back after its reply (daemon.reader.service, _release_after_tidying):
# its memory "after" a run of queries is read at rest, this long after the last.
AT_REST_S = 0.5


def record_memory(figures: dict[str, Any], pid: int, stage: str, suffix: str) -> None:
    """reader_rss_<stage>_mb (the headline), and its anon/file/pss split beside it."""
    mem = memory_mb(pid)
    figures[f"reader_rss_{stage}_mb{suffix}"] = mem.get("VmRSS")
    for key, name in (("RssAnon", "anon"), ("RssFile", "file"), ("Pss", "pss")):
        if key in mem:
            figures[f"reader_{name}_{stage}_mb{suffix}"] = mem[key]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_measured(argv: list[str], env: dict[str, str], cpu: list[float] | None = None) -> tuple[int, float, float, str]:
    """Run a child; (exit code, wall seconds, peak RSS MB, stderr tail). ``cpu``, when given, gets
    the child's user + system CPU seconds (all its threads, from wait4) appended.

    The peak is the child's own VmHWM, read every 50 ms while it runs (growth in its last 50 ms
    can be missed), not wait4's ``ru_maxrss``: that one also holds the RSS of the bench process
    at the fork, which the child keeps until its exec (Linux records the old memory's high-water
    mark at exec): a refresher that peaked at ~420 MB read 1,017 MB when it ran after the reader
    part had grown the bench's own process."""
    started = time.perf_counter()
    peak = [0.0]
    done = threading.Event()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )

        def sample() -> None:  # Popen returns once the child has exec'd: its memory is its own
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], rss_mb(proc.pid)[1])
                except (OSError, KeyError, ValueError):
                    pass  # exited (or a zombie, with no memory lines) between two reads
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if cpu is not None:
            cpu.append(usage.ru_utime + usage.ru_stime)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    return proc.returncode, wall, peak[0], tail


def base_env(state_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    env.update(
        {
            "HUGINN_CHAT_STATE_DIR": str(state_dir),
            "HUGINN_CHAT_EMBED_MODEL_DIR": str(MODEL_DIR),
            "HUGINN_CHAT_EMBED_BATCH_SIZE": str(BATCH_SIZE),
            "MALLOC_ARENA_MAX": "2",  # as deploy/systemd sets it
            **extra,
        }
    )
    return env


# --------------------------------------------------------------------------------------- ingest


def seed(server: Any, messages_per_room: int, rng: random.Random) -> tuple[Any, list[str]]:
    owner = server.actor(server.register("owner"))
    history = server.history_actor(server.register("alice"))
    service = server.register("huginn")
    rooms = []
    for n in range(ROOMS):
        room = owner.create_room(name=f"bench {n}", preset="public_chat")
        history.join(room)
        rooms.append(room)
    start_ts = int(time.time() * 1000) - 30 * 86_400_000
    jobs = []
    for n, room in enumerate(rooms):
        for i in range(messages_per_room):
            jobs.append((room, start_ts + i * 60_000 + n, sentence(rng)))

    def send(job: tuple[str, int, str]) -> None:
        room, ts, body = job
        history.send_text(room, body, ts=ts)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(send, jobs))
    return service, rooms, history, start_ts + (messages_per_room - 1) * 60_000 + ROOMS


def bench_ingest(quick: bool, work: Path, figures: dict[str, Any]) -> None:
    from devtools.synapse import SynapseServer

    messages_per_room = 40 if quick else 300
    rng = random.Random(12)
    say(f"ingest: starting Synapse, seeding {ROOMS} rooms x {messages_per_room} messages")
    with SynapseServer(history_appservice=True) as server:
        tick = time.perf_counter()
        service, rooms, history, last_ts = seed(server, messages_per_room, rng)
        figures["ingest_messages_seeded"] = ROOMS * messages_per_room
        figures["ingest_seed_s"] = round(time.perf_counter() - tick, 1)
        token_file = work / "token"
        token_file.write_text(service.access_token)
        token_file.chmod(0o600)
        state = work / "ingest-state"
        env = base_env(
            state,
            HUGINN_CHAT_HOMESERVER=server.base_url,
            HUGINN_CHAT_TOKEN_FILE=str(token_file),
            HUGINN_CHAT_ROOMS=json.dumps(rooms),
        )

        def refresh(label: str, **extra: str) -> dict[str, Any]:
            cpu: list[float] = []
            synapse_before = process_cpu_s(server.pid)
            code, wall, peak, tail = run_measured(cli("refresh"), {**env, **extra}, cpu)
            if code != 0:
                raise SystemExit(f"refresh ({label}) exited {code}:\n{tail}")
            summary = json.loads((state / "last_run.json").read_text())
            summary["_wall_s"] = wall
            summary["_peak_rss_mb"] = peak
            summary["_cpu_s"] = cpu[0]
            summary["_synapse_cpu_s"] = process_cpu_s(server.pid) - synapse_before
            return summary

        say("ingest: backfill refresh")
        first = refresh("backfill")
        lines, texts = stored_texts(state)
        say(f"ingest: pure embedding of the same {len(lines)} row texts (and {len(texts)} windows' BM25)")
        pure_s, pure_cpu_s = pure_embed_seconds(lines, texts)
        say("ingest: refresh with nothing new (a full run: scope facts re-read)")
        noop = refresh("noop", HUGINN_CHAT_SCOPE_RECHECK_S="0")
        # A minute after the room's last message: it joins the open window.
        history.send_text(rooms[7], "one more message about the build", ts=last_ts + 60_000)
        say("ingest: one new message in one of 16 rooms")
        one = refresh("one new message")
        # A day later: it opens a new window and closes the open one, whose payload (closed) changes.
        history.send_text(rooms[3], "one more message a day later", ts=int(time.time() * 1000))
        say("ingest: one new message after a long gap")
        gap = refresh("one new message after a gap")

    per_room_noop = noop["homeserver_requests_per_room"]
    figures.update(
        {
            "ingest_events_read": first["events_read"],
            "ingest_windows_written": first["windows_written"],
            "ingest_refresh_s": first["seconds"],
            "ingest_refresh_wall_s": round(first["_wall_s"], 2),
            "ingest_embedding_s_inside_refresh": first["seconds_embedding"],
            "ingest_reading_s": first["seconds_reading"],
            "ingest_folding_s": first["seconds_folding"],
            "ingest_writing_s": first["seconds_writing"],
            "ingest_pure_embed_s": round(pure_s, 3),
            # CPU seconds beside the wall ones: the refresher's whole process (start-up and model
            # load included), the homeserver's while it served the backfill, and the pure side's.
            # On 2 cores the first two, less the pure side's, are what the refresh adds to embedding.
            "ingest_refresher_cpu_s": round(first["_cpu_s"], 2),
            "ingest_synapse_cpu_s": round(first["_synapse_cpu_s"], 2),
            "ingest_pure_embed_cpu_s": round(pure_cpu_s, 2),
            "ingest_texts_embedded": first["texts_embedded"],
            "ingest_pure_lines": len(lines),
            "ingest_vs_embed_ratio": round(pure_s / first["seconds"], 3) if first["seconds"] else None,
            "refresher_peak_rss_mb": round(first["_peak_rss_mb"], 1),
            "backfill_requests_total": first["homeserver_requests"],
            "noop_texts_embedded": noop["texts_embedded"],
            "noop_requests_total": noop["homeserver_requests"],
            "noop_requests_global": noop["homeserver_requests_global"],
            "noop_requests_per_room": max(per_room_noop.values()) if per_room_noop else None,
            "noop_requests_per_room_incl_global": round(noop["homeserver_requests"] / ROOMS, 2),
            "noop_refresh_wall_s": round(noop["_wall_s"], 2),
            "one_new_message_texts_embedded": one["texts_embedded"],
            "one_new_message_windows_written": one["windows_written"],
            "one_new_message_requests_total": one["homeserver_requests"],
            "one_new_message_after_gap_texts_embedded": gap["texts_embedded"],
        }
    )


def bench_scale(work: Path, figures: dict[str, Any], messages: int = 1_000_000) -> None:
    """The 1M-message synthetic backfill (bench/scale.py) in its own process: the refresher's peak
    RSS (``run_measured``), with a hashed embedder (real embedding of 1M messages takes hours on 2 cores)."""
    say(f"scale: synthetic backfill of {messages} messages (3% edits), hashed embedder, real Edge index")
    out = work / "scale.json"
    code, wall, peak, tail = run_measured(
        [sys.executable, str(REPO / "bench" / "scale.py"), "--messages", str(messages), "--out", str(out)],
        dict(os.environ),
    )
    if code != 0:
        raise SystemExit(f"bench/scale.py exited {code}:\n{tail}")
    result = json.loads(out.read_text())
    figures.update(
        {
            "refresher_peak_rss_mb_1m": round(peak, 1),
            "refresher_peak_rss_anon_mb_1m": result["peak_rss_anon_mb"],
            "scale_index_disk_mb": result["index_disk_mb"],
            "scale_messages": result["messages"],
            "scale_windows_written": result["windows_written"],
            "scale_refresh_s": result["seconds"],
            "scale_folding_s": result["seconds_folding"],
            "scale_writing_s": result["seconds_writing"],
        }
    )


def stored_texts(state: Path) -> tuple[list[str], list[str]]:
    """What the refresher embedded, read back from its working shard (the refresher has exited,
    so the shard is free): the distinct row texts of every live window (the dense vectors: one
    per message, ``embed_line``, and one per context row, ``chunker.context``) and the live
    windows' texts (the BM25 vectors)."""
    from chunker.windows import embed_text
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.index.schema import row_texts, window_from_payload

    writer = EdgeIndexWriter(state / "index")
    try:
        rows: dict[str, None] = {}
        texts = []
        for room in sorted(writer.rooms_with_data()):
            for payload in writer.windows_in_span(room, 0, 10**15):
                window = window_from_payload(payload)
                if window.messages:
                    texts.append(embed_text(window))
                    rows.update((text, None) for text in row_texts(payload))
        return list(rows), texts
    finally:
        writer.close()


def load_embedder(threads: int | None, cache: Path) -> Any:
    from daemon.embedder import FastEmbedder

    return FastEmbedder(MODEL_ID, model_dir=MODEL_DIR, cache_dir=cache, threads=threads, batch_size=BATCH_SIZE)


def pure_embed_seconds(lines: list[str], texts: list[str]) -> tuple[float, float]:
    """What the refresher's embedding alone costs at best: every message line in one call (the
    product's own ``embed``: length-sorted over all of them, the same batch size and threads; the
    refresher can only split them further) and BM25 over the window texts."""
    with tempfile.TemporaryDirectory() as cache:
        embedder = load_embedder(None, Path(cache))
        embedder.embed(lines[:4])  # warm the session as the refresher's first batch does not
        tick, cpu = time.perf_counter(), time.process_time()
        embedder.embed(lines)
        embedder.sparse(texts)
        return time.perf_counter() - tick, time.process_time() - cpu


def bench_model_speed(texts: list[str], figures: dict[str, Any]) -> None:
    """fp32 vs int8 speed is the embedding helper's data (docs); this run only records which model
    file is in use."""
    onnx = MODEL_DIR / "model.onnx"
    figures["model_onnx_mb"] = round(onnx.stat().st_size / 1e6, 1) if onnx.exists() else None


# --------------------------------------------------------------------------------------- reader


def write_synthetic_index(state: Path, n_windows: int, rng: random.Random) -> tuple[list[str], float, float]:
    """n_windows windows in 16 rooms, written through the Edge writer and published. Returns
    sample window texts to query with."""
    import numpy as np

    from chunker import chat_version
    from chunker.context import context_rows
    from chunker.fold import Bounds
    from chunker.windows import StoredMessage, Window, embed_text
    from daemon.embedder import Bm25Sparse
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.index.port import IndexMeta, RoomCursor, WindowPoint
    from daemon.index.schema import window_payload

    version = chat_version(Bounds())
    writer = EdgeIndexWriter(state / "index")
    bm25 = Bm25Sparse()
    samples: list[str] = []
    gen = np.random.default_rng(12)
    try:
        writer.reset(IndexMeta(model=MODEL_ID, dim=384, chat_version=version))
        per_room = n_windows // ROOMS
        ts0 = 1_700_000_000_000
        for r in range(ROOMS):
            room = f"!bench{r:02d}:huginn.test"
            batch: list[Any] = []
            for w in range(per_room):
                msgs = [
                    StoredMessage(
                        f"$e{r}_{w}_{m}", f"@user{m % 5}:huginn.test", ts0 + (w * 6 + m) * 1000, sentence(rng, 4, 20)
                    )
                    for m in range(rng.randint(2, 6))
                ]
                window = Window(room_id=room, anchor_id=msgs[0].event_id, messages=msgs, closed=True)
                text = embed_text(window)
                if len(samples) < 200 and rng.random() < 0.05:
                    samples.append(text[:300])
                # One random unit vector per message and per context row, as the index stores a
                # window (schema.DENSE).
                vecs = gen.standard_normal((len(msgs) + len(context_rows(msgs)), 384)).astype("float32")
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                batch.append(
                    WindowPoint(
                        point_id=window.point_id,
                        dense=vecs.tolist(),
                        sparse=bm25.sparse([text])[0],
                        payload=window_payload(window, room_alias=None, chat_version=version),
                    )
                )
                if len(batch) == 500:
                    writer.write_windows(room, batch, [])
                    batch = []
            if batch:
                writer.write_windows(room, batch, [])
            writer.set_cursor(
                RoomCursor(
                    room_id=room, end_token="t", last_event_id=f"$e{r}", open_window_id=None, chat_version=version
                )
            )
        tick = time.perf_counter()
        writer.commit()  # flush and publish a generation: a copy of the whole shard
        publish_s = time.perf_counter() - tick
    finally:
        writer.close()
    size = sum(f.stat().st_blocks * 512 for f in (state / "index").rglob("*") if f.is_file())
    return samples, publish_s, size / 1e6


def search_request(texts: list[str], top_k: int = 10) -> dict[str, Any]:
    from daemon.reader.protocol import search_request as wire
    from daemon.reader.search import make_query

    return wire(make_query(texts, top_k=top_k), "q")


def bench_reader(
    n_windows: int, quick: bool, work: Path, figures: dict[str, Any], suffix: str, keep: Path | None = None
) -> None:
    from daemon.cli.client import exchange
    from daemon.index.edge_reader import EdgeIndexReader
    from daemon.index.port import SearchFilter
    from daemon.reader.search import leg_limit

    rng = random.Random(n_windows)
    state = (keep / str(n_windows)) if keep is not None else work / f"reader-state{suffix}"
    samples_file = state / "bench-samples.json"
    if keep is not None and samples_file.is_file():
        # --keep-indexes: the same windows (same seed) as a run that wrote them; writing 100k
        # windows takes minutes on 2 cores, and the reader part measures reading.
        say(f"reader: reusing the {n_windows} synthetic windows kept in {state}")
        samples = json.loads(samples_file.read_text())
    else:
        say(f"reader: writing {n_windows} synthetic windows through the Edge writer")
        tick = time.perf_counter()
        shutil.rmtree(state, ignore_errors=True)
        samples, publish_s, disk_mb = write_synthetic_index(state, n_windows, rng)
        figures[f"synthetic_write_publish_s{suffix}"] = round(time.perf_counter() - tick, 1)
        figures[f"publish_s{suffix}"] = round(publish_s, 2)
        figures[f"index_disk_mb{suffix}"] = round(disk_mb, 1)
        samples_file.write_text(json.dumps(samples))
    rng = random.Random(n_windows + 1)  # the max-size queries' texts
    queries = [" ".join(s.split()[1:8]) for s in samples] or ["build server cache"]
    sock = str(work / f"reader{suffix}.sock")
    env = base_env(state, HUGINN_CHAT_SOCKET=sock)
    with ReaderProcess(env, work / f"reader{suffix}.log", ready_s=120, embedder_loaded=True) as reader:
        assert reader.process is not None
        pid = reader.process.pid
        exchange(sock, search_request([queries[0]]))  # the first query loads lazily what it must
        record_memory(figures, pid, "after_start", suffix)

        # Same process, same texts: embed + hybrid query on a private copy of the same generation.
        with tempfile.TemporaryDirectory() as private, tempfile.TemporaryDirectory() as cache:
            raw_index = EdgeIndexReader.open_latest(state / "index", Path(private))
            assert raw_index is not None
            embedder = load_embedder(1, Path(cache))
            limit = leg_limit(10, 1)

            def raw(text: str) -> None:
                dense = embedder.embed([text])[0]
                raw_index.hybrid(dense, embedder.sparse_query(text), SearchFilter(), limit)

            raw(queries[0])
            rounds = 60 if quick else 200
            via_reader: list[float] = []
            bare: list[float] = []
            # CPU seconds beside the wall: on a loaded machine the wall ratio swings with the
            # scheduler (the reader is another process), the CPU each side spent much less.
            reader_cpu, bare_cpu = 0.0, 0.0
            for i in range(rounds):
                text = queries[i % len(queries)]
                cpu, tick = process_cpu_s(pid), time.perf_counter()
                reply = exchange(sock, search_request([text]))
                via_reader.append((time.perf_counter() - tick) * 1000)
                reader_cpu += process_cpu_s(pid) - cpu
                if not reply["ok"]:
                    raise SystemExit(f"reader refused a query: {reply['error']}")
                cpu, tick = time.process_time(), time.perf_counter()
                raw(text)
                bare.append((time.perf_counter() - tick) * 1000)
                bare_cpu += time.process_time() - cpu
            raw_index.close()
        figures[f"reader_cpu_ms_per_query{suffix}"] = round(reader_cpu / rounds * 1000, 2)
        figures[f"raw_cpu_ms_per_query{suffix}"] = round(bare_cpu / rounds * 1000, 2)
        figures[f"reader_vs_raw_cpu_ratio{suffix}"] = round(reader_cpu / bare_cpu, 3) if bare_cpu else None
        figures[f"reader_ms_p50{suffix}"] = round(pct(via_reader, 50), 2)
        figures[f"reader_ms_p95{suffix}"] = round(pct(via_reader, 95), 2)
        figures[f"raw_ms_p50{suffix}"] = round(pct(bare, 50), 2)
        figures[f"raw_ms_p95{suffix}"] = round(pct(bare, 95), 2)
        figures[f"reader_vs_raw_ratio_p50{suffix}"] = round(pct(via_reader, 50) / pct(bare, 50), 3)
        figures[f"reader_vs_raw_ratio_p95{suffix}"] = round(pct(via_reader, 95) / pct(bare, 95), 3)
        time.sleep(AT_REST_S)
        record_memory(figures, pid, "after_queries", suffix)
        if not suffix:
            bench_cli_with_reader(work, figures, sock, 15 if quick else 40)

        # 16 concurrent clients.
        per_client = 8 if quick else 25
        latencies: list[float] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            for i in range(per_client):
                text = queries[(c * 7 + i) % len(queries)]
                tick = time.perf_counter()
                exchange(sock, search_request([text]))
                with lock:
                    latencies.append((time.perf_counter() - tick) * 1000)

        tick = time.perf_counter()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(client, range(16)))
        elapsed = time.perf_counter() - tick
        figures[f"concurrent16_qps{suffix}"] = round(len(latencies) / elapsed, 1)
        figures[f"concurrent16_ms_p95{suffix}"] = round(pct(latencies, 95), 1)
        figures[f"reader_peak_rss_before_max_queries_mb{suffix}"] = rss_mb(pid)[1]  # which phase set the peak

        # Max-size queries: 8 texts of 1,000 bytes, top_k 50.
        big_rounds = 10 if quick else 40
        for _ in range(big_rounds):
            texts = [(sentence(rng, 200, 220) + " ")[:1000] for _ in range(8)]
            texts = [t.encode()[:1000].decode(errors="ignore") for t in texts]
            exchange(sock, search_request(texts, top_k=50), timeout=120)
        time.sleep(AT_REST_S)
        record_memory(figures, pid, "after_max_queries", suffix)
        figures[f"reader_peak_rss_mb{suffix}"] = rss_mb(pid)[1]


# ------------------------------------------------------------------------------------------ cli


def _cli_variants(query: list[str]) -> dict[str, list[str]]:
    """The Personas' command as installed (``make setup``'s ``huginn-chat-fast``: python ``-I -S``,
    tools/cli_launcher.py), the editable install's console script, and the interpreter alone with
    and without ``site``: what the command costs beside what python costs on the same machine."""
    bindir = Path(sys.executable).parent
    variants = {
        "cli": [str(bindir / "huginn-chat-fast"), "search", *query],
        "console": [str(bindir / "huginn-chat"), "search", *query],
        "python": [sys.executable, "-c", "pass"],
        "nosite": [sys.executable, "-I", "-S", "-c", "pass"],
    }
    return {k: v for k, v in variants.items() if Path(v[0]).exists()}


def _interleaved(variants: dict[str, list[str]], env: dict[str, str], rounds: int) -> dict[str, tuple[float, float]]:
    """(wall p50, CPU p50) in ms of each command run whole, interleaved round by round so load
    swings hit all of them alike. A non-zero exit is an error: a figure of a failing command is
    no figure. CPU (user + system, from wait4) is what load does not inflate."""
    walls: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for key, argv in variants.items():
            tick = time.perf_counter()
            child = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _, status, usage = os.wait4(child.pid, 0)
            walls[key].append((time.perf_counter() - tick) * 1000)
            cpus[key].append((usage.ru_utime + usage.ru_stime) * 1000)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"bench cli: {' '.join(argv[:2])} exited {os.waitstatus_to_exitcode(status)}")
    return {k: (round(statistics.median(walls[k]), 1), round(statistics.median(cpus[k]), 1)) for k in variants}


def _cli_figures(
    measured: dict[str, tuple[float, float]], figures: dict[str, Any], cli_key: str, console_key: str
) -> None:
    if "cli" in measured:
        figures[cli_key] = measured["cli"][0]
        figures[cli_key.replace("_ms_p50", "_cpu_ms_p50")] = measured["cli"][1]
    if "console" in measured:
        figures[console_key] = measured["console"][0]
    figures["python_startup_ms_p50"] = measured["python"][0]
    figures["python_nosite_startup_ms_p50"] = measured["nosite"][0]
    figures["python_startup_cpu_ms_p50"] = measured["python"][1]
    if "cli" in measured:
        figures[cli_key.replace("_ms_p50", "_vs_python_ratio")] = round(measured["cli"][0] / measured["python"][0], 2)
    figures["cli_loadavg_1m"] = round(os.getloadavg()[0], 2)


def bench_cli(quick: bool, work: Path, figures: dict[str, Any]) -> None:
    """The CLI's own cost: ``huginn-chat search`` whole, against a stub reader in this process
    that answers every request at once with no hits (start-up, imports, arguments, the socket
    round trip and the output; no search). The reader part then measures the same command
    against the real reader (``cli_wall_ms_p50``)."""
    import socket as sockets

    rounds = 15 if quick else 40
    path = str(work / "stub-reader.sock")
    server = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    reply = json.dumps({"v": 1, "id": None, "ok": True, "result": {"hits": []}}).encode() + b"\n"

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed: the measurement is over
            with conn, conn.makefile("rb") as stream:
                stream.readline()
                conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    env["HUGINN_CHAT_SOCKET"] = path
    try:
        measured = _interleaved(_cli_variants(["build server", "--json"]), env, rounds)
    finally:
        server.shutdown(sockets.SHUT_RDWR)
        server.close()
        thread.join(5)
    _cli_figures(measured, figures, "cli_own_ms_p50", "cli_console_script_own_ms_p50")
    if "cli" in measured:
        # The same difference as cli_search_overhead_ms_p50 without the reader's search in it.
        figures["cli_own_overhead_ms_p50"] = round(measured["cli"][0] - measured["python"][0], 1)


def bench_cli_with_reader(work: Path, figures: dict[str, Any], sock: str, rounds: int) -> None:
    """``cli_wall_ms_p50``: the Persona's command as it is run, whole, answered by the real reader
    (its embedding and index query included), beside python's own start-up in the same loop; the
    reader's share alone is ``reader_ms_p50``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    env["HUGINN_CHAT_SOCKET"] = sock
    measured = _interleaved(_cli_variants(["build server", "--json"]), env, rounds)
    _cli_figures(measured, figures, "cli_wall_ms_p50", "cli_console_script_ms_p50")
    # What the command costs beyond starting the interpreter, both medians from the one loop above.
    if "cli" in measured:
        figures["cli_search_overhead_ms_p50"] = round(measured["cli"][0] - measured["python"][0], 1)


# ----------------------------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(),
    }


TARGETS = {
    "freshness_p95_s": "<= 60",
    "idle_core_share": "<= 0.01",
    "ingest_vs_embed_ratio": ">= 0.85",
    "noop_texts_embedded": "0",
    "noop_requests_per_room": "<= 2",
    "one_new_message_texts_embedded": "<= 2",  # its line and its context row
    "reader_vs_raw_ratio_p50": "<= 1.3",
    "reader_vs_raw_ratio_p95": "<= 1.3",
    "reader_vs_raw_ratio_p50_100k": "<= 1.3",
    "reader_vs_raw_ratio_p95_100k": "<= 1.3",
    "cli_wall_ms_p50": "<= 60",
    "cli_search_overhead_ms_p50": "<= 35",
    "reader_peak_rss_mb_100k": "<= 400",
    "reader_rss_after_max_queries_mb_100k": "<= 400",
    "refresher_peak_rss_mb": "<= 1024",
    "refresher_peak_rss_mb_1m": "<= 1024",
}


def markdown_table(path: Path) -> str:
    """docs/performance.md's headline table from a results file."""
    result = json.loads(path.read_text())
    figures = result["figures"]
    rows = ["| figure | value | target |", "|---|---|---|"]
    for key in (
        *HEADLINE,
        "reader_rss_after_max_queries_mb",
        "reader_rss_after_max_queries_mb_100k",
        "publish_s",
        "index_disk_mb",
        "publish_s_100k",
        "index_disk_mb_100k",
    ):
        if key in figures:
            rows.append(f"| `{key}` | {figures[key]} | {TARGETS.get(key, '')} |")
    m = result["machine"]
    rows.append("")
    rows.append(
        f"`{result['command']}`, {result['finished_utc']}: {m['nproc']} × {m['cpu_model']}, Python {m['python']}, "
        f"load average {m['loadavg_at_start'][0]:.1f} at the start."
    )
    return "\n".join(rows)


HEADLINE = (
    "ingest_vs_embed_ratio",
    "noop_texts_embedded",
    "noop_requests_per_room",
    "noop_requests_per_room_incl_global",
    "one_new_message_texts_embedded",
    "reader_vs_raw_ratio_p50",
    "reader_vs_raw_ratio_p95",
    "reader_vs_raw_ratio_p50_100k",
    "reader_vs_raw_ratio_p95_100k",
    "reader_vs_raw_cpu_ratio",
    "reader_vs_raw_cpu_ratio_100k",
    "concurrent16_qps",
    "concurrent16_ms_p95",
    "cli_wall_ms_p50",
    "cli_search_overhead_ms_p50",
    "python_startup_ms_p50",
    "cli_console_script_ms_p50",
    "python_nosite_startup_ms_p50",
    "cli_own_ms_p50",
    "cli_own_overhead_ms_p50",
    "cli_loadavg_1m",
    "reader_peak_rss_mb",
    "reader_peak_rss_mb_100k",
    "refresher_peak_rss_mb",
    "refresher_peak_rss_mb_1m",
    "freshness_p95_s",
    "idle_core_share",
    "publish_after_100_s",
    "publish_after_100_bytes_written",
    "publish_full_copy_bytes",
    "publish_reader_open_s",
    "publish_after_100_s_100k",
    "publish_after_100_bytes_written_100k",
    "publish_full_copy_bytes_100k",
    "publish_reader_open_s_100k",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI size (< 3 min on 2 cores)")
    parser.add_argument(
        "--only",
        choices=("ingest", "reader", "cli", "scale", "freshness", "publish"),
        action="append",
        help="run only these parts (repeatable; scale, freshness and publish: full only)",
    )
    parser.add_argument("--name", help="results file name (default: quick or full)")
    parser.add_argument(
        "--reader-windows",
        type=int,
        action="append",
        help="the reader part's index sizes (repeatable; default 10000, and 100000 in the full run)",
    )
    parser.add_argument(
        "--keep-indexes",
        type=Path,
        help="keep the reader part's synthetic indexes in this directory and reuse them on the next run",
    )
    parser.add_argument("--table", type=Path, help="print the docs/performance.md table of a results file and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(args.table))
        return 0
    parts = args.only or ["cli", "reader", "ingest", *([] if args.quick else ["publish", "freshness", "scale"])]
    name = args.name or ("quick" if args.quick else "full")
    figures: dict[str, Any] = {}
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="huginn-bench-"))
    try:
        if "cli" in parts:
            bench_cli(args.quick, work, figures)
        if "reader" in parts:
            for n_windows in args.reader_windows or [10_000, *([] if args.quick else [100_000])]:
                suffix = "" if n_windows == 10_000 else f"_{n_windows // 1000}k"
                bench_reader(n_windows, args.quick, work, figures, suffix, args.keep_indexes)
        if "ingest" in parts:
            bench_ingest(args.quick, work, figures)
        if "publish" in parts:
            from bench.publish import bench_publish

            for n_windows in args.reader_windows or [10_000, 100_000]:
                suffix = "" if n_windows == 10_000 else f"_{n_windows // 1000}k"
                bench_publish(work, figures, n_windows, suffix, write_synthetic_index=write_synthetic_index, say=say)
        if "freshness" in parts:
            from bench.freshness import bench_freshness

            bench_freshness(
                work,
                figures,
                base_env=base_env,
                run_measured=run_measured,
                process_cpu_s=process_cpu_s,
                **({"idle_s": float(os.environ["HUGINN_BENCH_IDLE_S"])} if "HUGINN_BENCH_IDLE_S" in os.environ else {}),
            )
        if "scale" in parts:
            bench_scale(work, figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["bench_seconds"] = round(time.perf_counter() - started, 1)
    result = {
        "name": name,
        "command": " ".join([Path(sys.executable).name, "bench/bench.py", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "figures": figures,
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for key, value in figures.items():
        if key not in HEADLINE:
            print(f"  {key}: {value}")
    print(f"# machine: {json.dumps(result['machine'])}")
    print(f"# results: bench/results/{name}.json")
    for key in HEADLINE:
        if key in figures:
            print(f"{key}: {figures[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
