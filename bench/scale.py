"""The 1M-message backfill, synthetic: the refresher's peak memory at scale (`make bench` full only).

Owns: a synthetic homeserver behind the ``MatrixSource`` port (one room, messages generated page by
page from a seed, 3% of them edits of a recent message), a cheap deterministic embedder (hashed
vectors: embedding 1M messages for real would take hours on 2 cores, and the embedder's memory is
not what this measures), and one real refresher run over them into a real Edge index, in its own
process. Prints one JSON line: the run summary's counts and times, ``peak_rss_mb`` (VmHWM), the
RSS curve as the backfill goes (``curve``: VmRSS, RssAnon, RssFile every ``--curve-every``
events) and the mappings holding the most resident memory at the end (``largest_mappings_mb``).
``--fold-only`` feeds the same events through ``RoomFold`` with a checkpoint every 500 events and
an in-memory store, to measure what the fold itself retains (held windows, traced bytes).

Must not: be imported by the product, or touch the network (there is no homeserver).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from chunker.events import parse_event  # noqa: E402
from chunker.fold import Bounds, RoomFold  # noqa: E402
from daemon.index.port import SparseVector  # noqa: E402
from daemon.ports import Page, RoomsOverview  # noqa: E402

ROOM = "!synthetic:bench.test"
USER = "@reader:bench.test"
SENDERS = [f"@user{i}:bench.test" for i in range(20)]
EDIT_SHARE = 0.03
DIM = 384
WORDS = (
    "build deploy server cache index query window room message token latency memory thread socket "
    "release branch merge review test failure timeout retry config login backup disk network proxy "
    "certificate python rust kernel driver update upgrade install package version issue meeting"
).split()


def synthetic_events(n: int, seed: int = 7):  # type: ignore[no-untyped-def]
    """``n`` raw m.room.message events (3% edits of one of the last 200 messages), oldest first."""
    rng = random.Random(seed)
    ts = 1_600_000_000_000
    recent: list[tuple[str, str]] = []  # (event id, sender)
    for i in range(n):
        ts += rng.randint(5_000, 120_000) if rng.random() > 0.01 else 6 * 3_600_000
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24)))
        event_id = f"$e{i:08d}"
        if recent and rng.random() < EDIT_SHARE:
            target, sender = recent[rng.randrange(len(recent))]
            content: dict[str, Any] = {
                "msgtype": "m.text",
                "body": "* " + body,
                "m.new_content": {"msgtype": "m.text", "body": body},
                "m.relates_to": {"rel_type": "m.replace", "event_id": target},
            }
        else:
            sender = rng.choice(SENDERS)
            content = {"msgtype": "m.text", "body": body}
            recent.append((event_id, sender))
            if len(recent) > 200:
                recent.pop(0)
        yield {
            "type": "m.room.message",
            "event_id": event_id,
            "sender": sender,
            "origin_server_ts": ts,
            "room_id": ROOM,
            "content": content,
        }


class SyntheticMatrix:
    """One joined room whose history is ``synthetic_events(n)``; tokens are offsets."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._events = synthetic_events(n)
        self._offset = 0

    async def whoami(self) -> str:
        return USER

    async def joined_rooms(self) -> list[str]:
        return [ROOM]

    async def invited_rooms(self) -> list[str]:
        return []

    async def invites(self) -> dict[str, list[dict[str, Any]]]:
        return {}

    async def rooms_overview(self) -> RoomsOverview:
        return RoomsOverview(invites={}, latest_event={})

    async def direct_rooms(self) -> dict[str, list[str]]:
        return {}

    async def resolve_alias(self, alias: str) -> str | None:
        return None

    async def room_aliases(self, room_id: str) -> list[str]:
        return []

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        def state(kind: str, key: str, content: dict[str, Any], sender: str = SENDERS[0]) -> dict[str, Any]:
            return {"type": kind, "state_key": key, "sender": sender, "content": content, "event_id": f"${kind}{key}"}

        return [
            state("m.room.create", "", {"room_version": "12"}),
            state("m.room.join_rules", "", {"join_rule": "public"}),
            state("m.room.name", "", {"name": "synthetic"}),
            *(state("m.room.member", s, {"membership": "join"}, s) for s in [*SENDERS, USER]),
        ]

    async def membership(self, room_id: str) -> dict[str, Any] | None:
        return {"membership": "join", "sender": USER}

    async def messages(self, room_id: str, start: str | None, limit: int) -> Page:
        offset = int(start) if start else 0
        assert offset == self._offset, "the synthetic source reads forwards once"
        chunk = [e for _, e in zip(range(limit), self._events)]
        self._offset += len(chunk)
        return Page(events=chunk, end=str(self._offset) if chunk else None)

    async def event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        return None


class HashedEmbedder:
    """Deterministic vectors from a hash of the text: the shape of the real embedder's output at
    a tiny fraction of its cost."""

    model_id = "bench/hashed"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            out.append((vec / np.linalg.norm(vec)).tolist())
        return out

    def sparse(self, texts: Sequence[str]) -> list[SparseVector]:
        return [self.sparse_query(t) for t in texts]

    def sparse_query(self, text: str) -> SparseVector:
        counts: dict[int, float] = {}
        for word in text.lower().split():
            key = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            counts[key] = counts.get(key, 0.0) + 1.0
        return SparseVector(indices=list(counts), values=list(counts.values()))


