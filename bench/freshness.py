"""Freshness and idle cost at the shipped timer cadence, on a real Synapse.

Owns: ``bench_freshness`` — a small community seeded once, a first full refresh, the real reader
(``huginn-chat serve``), then a loop that runs ``huginn-chat refresh`` as the shipped timer does
(``OnUnitInactiveSec`` after each run ends, plus up to ``RandomizedDelaySec``) while messages are
sent at random moments over several periods; each message's freshness is the time from its send
until ``huginn-chat search`` finds it (``freshness_p95_s``). Then an idle stretch with nothing sent:
the CPU seconds of every refresh run (from wait4) and of the reader (/proc) over the stretch,
per hour, over 3,600 (``idle_core_share``). The stretch should cover ``scope_recheck_s`` so the
periodic full run that re-reads scope facts is in it.

Must not: be imported by the product, print message text or a token, or leave a process behind.
"""

from __future__ import annotations

import configparser
import json
import random
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.reader_process import ReaderProcess, cli, run_cli

TIMER = Path(__file__).resolve().parent.parent / "deploy" / "systemd" / "huginn-chat-refresh.timer"


def _span_s(value: str) -> float:
    value = value.strip()
    for suffix, factor in (("min", 60), ("ms", 0.001), ("s", 1), ("h", 3600)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def shipped_cadence() -> tuple[float, float]:
    """(OnUnitInactiveSec, RandomizedDelaySec) of the shipped timer, in seconds."""
    parser = configparser.ConfigParser(strict=False)
    parser.read(TIMER)
    timer = parser["Timer"]
    return _span_s(timer["OnUnitInactiveSec"]), _span_s(timer.get("RandomizedDelaySec", "0"))


def bench_freshness(
    work: Path,
    figures: dict[str, Any],
    *,
    base_env: Any,
    run_measured: Any,
    process_cpu_s: Any,
    periods: int = 6,
    messages: int = 20,
    idle_s: float = 330.0,
) -> None:
    from devtools.synapse import SynapseServer

    period, delay = shipped_cadence()
    rng = random.Random(31)
    tag = uuid.uuid4().hex[:6]
    with SynapseServer() as server:
        owner = server.actor(server.register("owner"))
        service = server.register("huginn")
        rooms = [owner.create_room(name=f"fresh {n}", preset="public_chat") for n in range(4)]
        for room in rooms:
            for i in range(20):
                owner.send_text(room, f"warm up line {i} about the build server and the weekend")
        token_file = work / "fresh-token"
        token_file.write_text(service.access_token)
        token_file.chmod(0o600)
        env = base_env(
            work / "fresh-state",
            HUGINN_CHAT_HOMESERVER=server.base_url,
            HUGINN_CHAT_TOKEN_FILE=str(token_file),
            HUGINN_CHAT_ROOMS=json.dumps(rooms),
            HUGINN_CHAT_SOCKET=str(work / "fresh.sock"),
            HUGINN_CHAT_READER_PRIVATE_DIR=str(work / "fresh-reader"),
        )
        code, _, _, tail = run_measured(cli("refresh"), env)
        if code != 0:
            raise SystemExit(f"freshness: first refresh exited {code}:\n{tail}")

        with ReaderProcess(env, work / "fresh-reader.log", ready_s=300, embedder_loaded=True) as reader:
            assert reader.process is not None
            stop = threading.Event()
            runs: list[tuple[float, float, str]] = []  # (ended at, CPU s, idle or full)

            def timer_loop() -> None:
                while not stop.is_set():
                    cpu: list[float] = []
                    _, _, _, tail = run_measured(cli("refresh"), env, cpu)
                    runs.append((time.monotonic(), cpu[0], "idle" if '"run_idle"' in tail else "full"))
                    stop.wait(period + rng.uniform(0, delay))

            looping = threading.Thread(target=timer_loop, daemon=True)
            looping.start()
            try:
                started = time.monotonic()
                moments = sorted(rng.uniform(0, periods * period) for _ in range(messages))
                sent: dict[str, float] = {}
                found: dict[str, float] = {}
                pending: list[str] = []
                queue = list(moments)
                while queue or pending:
                    now = time.monotonic() - started
                    while queue and queue[0] <= now:
                        queue.pop(0)
                        word = f"fresh{tag}n{len(sent)}"
                        owner.send_text(rng.choice(rooms), f"{word} is the word of the moment")
                        sent[word] = time.monotonic()
                        pending.append(word)
                    for word in list(pending):
                        proc = run_cli(env, "search", word, "--json", timeout=60)
                        if proc.returncode == 0 and word in proc.stdout:
                            found[word] = time.monotonic()
                            pending.remove(word)
                        elif time.monotonic() - sent[word] > 300:
                            raise SystemExit(f"freshness: a message was not found in 300 s ({word})")
                    time.sleep(0.5)
                fresh = sorted(found[w] - sent[w] for w in sent)

                # The idle stretch: nothing sent; every run and the reader measured.
                idle_from = time.monotonic()
                reader_before = process_cpu_s(reader.process.pid)
                stop.wait(idle_s)
                idle_wall = time.monotonic() - idle_from
                reader_cpu = process_cpu_s(reader.process.pid) - reader_before
            finally:
                stop.set()
                looping.join(timeout=600)
            in_stretch = [r for r in runs if r[0] >= idle_from]
            refresh_cpu = sum(cpu for _, cpu, _ in in_stretch)
            idle_runs = [cpu for _, cpu, kind in in_stretch if kind == "idle"]
            full_runs = [cpu for _, cpu, kind in in_stretch if kind == "full"]

    figures.update(
        {
            "freshness_period_s": period,
            "freshness_messages": len(fresh),
            "freshness_p50_s": round(statistics.median(fresh), 1),
            "freshness_p95_s": round(fresh[min(len(fresh) - 1, int(0.95 * len(fresh)))], 1),
            "freshness_max_s": round(fresh[-1], 1),
            "idle_stretch_s": round(idle_wall, 1),
            "idle_runs": len(idle_runs),
            "idle_full_runs": len(full_runs),
            "idle_run_cpu_s": round(statistics.median(idle_runs), 3) if idle_runs else None,
            "idle_refresher_cpu_s": round(refresh_cpu, 2),
            "idle_reader_cpu_s": round(reader_cpu, 2),
            "idle_core_share": round((refresh_cpu + reader_cpu) / idle_wall, 4),
        }
    )
