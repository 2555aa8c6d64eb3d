"""The ``next`` / ``cursor`` tokens of listings and ranked searches: what they hold and when one is refused.

Owns: the token codec (base64url of a small JSON object, opaque to callers), the digest a token
binds (the request's texts, filters as asked, and sort: a token from another request is refused),
and the two token kinds:

- a listing token: ``{"k": "l", "ts", "id"}``, the sort key of the last window listed (keyset
  paging: each page continues strictly after it, in either direction);
- a ranked token: ``{"k": "r", "o", "h", "g", "d"}``, the offset into the request's ranked
  sequence, the size of the first page (its head: see ``search.execute_search``), the index
  version it was ranked in, and whether it was ranked by the lexical leg alone.

Both carry ``"n"``, the reader's clock when the first page was answered, so a relative time
(``2d``, ``yesterday``) means the same instant on every page, and ``"f"``, the request digest.

Must not: import anything outside the standard library and ``daemon.errors`` (the stdlib-only
CLI client imports ``search``, which imports this), or put a query text in a token (only a digest).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from daemon.errors import UsageError

MAX_UNIX_MS = 10**16 - 1
MAX_OFFSET = 10_000


class CursorError(UsageError, ValueError):
    """A token the reader refuses. ``code`` is the protocol error code: ``bad_request`` for a token
    that is not one, or was issued for another request; ``stale_cursor`` for a ranked token whose
    ranking cannot be repeated (the index changed)."""

    def __init__(self, message: str, code: str = "bad_request"):
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


def _encode(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def encode_listing(position: ListingPosition, digest: str) -> str:
    return _encode({"k": "l", "ts": position.ts, "id": position.chunk_id, "n": position.now_ms, "f": digest})


def encode_ranked(position: RankedPosition, digest: str) -> str:
    return _encode(
        {
            "k": "r",
            "o": position.offset,
            "h": position.head,
            "g": position.version,
            "d": int(position.lexical_only),
            "n": position.now_ms,
            "f": digest,
        }
    )


def _int(data: dict[str, Any], key: str, low: int, high: int) -> bool:
    value = data.get(key)
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def decode(token: str, digest: str) -> ListingPosition | RankedPosition:
    """The position ``token`` continues from. Refused (``CursorError``) when it is not a token this
    reader issued, or was issued for a request with other texts, filters or sort."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeEncodeError, RecursionError):
        raise CursorError("is not a token a search or listing returned") from None
    if not isinstance(data, dict) or not isinstance(data.get("f"), str) or not _int(data, "n", 0, MAX_UNIX_MS):
        raise CursorError("is not a token a search or listing returned")
    if data["f"] != digest:
        raise CursorError("was issued for a different request (other texts, filters or sort)")
    if data.get("k") == "l" and _int(data, "ts", 0, MAX_UNIX_MS) and isinstance(data.get("id"), str):
        return ListingPosition(data["ts"], data["id"], data["n"])
    if (
        data.get("k") == "r"
        and _int(data, "o", 1, MAX_OFFSET)
        and _int(data, "h", 0, MAX_OFFSET)
        and isinstance(data.get("g"), str)
        and data.get("d") in (0, 1)
    ):
        return RankedPosition(data["o"], data["h"], data["g"], bool(data["d"]), data["n"])
    raise CursorError("is not a token a search or listing returned")
