"""Fakes for the read side, shared by test_search.py, test_reader.py and test_client.py.

An in-memory ``IndexReader`` with the real filter semantics (``FakeIndex``), a deterministic
bag-of-words embedder, a small three-room corpus, a logger that records, and ``Running``: a
``ReaderService`` on its own event-loop thread, so tests talk to it with plain blocking sockets
as the CLI does.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from daemon.index.port import RoomEntry, RoomSummary, ScoredWindow, SearchFilter, SparseVector, StoredWindow
from daemon.index.schema import stored_window
from daemon.reader.search import RRF_K
from daemon.reader.service import ReaderService

_WORD = re.compile(r"\w+")
DIM = 64


@functools.lru_cache(maxsize=8192)  # the fake index scores every stored text on every search
def _words(text: str) -> tuple[str, ...]:
    return tuple(w for w in _WORD.findall(text.lower()) if len(w) > 1)


@functools.lru_cache(maxsize=65536)
def _bucket(word: str, size: int) -> int:
    return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % size


def bag_vector(text: str) -> list[float]:
    vector = [0.0] * DIM
    for word in _words(text):
        vector[_bucket(word, DIM)] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def term_ids(text: str) -> tuple[int, ...]:
    return tuple(sorted({_bucket(w, 1 << 20) for w in _words(text)}))


class FakeEmbedder:
    model_id = "fake-bag"
    dim = DIM

    def __init__(self) -> None:
        self.embed_calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embed_calls.append(list(texts))
        return [bag_vector(t) for t in texts]

    def sparse(self, texts: Sequence[str]) -> list[SparseVector]:
        return [self.sparse_query(t) for t in texts]

    def sparse_query(self, text: str) -> SparseVector:
        ids = term_ids(text)
        return SparseVector(indices=ids, values=tuple(1.0 for _ in ids))


class DenseFailingEmbedder(FakeEmbedder):
    """The dense model fails (e.g. onnxruntime error); BM25 still works."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("dense model broke")


class FullyFailingEmbedder(DenseFailingEmbedder):
    def sparse_query(self, text: str) -> SparseVector:
        raise RuntimeError("bm25 broke too")


