"""Times on the command line and in requests: ISO 8601 or unix milliseconds.

Owns: turning a user's time into unix ms, with an error naming the field. Standard library only:
the CLI client imports it.
"""

from __future__ import annotations

from datetime import datetime, timezone


class TimeParseError(ValueError):
    pass


def parse_time_ms(value: object, field: str) -> int:
    """`1732960000000` (unix ms), `2026-11-30`, `2026-11-30T11:16`, `2026-11-30T11:16:05Z`,
    `2026-11-30T11:16:05+01:00`. A time without a zone is UTC."""
    if isinstance(value, bool):
        raise TimeParseError(f"{field}: expected ISO 8601 or unix ms, got {value!r}")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        ms = int(value.strip())
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise TimeParseError(f"{field}: {value!r} is not ISO 8601 or unix ms") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        ms = int(parsed.timestamp() * 1000)
    else:
        raise TimeParseError(f"{field}: expected ISO 8601 or unix ms, got {value!r}")
    if not 0 <= ms < 10**14:
        raise TimeParseError(f"{field}: {value!r} is out of range")
    return ms
