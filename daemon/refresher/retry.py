"""Retries of homeserver calls: which failures are worth another try, how long to wait, and when
to give up — per call, per room and per run.

Owns: ``RetryingMatrix``, a ``MatrixSource`` that wraps another and retries its transient failures
(429 with the server's ``retry_after_ms``, 5xx, connection errors and timeouts, a 2xx answer whose
body was not the JSON it should be) with tenacity's exponential backoff and jitter; the deadlines
that bound one room's and one run's total waiting; the counts of retries and faults the run
summary reports; and one journal line per call that met a fault (never one per attempt).

Must not: retry a refusal (403, 404, a 4xx other than 429: the answer will not change), sleep past
a deadline, or log anything but the call's name (``MatrixError.what``) and the fault kinds — never
a token, a URL query or a body.

Why here and not in nio: nio's ``AsyncClientConfig`` retries 429s and connection errors, but not
5xx or malformed bodies, sleeps whatever ``retry_after_ms`` the server asks with no deadline, and
does it invisibly; the adapter turns its retries off (``max_limit_exceeded=0``, ``max_timeouts=0``)
so that every retry happens here, once, and is counted.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from daemon.ports import MatrixError, MatrixSource, Page, RoomsOverview, SyncChanges

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # per call, the first included
    backoff_s: float = 0.5  # the first wait's upper bound; doubles per retry, full jitter
    max_wait_s: float = 60.0  # no single wait longer (a larger retry_after_ms gives up instead)
    room_budget_s: float = 300.0  # all calls for one room, waits and answers together
    run_budget_s: float = 1800.0  # all calls of one run

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts: must be at least 1, got {self.attempts!r}")
        for name in ("backoff_s", "max_wait_s", "room_budget_s", "run_budget_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")


@dataclass
class RetryStats:
    retries: int = 0  # attempts beyond each call's first
    faults: Counter[str] = field(default_factory=Counter)  # kind -> attempts that met it
    gave_up: Counter[str] = field(default_factory=Counter)  # kind of the last fault -> calls abandoned


class BudgetSpent(MatrixError):
    """The room's or the run's time for homeserver calls is spent."""


def fault_kind(exc: BaseException) -> str | None:
    """The transient fault an exception shows, or None when another try would get the same answer."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if not isinstance(exc, MatrixError) or isinstance(exc, BudgetSpent):
        return None
    if exc.status is None:
        return "network"  # refused, reset mid-answer, timed out, truncated body
    if exc.status == 429 or exc.errcode == "M_LIMIT_EXCEEDED":
        return "rate_limited"
    if exc.status >= 500:
        return f"http_{exc.status}"
    if 200 <= exc.status < 300:
        return "malformed_body"  # the server said yes but the body was not the JSON it should be
    return None