def make_window(
    room_id: str,
    messages: list[tuple[str, str, int, str]],
    *,
    alias: str | None = None,
    chunk_id: str | None = None,
    thread_root: str | None = None,
    replies: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A window payload as docs/design.md "Index data model" shapes it. messages: (event_id,
    sender, ts, body); ``replies``: {event id: the event id it replies to}."""
    msgs = [
        {"event_id": e, "sender": s, "ts": ts, "body": b, "reply_to": (replies or {}).get(e)}
        for e, s, ts, b in messages
    ]
    anchor = messages[0][0]
    return {
        "kind": "window",
        "corpus": "chat",
        "room_id": room_id,
        "room_alias": alias,
        "chunk_id": chunk_id or hashlib.sha256(f"{room_id}\0{anchor}".encode()).hexdigest()[:32],
        "anchor_id": anchor,
        "first_event_id": msgs[0]["event_id"],
        "last_event_id": msgs[-1]["event_id"],
        "ts_start": msgs[0]["ts"],
        "ts_end": msgs[-1]["ts"],
        "messages": msgs,
        "event_ids": [m["event_id"] for m in msgs],
        "senders": sorted({m["sender"] for m in msgs}),
        "redacted_ids": [],
        "closed": True,
        "n_messages": len(msgs),
        "text": "\n".join(f"{m['sender']}: {m['body']}" for m in msgs),
        "chat_version": "test",
        "thread_root": thread_root,
        "timeline": thread_root or "main",
    }


def eligible(payload: dict[str, Any], flt: SearchFilter) -> bool:
    if payload["n_messages"] < 1:
        return False
    if flt.room_ids is not None and payload["room_id"] not in flt.room_ids:
        return False
    if flt.senders is not None and not set(flt.senders) & set(payload["senders"]):
        return False
    if flt.after_ms is not None and payload["ts_end"] < flt.after_ms:
        return False
    if flt.before_ms is not None and payload["ts_start"] > flt.before_ms:
        return False
    return True


def message_line(message: dict[str, Any]) -> str:
    """A message as the index embeds it alone: ``<localpart>: <body>``."""
    sender = message["sender"]
    return f"{sender[1 : sender.index(':')] if ':' in sender else sender}: {message['body']}"


def message_scores(dense: Sequence[float], window: dict[str, Any]) -> tuple[float, ...]:
    """Each message's cosine with the query, as the real adapters compute it from the stored
    per-message vectors (``ScoredWindow.message_scores``)."""
    return tuple(sum(a * b for a, b in zip(dense, bag_vector(message_line(m)))) for m in window["messages"])


def message_vectors(window: dict[str, Any]) -> list[list[float]]:
    """The stored dense vectors of a window payload: one bag vector per message line."""
    return [bag_vector(message_line(m)) for m in window["messages"]]


class FakeIndex:
    """An in-memory IndexReader: filters applied before ranking, as the real adapters do.
    ``hybrid`` fuses a dense (cosine over bag vectors) and a lexical (shared terms) ranking with
    RRF inside, like the index. Every call is recorded; a closed index refuses queries."""

    def __init__(self, windows: list[dict[str, Any]], generation: int | None = None, delay_s: float = 0.0):
        self.windows = windows
        self.entries: dict[str, RoomEntry] = {}
        self.current_generation = generation
        self.delay_s = delay_s
        self.calls: list[tuple[str, SearchFilter | None, int]] = []
        self.candidates = 0  # windows the ranking legs returned, all calls together
        self.weights_seen: list[Mapping[str, float] | None] = []
        self.closed = False
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self.closed:
            raise RuntimeError(f"generation {self.current_generation} used after close")

    def _pause(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
            self._check()

    def read_meta(self) -> Any:
        self._check()
        return None

    def newer_available(self) -> bool:
        return False

    def _lexical_scores(self, sparse: SparseVector, flt: SearchFilter) -> list[tuple[float, str, dict]]:
        wanted = set(sparse.indices)
        scored = []
        for w in self.windows:
            if eligible(w, flt):
                shared = len(wanted & set(term_ids(w["text"])))
                if shared:
                    scored.append((float(shared), w["chunk_id"], w))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return scored

    def hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        flt: SearchFilter,
        limit: int,
        weights: Mapping[str, float] | None = None,
    ) -> list[ScoredWindow]:
        """A fake's own fusion (equal-weight RRF over bag vectors): ``weights`` is recorded, not applied."""
        self._check()
        with self._lock:
            self.calls.append(("hybrid", flt, limit))
            self.weights_seen.append(weights)
        self._pause()
        dense_ranked = sorted(
            (
                (-sum(a * b for a, b in zip(dense, bag_vector(w["text"]))), w["chunk_id"], w)
                for w in self.windows
                if eligible(w, flt)
            ),
            key=lambda t: (t[0], t[1]),
        )[:limit]
        lexical_ranked = self._lexical_scores(sparse, flt)[:limit]
        fused: dict[str, list] = {}
        for legname, ranked in (("dense", dense_ranked), ("lexical", lexical_ranked)):
            for rank, (raw, cid, w) in enumerate(ranked, 1):
                entry = fused.setdefault(cid, [0.0, w, set(), {}])
                entry[0] += 1 / (RRF_K + rank)
                entry[2].add(legname)
                entry[3][legname] = -raw if legname == "dense" else raw
        ordered = sorted(fused.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
        with self._lock:
            self.candidates += len(ordered)
        return [
            ScoredWindow(
                cid, s, stored_window(w), tuple(sorted(legs)), message_scores(dense, w), tuple(sorted(raw.items()))
            )
            for cid, (s, w, legs, raw) in ordered
        ]

    def lexical(self, sparse: SparseVector, flt: SearchFilter, limit: int) -> list[ScoredWindow]:
        self._check()
        with self._lock:
            self.calls.append(("lexical", flt, limit))
        found = self._lexical_scores(sparse, flt)[:limit]
        with self._lock:
            self.candidates += len(found)
        return [
            ScoredWindow(cid, s, stored_window(w), ("lexical",), leg_scores=(("lexical", s),)) for s, cid, w in found
        ]

    def listing(
        self, flt: SearchFilter, after: tuple[int, str] | None, limit: int, descending: bool = False
    ) -> list[StoredWindow]:
        self._check()
        with self._lock:
            self.calls.append(("listing", flt, limit))
        self._pause()
        field = "ts_end" if descending else "ts_start"  # newest first: by the newest message
        rows = sorted(
            (w for w in self.windows if eligible(w, flt)),
            key=lambda w: (w[field], w["chunk_id"]),
            reverse=descending,
        )
        if after is not None:
            key = tuple(after)
            rows = [
                w for w in rows if ((w[field], w["chunk_id"]) < key if descending else (w[field], w["chunk_id"]) > key)
            ]
        return [stored_window(w) for w in rows[:limit]]

    def window_of_event(self, event_id: str) -> StoredWindow | None:
        self._check()
        return next((stored_window(w) for w in self.windows if event_id in w["event_ids"]), None)

    def neighbours(
        self, room_id: str, ts: int, before: int, after: int, thread_root: str | None = None
    ) -> list[StoredWindow]:
        self._check()
        room = sorted(
            (
                w
                for w in self.windows
                if w["room_id"] == room_id and w["n_messages"] >= 1 and w.get("thread_root") == thread_root
            ),
            key=lambda w: (w["ts_start"], w["chunk_id"]),
        )
        earlier = [w for w in room if w["ts_start"] < ts][-before:] if before else []
        later = [w for w in room if w["ts_start"] > ts][:after]
        return [stored_window(w) for w in earlier + later]

    def thread_windows(
        self, thread_root: str, after: tuple[int, str] | None, limit: int, room_id: str | None = None
    ) -> list[StoredWindow]:
        self._check()
        rows = sorted(
            (
                w
                for w in self.windows
                if w.get("thread_root") == thread_root and w["n_messages"] >= 1 and room_id in (None, w["room_id"])
            ),
            key=lambda w: (w["ts_start"], w["chunk_id"]),
        )
        if after is not None:
            rows = [w for w in rows if (w["ts_start"], w["chunk_id"]) > tuple(after)]
        return [stored_window(w) for w in rows[:limit]]

    def messages_by_id(self, event_ids: Sequence[str], room_id: str | None = None) -> dict[str, Any]:
        self._check()
        wanted = set(event_ids)
        return {
            m.event_id: m
            for w in self.windows
            if room_id in (None, w["room_id"])
            for m in stored_window(w).messages
            if m.event_id in wanted
        }

    def room_aliases(self) -> dict[str, str]:
        self._check()
        return {w["room_id"]: w["room_alias"] for w in self.windows if w["room_alias"]}

    def room_directory(self, room_ids: Sequence[str] | None = None) -> dict[str, RoomEntry]:
        """Each window's alias as a canonical alias, overlaid with ``entries`` (directory entries a
        test sets as the refresher would write them)."""
        self._check()
        found = {w["room_id"]: w["room_alias"] for w in self.windows if w["room_alias"]}
        directory = {room: RoomEntry(room, canonical_alias=alias) for room, alias in found.items()}
        directory.update(self.entries)
        return directory if room_ids is None else {r: directory[r] for r in room_ids if r in directory}

    def window_counts(self) -> dict[str, int]:
        self._check()
        counts: dict[str, int] = {}
        for w in self.windows:
            counts[w["room_id"]] = counts.get(w["room_id"], 0) + 1
        return counts

    def room_summaries(self) -> dict[str, RoomSummary]:
        self._check()
        found: dict[str, RoomSummary] = {}
        for w in self.windows:
            stamps = [m["ts"] for m in w["messages"]]
            if not stamps:
                continue
            had = found.get(w["room_id"]) or RoomSummary(w["room_id"], 0, 0, min(stamps), max(stamps))
            found[w["room_id"]] = RoomSummary(
                w["room_id"],
                had.windows + 1,
                had.messages + len(stamps),
                min(had.first_ts or min(stamps), min(stamps)),
                max(had.last_ts or 0, max(stamps)),
            )
        return found

    def close(self) -> None:
        self.closed = True


ROOM_A, ROOM_B, ROOM_C = "!a:example.org", "!b:example.org", "!c:example.org"
ALICE, BOB, CAROL = "@alice:example.org", "@bob:example.org", "@carol:example.org"


def corpus() -> list[dict[str, Any]]:
    """Three rooms; the strongest match for 'database migration' is in room A."""
    return [
        make_window(
            ROOM_A,
            [
                ("$a1", ALICE, 1_000, "the database migration failed at step three"),
                ("$a2", BOB, 2_000, "database migration rollback worked"),
            ],
            alias="#dev:example.org",
        ),
        make_window(ROOM_A, [("$a3", ALICE, 10_000, "lunch plans for friday")], alias="#dev:example.org"),
        make_window(
            ROOM_B,
            [("$b1", CAROL, 3_000, "we talked about a migration of birds"), ("$b2", BOB, 4_000, "geese fly south")],
            alias="#nature:example.org",
        ),
        make_window(ROOM_C, [("$c1", CAROL, 5_000, "deploy key rotation ticket 4711")]),
    ]


def long_windows(count: int, lines: int = 4, line_bytes: int = 8000) -> list[dict[str, Any]]:
    """``count`` windows in room A that all match 'database migration', each ``lines`` messages of
    about ``line_bytes`` bytes: a search over them answers tens of kilobytes."""
    filler = "z" * line_bytes  # one long word: the fake ranking hashes every word, and this is cheap
    return [
        make_window(
            ROOM_A,
            [
                (f"$long{i}.{j}", ALICE, 20_000 + i * 100 + j, f"database migration {i}.{j} {filler}")
                for j in range(lines)
            ],
            alias="#dev:example.org",
        )
        for i in range(count)
    ]


class RecordingLogger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def _record(self, level: str, event: str, **fields: Any) -> None:
        with self._lock:
            self.lines.append((level, event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self._record("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._record("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._record("error", event, **fields)

    def audit(self) -> list[dict[str, Any]]:
        return [f for _, e, f in self.lines if e == "request_answered"]


class Running:
    """A ReaderService started on its own event loop thread, so tests talk to it with plain
    blocking sockets as the CLI does."""

    def __init__(self, service: ReaderService, path: Path):
        self.service = service
        self.path = path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "Running":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.service.start(path=self.path), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.service.stop(grace_s=2), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextmanager
def serving_the_fake_corpus() -> Iterator[Path]:
    """A reader over ``corpus()`` listening on a fresh socket under /tmp (a socket path must stay
    under ~100 bytes, which pytest's tmp_path can pass); yields the socket's path."""
    directory = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    path = directory / "r.sock"
    service = ReaderService(lambda: FakeIndex(corpus()), FakeEmbedder, None, logger=RecordingLogger())
    try:
        with Running(service, path):
            yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)
