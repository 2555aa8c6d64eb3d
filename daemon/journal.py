"""The journal: one JSON object per line on stderr, which systemd-journald keeps.

Owns: the structlog configuration (``configure``), loggers with bound context (``get_logger``),
and the last line of defence against logging a secret (``redact_secrets``): any key named like a
credential is masked whole, and any string that looks like a Matrix access token, a bearer header
or an ``access_token=`` query parameter is masked wherever it appears, nested values included;
every string then passes ``daemon.config.public_text`` (URL userinfo, query and fragment go,
and whatever the chat scrubber would redact).
Records from the standard ``logging`` module (nio, httpx, aiohttp) go through the same chain, at
WARNING or above, so a library cannot leak a token around us either.

Must not: be the only protection. Callers never pass a token to a logger; this catches mistakes.

Every line has ``event`` (a snake_case name, never free text), ``level`` and ``ts`` (ISO 8601,
UTC), plus the context bound with ``get_logger(**bind)`` or passed at the call.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from typing import Any, MutableMapping, TextIO

import structlog
from structlog.typing import Processor

from daemon.config import public_text

MASK = "[redacted]"
LEVELS = ("debug", "info", "warning", "error", "critical")

# A key is a credential when one of its ``_``/``-``/``.`` separated parts is one of these words...
_SECRET_KEY_PARTS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "passphrase",
        "secret",
        "authorization",
        "apikey",
        "cookie",
        "credential",
        "credentials",
    }
)
# ...or it contains one of these spellings outright (``apiKey``, ``x-api-key``, ``accessToken``).
_SECRET_KEY_SUBSTRINGS = ("api_key", "api-key", "apikey", "accesstoken", "access_token", "password", "secret")
# ...unless it names where a secret lives or how big something is, not the secret itself.
_HARMLESS_LAST_PARTS = frozenset({"file", "path", "dir", "count", "len", "length", "type"})

# Synapse (syt_/syr_) and Matrix Authentication Service (mat_/mar_/mct_/mcr_) token shapes,
# bearer headers, and tokens passed as URL query parameters.
_SECRET_VALUE = re.compile(
    r"\b(?:syt|syr|mat|mar|mct|mcr)_[A-Za-z0-9_\-]{4,}"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=\-]+"
    r"|(?i:\baccess_token=)[^&\s\"']+"
)

_STDLIB_HANDLER_NAME = "huginn-chat-journal"


# Keys are field names from the code (a few dozen), tested on every line: each answer once.
@functools.lru_cache(maxsize=1024)
def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    parts = [part for part in re.split(r"[_\-.]", lowered) if part]
    if parts and parts[-1] in _HARMLESS_LAST_PARTS:
        return False
    return any(part in _SECRET_KEY_PARTS for part in parts) or any(s in lowered for s in _SECRET_KEY_SUBSTRINGS)


def _mask_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {
            key: (MASK if isinstance(key, str) and _is_secret_key(key) else _mask_value(item))
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_mask_value(item) for item in value]
    # Anything else (an exception, a path, a URL object) would be rendered with str() anyway:
    # render it here, so its text is masked like any string.
    # Then what an operator's mistake can carry: URL userinfo, queries and fragments, and any
    # credential the chat scrubber knows (a token given where a path belongs, say).
    return public_text(_SECRET_VALUE.sub(_mask_match, value if isinstance(value, str) else str(value)))


def _mask_match(match: re.Match[str]) -> str:
    text = match.group(0)
    lowered = text.lower()
    if lowered.startswith("bearer"):
        return text[: len("bearer")] + " " + MASK
    if lowered.startswith("access_token="):
        return text[: len("access_token=")] + MASK
    return MASK


def redact_secrets(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: mask credential-named keys and token-shaped strings, recursively."""
    for key in list(event_dict):
        if key in ("event", "level", "ts"):
            if isinstance(event_dict[key], str):
                event_dict[key] = _mask_value(event_dict[key])
            continue
        if _is_secret_key(key):
            event_dict[key] = MASK
        else:
            event_dict[key] = _mask_value(event_dict[key])
    return event_dict


def _render(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def configure(stream: TextIO | None = None, level: str = "info") -> None:
    """JSON lines to ``stream`` (stderr by default) for records at ``level`` or above."""
    if level.lower() not in LEVELS:
        raise ValueError(f"level: {level!r} is not one of {', '.join(LEVELS)}")
    stream = stream if stream is not None else sys.stderr
    numeric_level = logging.getLevelName(level.upper())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.JSONRenderer(serializer=lambda value, **_: _render(value))],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(stream)
    handler.set_name(_STDLIB_HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(serializer=lambda value, **_: _render(value)),
            ],
        )
    )
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _STDLIB_HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    # Libraries are chatty at INFO/DEBUG (request lines with URLs); only their warnings matter.
    root.setLevel(max(numeric_level, logging.WARNING))


def get_logger(**bind: Any) -> Any:
    """A structlog logger with ``bind`` as context on every line (e.g. ``room_id=...``)."""
    return structlog.get_logger().bind(**bind)