class RetryingMatrix:
    """``MatrixSource`` with retries. ``begin_room`` starts a room's budget; calls outside a room
    (whoami, joined rooms, invites) count against the run's budget only."""

    def __init__(
        self,
        inner: MatrixSource,
        policy: RetryPolicy,
        log: Any,
        *,
        stats: RetryStats | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.log = log
        self.stats = stats if stats is not None else RetryStats()
        self._clock = clock
        self._sleep = sleep
        self._run_deadline = clock() + policy.run_budget_s
        self._room_deadline: float | None = None

    def begin_room(self, room_id: str) -> None:
        self._room_deadline = self._clock() + self.policy.room_budget_s

    def end_room(self) -> None:
        self._room_deadline = None

    def _deadline(self) -> float:
        return min(self._run_deadline, self._room_deadline or self._run_deadline)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after_ms", None)
        if isinstance(retry_after, (int, float)) and retry_after > 0:
            return float(retry_after) / 1000  # the server said how long; honour it exactly
        return float(wait_random_exponential(multiplier=self.policy.backoff_s, max=self.policy.max_wait_s)(state))

    def _stop(self, state: RetryCallState) -> bool:
        if state.attempt_number >= self.policy.attempts:
            return True
        upcoming = state.upcoming_sleep or 0.0
        return upcoming > self.policy.max_wait_s or self._clock() + upcoming >= self._deadline()

    async def _call(self, what: str, make: Callable[[], Awaitable[_T]]) -> _T:
        faults: Counter[str] = Counter()

        async def attempt() -> _T:
            remaining = self._deadline() - self._clock()
            if remaining <= 0:
                raise BudgetSpent(f"{what} (time budget spent)")
            try:
                # A slow answer may not outlast the budget: nio's request timeout alone would let
                # each try take its full length.
                return await asyncio.wait_for(make(), timeout=remaining)
            except BaseException as exc:
                kind = fault_kind(exc)
                if kind is not None:
                    faults[kind] += 1
                    self.stats.faults[kind] += 1
                raise

        def counted(state: RetryCallState) -> None:
            self.stats.retries += 1

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: fault_kind(exc) is not None),
            wait=self._wait,
            stop=self._stop,
            before_sleep=counted,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            result: _T = await retrying(attempt)
        except BaseException as exc:
            kind = fault_kind(exc)
            if faults:
                last = kind or "budget"
                self.stats.gave_up[last] += 1
                self.log.warning(
                    "homeserver_fault", call=what, faults=dict(faults), attempts=sum(faults.values()), outcome="gave_up"
                )
            if isinstance(exc, asyncio.TimeoutError):
                raise MatrixError(f"{what} (timed out)") from None
            raise
        if faults:
            self.log.info(
                "homeserver_fault",
                call=what,
                faults=dict(faults),
                attempts=sum(faults.values()) + 1,
                outcome="recovered",
            )
        return result

    # -- MatrixSource ------------------------------------------------------------------------

    async def whoami(self) -> str:
        return await self._call("whoami", self.inner.whoami)

    async def joined_rooms(self) -> list[str]:
        return await self._call("joined_rooms", self.inner.joined_rooms)

    async def invited_rooms(self) -> list[str]:
        return await self._call("invited_rooms", self.inner.invited_rooms)

    async def invites(self) -> dict[str, list[dict[str, Any]]]:
        return await self._call("invites", self.inner.invites)

    async def rooms_overview(self) -> RoomsOverview:
        return await self._call("invites", self.inner.rooms_overview)

    async def changes_since(self, since: str) -> SyncChanges:
        return await self._call("changes_since", lambda: self.inner.changes_since(since))

    async def room_summary(self, room_id_or_alias: str) -> dict[str, Any] | None:
        return await self._call(f"room_summary {room_id_or_alias}", lambda: self.inner.room_summary(room_id_or_alias))

    async def room_aliases(self, room_id: str) -> list[str]:
        return await self._call(f"room_aliases {room_id}", lambda: self.inner.room_aliases(room_id))

    async def membership(self, room_id: str) -> dict[str, Any] | None:
        return await self._call(f"membership {room_id}", lambda: self.inner.membership(room_id))

    async def leave(self, room_id: str) -> None:
        await self._call(f"leave {room_id}", lambda: self.inner.leave(room_id))

    async def resolve_alias(self, alias: str) -> str | None:
        return await self._call(f"resolve_alias {alias}", lambda: self.inner.resolve_alias(alias))

    async def join(self, room_id_or_alias: str) -> str:
        return await self._call(f"join {room_id_or_alias}", lambda: self.inner.join(room_id_or_alias))

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        return await self._call(f"room_state {room_id}", lambda: self.inner.room_state(room_id))

    async def direct_rooms(self) -> dict[str, list[str]]:
        return await self._call("direct_rooms", self.inner.direct_rooms)

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        return await self._call(f"messages {room_id}", lambda: self.inner.messages(room_id, start, limit))

    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        return await self._call(f"event {room_id} {event_id}", lambda: self.inner.event(room_id, event_id))

    async def close(self) -> None:
        await self.inner.close()
