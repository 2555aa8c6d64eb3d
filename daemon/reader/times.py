"""The time values a search's ``after`` / ``before`` may hold, turned into unix milliseconds.

Owns: the one grammar for times, used by the reader (the authority: socket clients, the CLI and
the MCP server all get its meaning) and by the stdlib-only CLI client to check an argument before
it connects. A value is absolute (unix ms, ISO 8601) or relative to a ``now`` the caller passes
in: a duration back from now (``90m``, ``36h``, ``2d``, ``1w``), or a calendar word (``today``,
``yesterday``, ``this week``, ``last week``), optionally followed by an IANA zone
(``yesterday Europe/Berlin``; UTC when none is given).

Every value names one instant, the same for ``after`` and ``before``: a calendar word is the
start of that day (00:00) or of that ISO week (Monday 00:00) in the zone. So ``--after yesterday
--before today`` is yesterday, and ``--after "last week" --before "this week"`` is last week.

Must not: import anything outside the standard library (``zoneinfo`` is the zone database) and
``daemon.errors``, read the clock itself (``now_ms`` is always passed, so a continued listing can
resolve a relative time exactly as its first page did), or echo the value in an error (it may be
a query typed by a person).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from daemon.errors import UsageError

MAX_UNIX_MS = 10**16 - 1  # the most a string of digits may say; an integer is held to the same
_UNIX_MS = re.compile(r"^\d{1,16}$")
# "2d", "36h", "90m", "1w": minutes, hours, days, weeks back from now. No months or years: their
# length is not fixed, and "m" is minutes (as in most chat clients' "last 90m").
_DURATION = re.compile(r"^(\d{1,6})\s*(m|min|h|d|w)$", re.IGNORECASE)
_UNIT_MS = {"m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
_CALENDAR = ("today", "yesterday", "this week", "last week")
_CALENDAR_WORDS = re.compile(r"^(today|yesterday|this\s+week|last\s+week)(?:\s+(\S+))?$", re.IGNORECASE)

FORMS = "ISO 8601, unix milliseconds, 90m/36h/2d/1w, or today/yesterday/this week/last week [ZONE]"


class TimeError(UsageError, ValueError):
    """A value that is not a time of this grammar; ``message`` says what is accepted."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """A parsed time. ``absolute_ms`` for a fixed instant; else ``back_ms`` (a duration back from
    now) or ``calendar`` (one of ``_CALENDAR``) in ``zone`` (an IANA name, None = UTC)."""

    absolute_ms: int | None = None
    back_ms: int | None = None
    calendar: str | None = None
    zone: str | None = None

    @property
    def relative(self) -> bool:
        return self.absolute_ms is None

    def resolve(self, now_ms: int) -> int:
        if self.absolute_ms is not None:
            return self.absolute_ms
        if self.back_ms is not None:
            return max(0, now_ms - self.back_ms)
        zone: tzinfo = ZoneInfo(self.zone) if self.zone else timezone.utc
        local = datetime.fromtimestamp(now_ms / 1000, tz=zone)
        midnight = datetime(local.year, local.month, local.day, tzinfo=zone)
        if self.calendar == "yesterday":
            midnight = _day_shift(midnight, -1, zone)
        elif self.calendar in ("this week", "last week"):
            midnight = _day_shift(midnight, -midnight.weekday() - (7 if self.calendar == "last week" else 0), zone)
        return max(0, int(midnight.timestamp() * 1000))


def _day_shift(midnight: datetime, days: int, zone: tzinfo) -> datetime:
    """Midnight ``days`` calendar days away, in the zone: the wall date moves, so a day across a
    daylight-saving change is 23 or 25 hours, as people count days."""
    moved = midnight.date() + timedelta(days=days)
    return datetime(moved.year, moved.month, moved.day, tzinfo=zone)


def parse_spec(value: Any) -> TimeSpec:
    """Parse without resolving. Raises ``TimeError``."""
    if isinstance(value, bool):
        raise TimeError(f"must be {FORMS}")
    if isinstance(value, int):
        if value < 0:
            raise TimeError("must not be negative")
        if value > MAX_UNIX_MS:
            raise TimeError(f"must be at most {MAX_UNIX_MS} (unix milliseconds)")
        return TimeSpec(absolute_ms=value)
    if not isinstance(value, str) or not value.strip():
        raise TimeError(f"must be {FORMS}")
    text = " ".join(value.split())
    if _UNIX_MS.match(text):
        return TimeSpec(absolute_ms=int(text))
    duration = _DURATION.match(text)
    if duration:
        return TimeSpec(back_ms=int(duration.group(1)) * _UNIT_MS[duration.group(2).lower()])
    calendar = _CALENDAR_WORDS.match(text)
    if calendar:
        word = " ".join(calendar.group(1).lower().split())
        zone = calendar.group(2)
        if zone is not None:
            zone = _check_zone(zone)
        return TimeSpec(calendar=word, zone=zone)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TimeError(f"must be {FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise TimeError("must not be before 1970")
    if millis > MAX_UNIX_MS:
        raise TimeError(f"must be at most {MAX_UNIX_MS} (unix milliseconds)")
    return TimeSpec(absolute_ms=millis)


def _check_zone(name: str) -> str | None:
    """An IANA zone name (``Europe/Berlin``, ``UTC``); None for UTC itself."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return None
    # ZoneInfo also accepts paths; keep to names of the zone database (letters, digits, _+-/).
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*", name) or ".." in name:
        raise TimeError("the zone must be an IANA name such as Europe/Berlin")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise TimeError("the zone is not in the time zone database (an IANA name such as Europe/Berlin)") from None
    return name


def wire_value(value: Any) -> Any:
    """What a client sends for a value that ``parse_spec`` accepted: an absolute time as unix ms
    (so the reader reads it exactly), a relative one as the normalised text (so the reader's clock
    resolves it)."""
    spec = parse_spec(value)
    if spec.absolute_ms is not None:
        return spec.absolute_ms
    return spec_text(spec)


def spec_text(spec: TimeSpec) -> str:
    """The normalised text of a relative spec: the same spelling however it was typed."""
    if spec.back_ms is not None:
        for unit in ("w", "d", "h"):
            if spec.back_ms % _UNIT_MS[unit] == 0:
                return f"{spec.back_ms // _UNIT_MS[unit]}{unit}"
        return f"{spec.back_ms // _UNIT_MS['m']}m"
    if spec.calendar is not None:
        return spec.calendar + (f" {spec.zone}" if spec.zone else "")
    return str(spec.absolute_ms)