class _QuietLog:
    def bind(self, **_: Any) -> "_QuietLog":
        return self

    def info(self, *_: Any, **__: Any) -> None: ...
    def warning(self, *_: Any, **__: Any) -> None: ...
    def error(self, *_: Any, **__: Any) -> None: ...


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def peak_rss_mb() -> float:
    return _status_mb("VmHWM")


class AnonPeak:
    """The peak of RssAnon (heap, not the index files mapped into memory, which VmHWM also
    counts and the kernel can drop), sampled every 0.2 s in a thread."""

    def __init__(self) -> None:
        import threading

        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _status_mb("RssAnon"))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak, _status_mb("RssAnon"))


def _memory_mb() -> dict[str, float]:
    return {name: _status_mb(name) for name in ("VmRSS", "RssAnon", "RssFile")}


def largest_mappings(state: Path, top: int = 6) -> list[list[Any]]:
    """The process's mappings with the most resident memory, by file (relative to ``state``) or
    kind ([heap], anonymous): where RSS beyond the heap lives (the index's files mapped in)."""
    sizes: dict[str, float] = {}
    name = "[anon]"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
            if name.startswith(str(state)):
                name = str(Path(name).relative_to(state))
        elif head and head[0] == "Rss:":
            sizes[name] = sizes.get(name, 0.0) + int(head[1]) / 1024
    ranked = sorted(sizes.items(), key=lambda item: -item[1])[:top]
    return [[name, round(mb, 1)] for name, mb in ranked]


def refresh(n: int, state: Path, curve_every: int = 0) -> dict[str, Any]:
    from daemon.index.edge_writer import EdgeIndexWriter
    from daemon.refresher.run import Refresher, RefreshOptions
    from scope import Policy

    anon = AnonPeak()
    curve: list[dict[str, float]] = []

    def progress(_room: str, events_read: int, _windows: int, _fraction: float | None) -> None:
        # RSS as the backfill goes: a bound shows as a flat line, a leak as a slope.
        if curve_every and events_read >= (len(curve) + 1) * curve_every:
            curve.append({"events": events_read, **_memory_mb()})

    index = EdgeIndexWriter(state / "index")
    try:
        refresher = Refresher(
            matrix=SyntheticMatrix(n),  # type: ignore[arg-type]
            index=index,
            embedder=HashedEmbedder(),
            policy=Policy.build(allowed=(ROOM,), exclude=(), bridge_sender_patterns=()),
            log=_QuietLog(),
            options=RefreshOptions(bounds=Bounds(), page_size=1000, state_dir=state),
            progress=progress,
        )
        summary = asyncio.run(refresher.run())
        mappings = largest_mappings(state)
    finally:
        index.close()
    return {
        "messages": n,
        "events_read": summary.events_read,
        "windows_written": summary.windows_written,
        "seconds": summary.seconds,
        "seconds_folding": round(summary.seconds_folding, 1),
        "seconds_embedding": round(summary.seconds_embedding, 1),
        "seconds_writing": round(summary.seconds_writing, 1),
        "peak_rss_mb": peak_rss_mb(),
        "peak_rss_anon_mb": anon.stop(),
        "curve": curve,
        "largest_mappings_mb": mappings,
        # Blocks in use (Edge preallocates sparse files), the working shard and the published copy.
        "index_disk_mb": round(
            sum(f.stat().st_blocks * 512 for f in (state / "index").rglob("*") if f.is_file()) / 2**20
        ),
    }


def fold_only(n: int) -> dict[str, Any]:
    """The fold alone, as the refresher drives it (a checkpoint every 500 events, then release),
    over an in-memory store. ``fold_retained_mb``: what the fold still holds at the end, traced
    by tracemalloc once the store is dropped (it grows with what the fold cannot release)."""
    import gc
    import tracemalloc

    tracemalloc.start()
    fold = RoomFold(ROOM, Bounds(), incremental=False)
    windows: dict[str, Any] = {}  # point id -> the window as written
    holder: dict[str, str] = {}  # event id -> point id
    started = time.perf_counter()
    events = synthetic_events(n)
    while True:
        page = [parse_event(e) for _, e in zip(range(500), events)]
        if not page:
            break
        wanted = fold.lookups(page)
        fold.provide(windows[pid] for pid in {holder[i] for i in wanted if i in holder})
        fold.feed(page)
        for window in fold.take_changes().upserts:
            windows[window.point_id] = window
            holder.update((m.event_id, window.point_id) for m in window.messages)
        fold.drop_written_windows()
    seconds = time.perf_counter() - started
    held = len(fold.windows())
    windows.clear()
    holder.clear()
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "messages": n,
        "seconds": round(seconds, 1),
        "held_windows": held,
        "fold_retained_mb": round(retained / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--fold-only", action="store_true")
    parser.add_argument("--curve-every", type=int, default=100_000, help="sample RSS every N events read (0: never)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.fold_only:
        result = fold_only(args.messages)
    else:
        with tempfile.TemporaryDirectory(prefix="huginn-scale-") as tmp:
            result = refresh(args.messages, Path(tmp), args.curve_every)
    print(json.dumps(result, sort_keys=True))
    if args.out:
        args.out.write_text(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
