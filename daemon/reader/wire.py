"""The socket protocol's shared numbers: its version, error codes and request limits, the one
place both ends of ``docs/protocol.md`` read them from.

Owns: the constants a request and a reply are checked against (the reader's ``protocol`` and
``search`` modules) and that the CLI client shows in ``--help`` and sends as defaults.
Must not: import anything. The Personas' CLI imports this on every start, so it stays a page of
names (``tests/unit/test_client_startup.py`` lists what an answered search may load).
"""

PROTOCOL_VERSION = 1

# Error codes. The CLI exits 2 on the usage ones (the caller asked for something wrong) and 1 on
# the rest (the reader could not answer).
BAD_JSON = "bad_json"
BAD_REQUEST = "bad_request"
UNSUPPORTED_VERSION = "unsupported_version"
UNKNOWN_OP = "unknown_op"
LINE_TOO_LONG = "line_too_long"
NOT_FOUND = "not_found"
UNAVAILABLE = "unavailable"
INTERNAL = "internal"
BUSY = "busy"  # the reader is at its connection cap; the client retries briefly
LINE_TIMEOUT = "line_timeout"  # a request line did not end in time; the reader then closes
STALE_CURSOR = "stale_cursor"  # a ranked search's cursor from another index generation: search again
# A cursor this reader did not issue (tampered, forged, from a restarted reader), expired, or
# issued for another request.
BAD_CURSOR = "bad_cursor"
USAGE_ERRORS = frozenset({BAD_REQUEST, NOT_FOUND, STALE_CURSOR, BAD_CURSOR})

# Request limits.
MAX_TEXTS = 8
MAX_TEXT_BYTES = 1000
TOP_K_DEFAULT = 8
TOP_K_MAX = 50
# Ranked paging: a search's ranked sequence holds at most this many windows, all pages together.
MAX_RANKED = 200
WINDOW_CONTEXT_DEFAULT = 2
WINDOW_CONTEXT_MAX = 20
SORT_RELEVANCE, SORT_NEWEST, SORT_OLDEST = "relevance", "newest", "oldest"
SORTS = (SORT_RELEVANCE, SORT_NEWEST, SORT_OLDEST)
