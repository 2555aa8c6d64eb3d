"""The journal: one JSON object per line on stderr, which systemd-journald keeps; on a terminal,
aligned human lines instead (structlog's console renderer), unless ``--log-format json``.

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
from typing import Any, Callable, MutableMapping, TextIO

import structlog
from structlog.typing import Processor

from chunker.scrub import may_hold_secrets
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
_TOKEN_PREFIXES = ("syt_", "syr_", "mat_", "mar_", "mct_", "mcr_")
_SECRET_VALUE = re.compile(
    r"\b(?:" + "|".join(_TOKEN_PREFIXES) + r")[A-Za-z0-9_\-]{4,}"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=\-]+"
    r"|(?i:\baccess_token=)[^&\s\"']+"
)
# A match of _SECRET_VALUE holds one of these in the lowered text (a test before the regex).
_SECRET_VALUE_NEEDS = (*_TOKEN_PREFIXES, "bearer", "access_token=")

_STDLIB_HANDLER_NAME = "huginn-chat-journal"
_OWN_FIELDS = ("event", "level", "ts")  # never masked whole, whatever their names say


# Keys are field names from the code (a few dozen), tested on every line: each answer once.
@functools.lru_cache(maxsize=1024)
def _is_secret_key(key: str) -> bool:
    lowered = key.lower()
    parts = [part for part in re.split(r"[_\-.]", lowered) if part]
    if parts and parts[-1] in _HARMLESS_LAST_PARTS:
        return False
    return any(part in _SECRET_KEY_PARTS for part in parts) or any(s in lowered for s in _SECRET_KEY_SUBSTRINGS)


def _mask_value(value: Any, plain: frozenset[str] = frozenset()) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {
            key: (MASK if isinstance(key, str) and _is_secret_key(key) else _mask_value(item, plain))
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_mask_value(item, plain) for item in value]
    # Anything else (an exception, a path, a URL object) would be rendered with str() anyway:
    # render it here, so its text is masked like any string.
    text = value if isinstance(value, str) else str(value)
    if text in plain:
        return text
    # Then what an operator's mistake can carry: URL userinfo, queries and fragments, and any
    # credential the chat scrubber knows (a token given where a path belongs, say).
    return public_text(_SECRET_VALUE.sub(_mask_match, text))


def _texts_of(value: Any, texts: list[str]) -> bool:
    """Every text ``_mask_value`` would mask in ``value``, added to ``texts``; and whether
    ``_mask_value`` would give ``value`` back as it is when each of those texts is left unchanged:
    nothing but None, bools, numbers, strings, lists, tuples (rendered as lists all the same) and
    dicts without a credential-named key."""
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str):
            texts.append(value)
        return True
    if isinstance(value, dict):
        same = True
        for key, item in value.items():
            if isinstance(key, str) and _is_secret_key(key):
                same = False
            else:
                same = _texts_of(item, texts) and same
        return same
    if isinstance(value, (list, tuple, set, frozenset)):
        same = isinstance(value, (list, tuple))
        for item in value:
            same = _texts_of(item, texts) and same
        return same
    texts.append(str(value))
    return False


def _plain_texts(texts: list[str]) -> frozenset[str]:
    """Those of ``texts`` that ``_mask_value`` returns unchanged, decided together: each has no
    ``://`` (so no URL to shorten), no match of ``_SECRET_VALUE`` and nothing the scrubber could
    redact (``may_hold_secrets``). A line of ~100 ids cost ~1 ms one string at a time, most of a
    reader's audit line (bench: reader_vs_raw_ratio). ``_SECRET_VALUE`` is searched in the texts
    joined by a NUL first, and only where the joined text holds a literal every match needs: a
    match inside one text is a match there too (``\\b`` sees the NUL as it sees the text's own
    end), so only a hit there makes it look at each text."""
    texts = list(dict.fromkeys(texts))  # an id is often there twice (window_ids, returned)
    joined = "\x00".join(texts)
    lowered = joined.lower()
    if "://" in joined or (any(need in lowered for need in _SECRET_VALUE_NEEDS) and _SECRET_VALUE.search(joined)):
        texts = [text for text in texts if "://" not in text and not _SECRET_VALUE.search(text)]
    return frozenset(text for text, maybe in zip(texts, may_hold_secrets(texts)) if not maybe)


def _mask_match(match: re.Match[str]) -> str:
    text = match.group(0)
    lowered = text.lower()
    if lowered.startswith("bearer"):
        return text[: len("bearer")] + " " + MASK
    if lowered.startswith("access_token="):
        return text[: len("access_token=")] + MASK
    return MASK


def redact_secrets(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: mask credential-named keys and token-shaped strings, recursively.
    The texts of the fields are tested all at once first (``_plain_texts``): fields in which none
    needs masking, and no key is named like a credential, are written as they came."""
    texts: list[str] = []
    same = True
    for key, value in event_dict.items():
        if key in _OWN_FIELDS:
            if isinstance(value, str):  # each alone: the timestamp holds triggers (":", ".")
                event_dict[key] = _mask_value(value)
        elif _is_secret_key(key):
            same = False
        else:
            same = _texts_of(value, texts) and same
    plain = _plain_texts(texts)
    if same and all(text in plain for text in texts):
        return event_dict
    for key in list(event_dict):
        if key in _OWN_FIELDS:
            continue
        if _is_secret_key(key):
            event_dict[key] = MASK
        else:
            event_dict[key] = _mask_value(event_dict[key], plain)
    return event_dict


def _render(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


# How the journal is written: ``json`` (one object a line, what journald and log shippers read),
# ``console`` (aligned lines for a person at a terminal), or ``auto``: console on a terminal,
# JSON otherwise. ``huginn-chat --log-format`` sets ``chosen_format`` for its one command (not an
# environment variable: the settings refuse any HUGINN_CHAT_* name they do not know).
LOG_FORMATS = ("auto", "json", "console")
chosen_format = "auto"


def renders_for_people(stream: Any, log_format: str | None = None) -> bool:
    """Whether ``stream`` gets the console renderer: asked for, or ``auto`` on a terminal."""
    chosen = (log_format or chosen_format).strip().lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"log_format: {chosen!r} is not one of {', '.join(LOG_FORMATS)}")
    if chosen != "auto":
        return chosen == "console"
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(callable(isatty) and isatty())
    except (OSError, ValueError):
        return False


def configure(
    stream: TextIO | None = None,
    level: str = "info",
    log_format: str | None = None,
    observer: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Records at ``level`` or above to ``stream`` (stderr by default): JSON lines, or aligned
    human lines where ``renders_for_people`` says so. The secret masking runs either way.
    ``observer`` sees each event as written, after the masking (the refresh's terminal summary)."""
    if level.lower() not in LEVELS:
        raise ValueError(f"level: {level!r} is not one of {', '.join(LEVELS)}")
    stream = stream if stream is not None else sys.stderr
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=True, sort_keys=False)
        if renders_for_people(stream, log_format)
        else structlog.processors.JSONRenderer(serializer=lambda value, **_: _render(value))
    )
    numeric_level = logging.getLevelName(level.upper())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    if observer is not None:
        shared.append(_observed_by(observer))
    structlog.configure(
        processors=[*shared, renderer],
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
                renderer,
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


def _observed_by(observer: Callable[[dict[str, Any]], None]) -> Processor:
    def observe(_logger: Any, _name: str, event_dict: Any) -> Any:
        observer(event_dict)
        return event_dict

    return observe


def get_logger(**bind: Any) -> Any:
    """A structlog logger with ``bind`` as context on every line (e.g. ``room_id=...``)."""
    return structlog.get_logger().bind(**bind)
