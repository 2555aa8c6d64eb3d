"""The refresher against a real Synapse behind a fault-injecting proxy (devtools/fault_proxy.py):
429 with retry_after_ms, 502, 503, slow answers, connections cut mid-page, malformed and truncated
JSON. Each room's stored windows must equal a clean run's; a room that stays broken fails alone,
keeps no cursor past what was stored, and converges on the next run; the summary counts retries
and failures; the journal names each faulty call once.

The retry mechanism itself is daemon/refresher/retry.py (unit tests: tests/unit/test_retry.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from daemon.index.remote_writer import RemoteIndexWriter
from daemon.refresher.matrix import NioMatrixSource
from daemon.refresher.retry import RetryPolicy
from daemon.refresher.run import Refresher, RefreshOptions
from daemon.refresher.summary import RunSummary
from devtools.fault_proxy import FaultProxy, Rule
from scope import Policy
from tests.fakes import FakeEmbedder, ListLog

pytestmark = pytest.mark.synapse

FAST = RetryPolicy(attempts=8, backoff_s=0.05, max_wait_s=5, room_budget_s=60, run_budget_s=240)


def _writer() -> RemoteIndexWriter:
    from qdrant_client import QdrantClient

    return RemoteIndexWriter(QdrantClient(":memory:"), "faults")


def _refresh(
    base_url: str,
    token: str,
    rooms: list[str],
    index: RemoteIndexWriter,
    *,
    retry: RetryPolicy | None,
    timeout: float = 30,
) -> tuple[RunSummary, ListLog]:
    log = ListLog()

    async def main() -> RunSummary:
        async with NioMatrixSource(base_url, token, timeout=timeout) as matrix:
            return await Refresher(
                matrix=matrix,
                index=index,
                embedder=FakeEmbedder(),
                policy=Policy.build(allowed=tuple(rooms)),
                log=log,
                options=RefreshOptions(page_size=10, checkpoint_events=20, retry=retry),
            ).run()

    return asyncio.run(main()), log


def _through(proxy: FaultProxy, token: str, rooms: list[str], index: RemoteIndexWriter, **kw: Any):
    with proxy:
        return _refresh(proxy.url, token, rooms, index, **kw)


def _content(index: RemoteIndexWriter, room_id: str) -> dict[str, str]:
    """point id -> the payload as stored, for one room."""
    return {p["chunk_id"]: json.dumps(p, sort_keys=True) for p in index.windows_in_span(room_id, 0, 10**14)}


@pytest.fixture(scope="module")
def rooms(synapse):
    alice = synapse.new_actor("alice")
    reader = synapse.new_actor("reader")
    ids = []
    for name in ("flaky", "broken", "calm"):
        room = alice.create_room(name=name)
        reader.join(room)
        alice.send_many(room, [f"{name} message {i}: the river is high near the mill" for i in range(45)])
        ids.append(room)
    clean = _writer()
    summary, _ = _refresh(synapse.base_url, reader.account.access_token, ids, clean, retry=None)
    assert summary.rooms_failed == 0 and summary.windows_written > 0
    return {
        "ids": dict(zip(("flaky", "broken", "calm"), ids)),
        "token": reader.account.access_token,
        "clean": {r: _content(clean, r) for r in ids},
    }


def test_every_fault_is_retried_and_the_result_equals_a_clean_run(synapse, rooms):
    flaky, broken, calm = (rooms["ids"][n] for n in ("flaky", "broken", "calm"))
    msgs = f"/rooms/{flaky}/messages"
    proxy = FaultProxy(
        synapse.base_url,
        rules=[
            Rule("/account/whoami", "429", retry_after_ms=300),
            Rule(msgs, "502", after=0),
            Rule(msgs, "503", after=1),
            Rule(msgs, "reset", after=2),
            Rule(msgs, "malformed", after=3),
            Rule(msgs, "truncated", after=4),
            Rule(msgs, "slow", after=5, delay_s=3),
            Rule(msgs, "429", after=6, times=2, retry_after_ms=100),
            # The broken room answers two pages, then 502 for good: it fails after its checkpoint.
            Rule(f"/rooms/{broken}/messages", "502", after=3, times=10_000),
        ],
    )
    index = _writer()
    started = time.monotonic()
    summary, log = _through(proxy, rooms["token"], list(rooms["ids"].values()), index, retry=FAST, timeout=1.5)
    elapsed = time.monotonic() - started

    fired = {fault for fault, _ in proxy.hits}
    assert fired >= {"429", "502", "503", "reset", "malformed", "truncated", "slow"}
    assert _content(index, flaky) == rooms["clean"][flaky]
    assert _content(index, calm) == rooms["clean"][calm]
    # One bad room fails alone, and what it stored before failing is behind its cursor.
    assert summary.rooms_failed == 1 and summary.failed_rooms == [broken]
    assert summary.failures == {"homeserver_error": 1}
    cursor = index.get_cursor(broken)
    assert cursor is not None
    stored_ids = {e for p in index.windows_in_span(broken, 0, 10**14) for e in p["event_ids"]}
    assert cursor.last_event_id in stored_ids
    assert summary.exit_code == 1
    # Counted: every retried fault of the flaky room, and the broken room's tries.
    assert summary.homeserver_retries >= 9 + (FAST.attempts - 1)
    assert {"rate_limited", "http_502", "http_503", "network", "malformed_body"} <= set(summary.homeserver_faults)
    # Journalled once per call, never once per attempt.
    faults = log.events("homeserver_fault")
    assert len(faults) < len(proxy.hits)
    assert sum(line["faults"].get("http_502", 0) for line in faults if broken in line["call"]) == FAST.attempts
    assert [line["outcome"] for line in faults if broken in line["call"]] == ["gave_up"]
    assert all(rooms["token"] not in json.dumps(line) for line in log.records)
    # retry_after_ms was honoured (300 ms on whoami, 2 x 100 ms on the flaky room), and the
    # bounded budgets kept the whole run short.
    whoami = [line for line in faults if line["call"] == "whoami"]
    assert whoami and whoami[0]["faults"] == {"rate_limited": 1}
    assert elapsed >= 0.5
    assert elapsed < FAST.run_budget_s

    # The next run, with the homeserver healthy, converges.
    summary, _ = _refresh(synapse.base_url, rooms["token"], list(rooms["ids"].values()), index, retry=FAST)
    assert summary.rooms_failed == 0
    for room in rooms["ids"].values():
        assert _content(index, room) == rooms["clean"][room]


def test_without_retries_a_single_502_fails_the_room(synapse, rooms):
    """The mechanism check: with ``retry=None`` the same single fault fails the room."""
    flaky = rooms["ids"]["flaky"]
    proxy = FaultProxy(synapse.base_url, rules=[Rule(f"/rooms/{flaky}/messages", "502")])
    summary, _ = _through(proxy, rooms["token"], [flaky], _writer(), retry=None)
    assert summary.failed_rooms == [flaky]
    assert summary.homeserver_retries == 0
