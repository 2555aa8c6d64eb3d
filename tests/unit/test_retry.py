"""Retries of homeserver calls (daemon/refresher/retry.py), on a fake clock: what is retried, how
long each wait is, when a room's or a run's budget stops the tries, and what is counted and
journalled. The same mechanism against a real Synapse behind a fault proxy:
tests/integration/test_homeserver_faults.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.ports import MatrixError, Page
from daemon.refresher.retry import RetryingMatrix, RetryPolicy, fault_kind
from tests.fakes import ListLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """A MatrixSource whose ``messages`` raises the queued errors first, then answers."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Page(events=[{"event_id": "$e"}], end="t1")


def _source(errors: list[BaseException], policy: RetryPolicy | None = None, clock: Clock | None = None):
    clock = clock or Clock()
    log = ListLog()
    inner = Flaky(errors)
    source = RetryingMatrix(inner, policy or RetryPolicy(), log, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    return source, inner, clock, log


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize(
    "exc, kind",
    [
        (MatrixError("m", 429, "M_LIMIT_EXCEEDED", 100), "rate_limited"),
        (MatrixError("m", 502), "http_502"),
        (MatrixError("m", 503), "http_503"),
        (MatrixError("m (ServerDisconnectedError)"), "network"),
        (MatrixError("m (unreadable body)", 200), "malformed_body"),
        (asyncio.TimeoutError(), "timeout"),
        (MatrixError("m", 403, "M_FORBIDDEN"), None),
        (MatrixError("m", 404, "M_NOT_FOUND"), None),
        (ValueError("x"), None),
    ],
)
def test_fault_kinds(exc, kind):
    assert fault_kind(exc) == kind


def test_a_429_waits_exactly_what_the_server_asked():
    source, inner, clock, _ = _source(
        [
            MatrixError("messages !r", 429, "M_LIMIT_EXCEEDED", 1500),
            MatrixError("messages !r", 429, "M_LIMIT_EXCEEDED", 250),
        ]
    )
    page = _run(source.messages("!r", None, 10))
    assert page.end == "t1" and inner.calls == 3
    assert clock.sleeps == [1.5, 0.25]
    assert source.stats.retries == 2 and source.stats.faults == {"rate_limited": 2}


def test_5xx_resets_and_bad_bodies_are_retried_with_growing_backoff():
    errors = [
        MatrixError("m", 502),
        MatrixError("m", 503),
        MatrixError("m (ClientOSError)"),
        MatrixError("m (unreadable body)", 200),
    ]
    source, inner, clock, _ = _source(errors, RetryPolicy(attempts=6, backoff_s=1.0))
    assert _run(source.messages("!r", None, 10)).end == "t1"
    assert inner.calls == 5 and len(clock.sleeps) == 4
    assert all(0 <= s <= 2**i for i, s in enumerate(clock.sleeps, start=1))
    assert source.stats.faults == {"http_502": 1, "http_503": 1, "network": 1, "malformed_body": 1}


def test_a_refusal_is_not_retried():
    source, inner, clock, _ = _source([MatrixError("m", 403, "M_FORBIDDEN")])
    with pytest.raises(MatrixError, match="403"):
        _run(source.messages("!r", None, 10))
    assert inner.calls == 1 and clock.sleeps == [] and source.stats.retries == 0


def test_attempts_are_bounded_and_the_last_error_reaches_the_caller():
    source, inner, _, log = _source([MatrixError("m", 502)] * 50, RetryPolicy(attempts=4, backoff_s=0.01))
    with pytest.raises(MatrixError, match="502"):
        _run(source.messages("!r", None, 10))
    assert inner.calls == 4 and source.stats.retries == 3 and source.stats.gave_up == {"http_502": 1}


def test_a_room_budget_stops_the_tries_and_the_next_room_gets_its_own():
    policy = RetryPolicy(attempts=100, backoff_s=1.0, room_budget_s=10.0, run_budget_s=1000.0)
    source, inner, clock, _ = _source([MatrixError("m", 429, None, 4000)] * 50, policy)
    source.begin_room("!a")
    with pytest.raises(MatrixError):
        _run(source.messages("!a", None, 10))
    assert sum(clock.sleeps) <= 10.0 and inner.calls == 3  # waits 4 + 4, a third 4 would pass 10
    source.end_room()
    inner.errors = [MatrixError("m", 429, None, 4000)]
    source.begin_room("!b")
    assert _run(source.messages("!b", None, 10)).end == "t1"


def test_the_run_budget_bounds_every_room_together():
    policy = RetryPolicy(attempts=100, backoff_s=1.0, room_budget_s=100.0, run_budget_s=15.0)
    source, inner, clock, _ = _source([MatrixError("m", 429, None, 4000)] * 50, policy)
    for room in ("!a", "!b", "!c"):
        source.begin_room(room)
        with pytest.raises(MatrixError):
            _run(source.messages(room, None, 10))
    assert clock.now - 1000.0 <= 15.0


def test_a_wait_longer_than_max_wait_gives_up_rather_than_sleeping():
    source, inner, clock, _ = _source([MatrixError("m", 429, None, 3_600_000)], RetryPolicy(max_wait_s=60))
    with pytest.raises(MatrixError, match="429"):
        _run(source.messages("!r", None, 10))
    assert clock.sleeps == [] and inner.calls == 1


def test_the_journal_names_each_faulty_call_once_not_once_per_attempt():
    errors = [MatrixError("messages !r", 502)] * 3 + [MatrixError("messages !r", 429, None, 10)]
    source, _, _, log = _source(errors)
    _run(source.messages("!r", None, 10))
    lines = log.events("homeserver_fault")
    assert len(lines) == 1
    assert lines[0]["faults"] == {"http_502": 3, "rate_limited": 1} and lines[0]["outcome"] == "recovered"
    assert lines[0]["attempts"] == 5


def test_a_call_with_no_fault_writes_no_journal_line():
    source, _, _, log = _source([])
    _run(source.messages("!r", None, 10))
    assert not log.events("homeserver_fault")
