"""The ``next`` / ``cursor`` tokens of listings and ranked searches: what they hold, how they are
sealed, and when one is refused.

Owns: the token codec, the key it is sealed with, the digest a token binds (the request's texts,
filters as asked, and sort: a token from another request is refused), the bounds every field is
held to, and the two token kinds:

- a listing token: ``{"k": "l", "ts", "id"}``, the sort key of the last window listed (keyset
  paging: each page continues strictly after it, in either direction);
- a ranked token: ``{"k": "r", "o", "h", "g", "d"}``, the offset into the request's ranked
  sequence, the size of the first page (its head: see ``search.execute_search``), the index
  version it was ranked in, and whether it was ranked by the lexical leg alone.

Both carry ``"n"``, the reader's clock when the first page was answered, so a relative time
(``2d``, ``yesterday``) means the same instant on every page, ``"t"``, when this token was
issued (a token older than ``TOKEN_TTL_MS`` is refused), and ``"f"``, the request digest.

Sealing. A token is ``<payload>.<mac>``: the base64url JSON payload and an HMAC-SHA256 of it under
``SEAL_KEY``, a random key each process draws at start. Only the process that issued a token can
open it: a client cannot raise a first-page size or an offset to make the reader rank deeper than
any legitimate page, and a token from another reader, or from this reader before a restart, is
refused like a tampered one. The MAC is checked (``hmac.compare_digest``) before a byte of the
payload is parsed; the fields are then bounded all the same, to what a legitimate request reaches.
A client (the CLI, the MCP server) holds no key: it checks the form only (``check_form``).

Must not: import anything outside the standard library, ``daemon.errors`` and
``daemon.reader.wire`` (the stdlib-only CLI client imports ``search``, which imports this), put a
query text in a token (only a digest), or let the key leave the process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from daemon.errors import UsageError
from daemon.reader.wire import BAD_CURSOR, MAX_RANKED, TOP_K_MAX

MAX_UNIX_MS = 10**16 - 1
# A ranked token continues a sequence of at most MAX_RANKED windows: no page starts at or past it.
MAX_OFFSET = MAX_RANKED - 1
# The first page (the head) is one search's top_k: never more than TOP_K_MAX windows.
MAX_HEAD = TOP_K_MAX
MAX_CHUNK_ID_CHARS = 128
MAX_VERSION_CHARS = 64
# How long a token may be used after it was issued. A ranked one goes stale with the index
# generation long before; a listing token stays valid across generations, so a day bounds it.
TOKEN_TTL_MS = 24 * 3600 * 1000
# A token issued by this process cannot be from the future; allow the clock this much slack.
CLOCK_SLACK_MS = 60 * 1000
MAX_TOKEN_CHARS = 1024
_MAC_CHARS = 43  # an HMAC-SHA256 in unpadded base64url
_FORM = re.compile(r"[A-Za-z0-9_-]{1,%d}\.[A-Za-z0-9_-]{%d}" % (MAX_TOKEN_CHARS - _MAC_CHARS - 1, _MAC_CHARS))
_DIGEST = re.compile(r"[0-9a-f]{16}")
# What the MAC covers besides the payload: a token sealed for any other purpose never opens here.
_DOMAIN = b"huginn-chat cursor v1\x00"

# The process's own key. Drawn once per process and never written anywhere: restarting the reader
# retires every token it issued (a client then searches again, as after a new generation).
SEAL_KEY = secrets.token_bytes(32)

NOT_A_TOKEN = "is not a token this reader issued (tampered, forged, or from a reader since restarted): search again"


class CursorError(UsageError, ValueError):
    """A token the reader refuses. ``code`` is the protocol error code: ``bad_cursor`` for a token
    that is not one this reader issued, was altered, has expired, or was issued for another
    request; ``stale_cursor`` for a ranked token whose ranking cannot be repeated (the index
    changed)."""

    def __init__(self, message: str, code: str = BAD_CURSOR):
        super().__init__(f"cursor: {message}")
        self.message = message
        self.code = code


@dataclass(frozen=True, slots=True)
class ListingPosition:
    ts: int
    chunk_id: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class RankedPosition:
    offset: int
    head: int
    version: str
    lexical_only: bool
    now_ms: int


def request_digest(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _mac(payload: str, key: bytes) -> str:
    return _b64(hmac.new(key, _DOMAIN + payload.encode("ascii"), hashlib.sha256).digest())


def _now_ms() -> int:
    return int(time.time() * 1000)


def seal(data: dict[str, Any], key: bytes | None = None, issued_ms: int | None = None) -> str:
    """``data`` (a payload as ``encode_listing`` / ``encode_ranked`` build it) stamped with its
    issue time and sealed under ``key`` (default ``SEAL_KEY``)."""
    data = {**data, "t": _now_ms() if issued_ms is None else issued_ms}
    payload = _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return f"{payload}.{_mac(payload, SEAL_KEY if key is None else key)}"


def encode_listing(
    position: ListingPosition, digest: str, *, key: bytes | None = None, issued_ms: int | None = None
) -> str:
    return seal(
        {"k": "l", "ts": position.ts, "id": position.chunk_id, "n": position.now_ms, "f": digest}, key, issued_ms
    )


def encode_ranked(
    position: RankedPosition, digest: str, *, key: bytes | None = None, issued_ms: int | None = None
) -> str:
    return seal(
        {
            "k": "r",
            "o": position.offset,
            "h": position.head,
            "g": position.version,
            "d": int(position.lexical_only),
            "n": position.now_ms,
            "f": digest,
        },
        key,
        issued_ms,
    )


def check_form(token: str) -> None:
    """Whether ``token`` has the form of a sealed token (what a client without the key can tell)."""
    if len(token) > MAX_TOKEN_CHARS or not _FORM.fullmatch(token):
        raise CursorError(NOT_A_TOKEN)


def _int(data: dict[str, Any], key: str, low: int, high: int) -> bool:
    value = data.get(key)
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def _str(data: dict[str, Any], key: str, longest: int) -> bool:
    value = data.get(key)
    return isinstance(value, str) and 0 < len(value) <= longest


def _opened(token: str, key: bytes | None) -> dict[str, Any]:
    """The payload of a token sealed under ``key``; the MAC is compared before anything is parsed."""
    check_form(token)
    payload, mac = token.split(".")
    if not hmac.compare_digest(_mac(payload, SEAL_KEY if key is None else key), mac):
        raise CursorError(NOT_A_TOKEN)
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        raise CursorError(NOT_A_TOKEN) from None
    if not isinstance(data, dict):
        raise CursorError(NOT_A_TOKEN)
    return data


def decode(
    token: str, digest: str, *, key: bytes | None = None, now_ms: int | None = None
) -> ListingPosition | RankedPosition:
    """The position ``token`` continues from. Refused (``CursorError``, ``bad_cursor``) when it is
    not a token this process sealed, has expired, holds a field outside what a legitimate request
    reaches, or was issued for a request with other texts, filters or sort."""
    data = _opened(token, key)
    now = _now_ms() if now_ms is None else now_ms
    if not _int(data, "t", 0, MAX_UNIX_MS) or data["t"] > now + CLOCK_SLACK_MS:
        raise CursorError(NOT_A_TOKEN)
    if data["t"] < now - TOKEN_TTL_MS:
        raise CursorError("has expired (a cursor is good for a day): search again")
    if not _int(data, "n", 0, data["t"]) or not isinstance(data.get("f"), str) or not _DIGEST.fullmatch(data["f"]):
        raise CursorError(NOT_A_TOKEN)
    if data["f"] != digest:
        raise CursorError("was issued for a different request (other texts, filters or sort)")
    if data.get("k") == "l" and _int(data, "ts", 0, MAX_UNIX_MS) and _str(data, "id", MAX_CHUNK_ID_CHARS):
        return ListingPosition(data["ts"], data["id"], data["n"])
    if (
        data.get("k") == "r"
        and _int(data, "o", 1, MAX_OFFSET)
        and _int(data, "h", 0, min(MAX_HEAD, data["o"]))
        and _str(data, "g", MAX_VERSION_CHARS)
        and _int(data, "d", 0, 1)
    ):
        return RankedPosition(data["o"], data["h"], data["g"], bool(data["d"]), data["n"])
    raise CursorError(NOT_A_TOKEN)
