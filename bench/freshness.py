"""Freshness and idle cost of the shipped refresher units, on a real Synapse.

Owns: ``bench_freshness`` — a small community seeded once, a first full refresh, the real reader
(``huginn-chat serve``), the real follow service (``huginn-chat follow``, as
huginn-chat-follow.service runs it) and beside it a loop that runs ``huginn-chat refresh`` as the
shipped timer does (``OnUnitInactiveSec`` after each run ends, plus up to
``RandomizedDelaySec``), while messages are sent at random moments over ``send_s``; each message's
freshness is the time from its send until ``huginn-chat search`` finds it (``freshness_p95_s``).
Then an idle stretch with nothing sent: the CPU seconds of the follow process and the refreshes
it forked (its own and its reaped children's, /proc), of every timer run (wait4) and of the
reader (/proc) over the stretch, per hour, over 3,600 (``idle_core_share``). The stretch covers
two ``scope_recheck_s`` periods (the full runs that re-read scope facts) and two timer periods.

Must not: be imported by the product, print message text or a token, or leave a process behind.
"""

from __future__ import annotations

import configparser
import json
import random
import signal
import statistics
import subprocess
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.reader_process import REPO, ReaderProcess, cli, run_cli

UNITS = Path(__file__).resolve().parent.parent / "deploy" / "systemd"
TIMER = UNITS / "huginn-chat-refresh.timer"


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


def _cpu_with_children_s(pid: int) -> float:
    """User + system CPU seconds of a live process and of the children it has waited for."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    """A live process's resident memory now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _since(lines: list[dict[str, Any]], wall_from: float, event: str) -> int:
    return sum(
        1
        for line in lines
        if line.get("event") == event
        and datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp() >= wall_from
    )


def bench_freshness(
    work: Path,
    figures: dict[str, Any],
    *,
    base_env: Any,
    run_measured: Any,
    process_cpu_s: Any,
    send_s: float = 120.0,
    messages: int = 20,
    idle_s: float | None = None,
) -> None:
    from daemon.config import Settings
    from devtools.synapse import SynapseServer, stop_process

    period, delay = shipped_cadence()
    # The last message's full run ends about when the stretch starts, so the scope rechecks due
    # 1x and 2x scope_recheck_s later both fall in a stretch a minute longer than two of them.
    idle_s = idle_s if idle_s is not None else 2 * Settings.model_fields["scope_recheck_s"].default + 60.0
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

        follow_log = work / "fresh-follow.log"
        with ReaderProcess(env, work / "fresh-reader.log", ready_s=300, embedder_loaded=True) as reader:
            assert reader.process is not None
            with open(follow_log, "wb") as out:
                follow = subprocess.Popen(
                    cli("follow"), env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            stop = threading.Event()
            runs: list[tuple[float, float, str]] = []  # (ended at, CPU s, idle, skipped or full)

            def timer_loop() -> None:
                while not stop.wait(period + rng.uniform(0, delay)):
                    cpu: list[float] = []
                    _, _, _, tail = run_measured(cli("refresh"), env, cpu)
                    kind = "idle" if '"run_idle"' in tail else "skipped" if '"run_skipped"' in tail else "full"
                    runs.append((time.monotonic(), cpu[0], kind))

            looping = threading.Thread(target=timer_loop, daemon=True)
            looping.start()
            try:
                started = time.monotonic()
                moments = sorted(rng.uniform(0, send_s) for _ in range(messages))
                sent: dict[str, float] = {}
                found: dict[str, float] = {}
                pending: list[str] = []
                queue = list(moments)
                while queue or pending:
                    if follow.poll() is not None:
                        raise SystemExit(
                            f"freshness: follow exited {follow.returncode}:\n{follow_log.read_text()[-3000:]}"
                        )
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

                # The idle stretch: nothing sent; the follow (with its refreshes), every timer run
                # and the reader measured.
                idle_from, idle_wall_from = time.monotonic(), time.time()
                reader_before = process_cpu_s(reader.process.pid)
                follow_before = _cpu_with_children_s(follow.pid)
                stop.wait(idle_s)
                idle_wall = time.monotonic() - idle_from
                reader_cpu = process_cpu_s(reader.process.pid) - reader_before
                follow_cpu = _cpu_with_children_s(follow.pid) - follow_before
                follow_rss_mb = _rss_mb(follow.pid)
            finally:
                stop.set()
                looping.join(timeout=600)
                follow.send_signal(signal.SIGTERM)
                try:
                    follow.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    stop_process(follow, 5.0)
            lines = [json.loads(line) for line in follow_log.read_text().splitlines() if line.startswith("{")]
            in_stretch = [r for r in runs if r[0] >= idle_from]
            timer_cpu = sum(cpu for _, cpu, _ in in_stretch)

    figures.update(
        {
            "freshness_timer_period_s": period,
            "freshness_follow_poll_s": Settings.model_fields["follow_poll_s"].default,
            "freshness_messages": len(fresh),
            "freshness_p50_s": round(statistics.median(fresh), 1),
            "freshness_p95_s": round(fresh[min(len(fresh) - 1, int(0.95 * len(fresh)))], 1),
            "freshness_max_s": round(fresh[-1], 1),
            "idle_stretch_s": round(idle_wall, 1),
            "idle_follow_cpu_s": round(follow_cpu, 2),
            "idle_follow_rss_mb": follow_rss_mb,
            "idle_follow_idle_runs": _since(lines, idle_wall_from, "run_idle"),
            "idle_follow_full_runs": _since(lines, idle_wall_from, "full_run_started"),
            "idle_timer_runs": len(in_stretch),
            "idle_timer_full_runs": sum(1 for *_, kind in in_stretch if kind == "full"),
            "idle_timer_cpu_s": round(timer_cpu, 2),
            "idle_reader_cpu_s": round(reader_cpu, 2),
            "idle_core_share": round((follow_cpu + timer_cpu + reader_cpu) / idle_wall, 4),
        }
    )
