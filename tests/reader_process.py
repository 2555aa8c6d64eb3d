"""A reader in its own process, over the fakes, for the load tests.

Owns: starting a ``ReaderService`` on a socket path with the fake index and embedder of
``tests/reader_fakes.py``, optionally under a lower RLIMIT_NOFILE (as a unit's LimitNOFILE=
would set), optionally publishing a new generation every few milliseconds, optionally binding the
socket first and accepting only once a file appears (so a crowd of clients can pile into the
listen backlog at once), optionally with long windows (so that a search's answer runs to hundreds of
kilobytes), optionally writing the product's own journal (audit lines included) to stderr. On SIGTERM
it stops and prints one JSON line: peak RSS, swaps, the counts of warning events it logged, and the
ranking work its indexes did (calls of the ranking legs, and the candidates they returned). With
``--serve`` it runs ``ReaderService.run`` instead, the product's own signal handling and drain, and
exits with its code.

Must not: be imported by the product. Tests start it with ``python -m tests.reader_process``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


class CountingLogger:
    """Counts events; keeps nothing else (a load test makes many thousands of lines)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, event: str, **_: Any) -> None:
        with self._lock:
            self.counts[event] += 1

    info = warning = error = _count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--nofile", type=int)
    parser.add_argument("--swap-every-s", type=float, default=0.0)
    parser.add_argument("--hold-until", type=Path)
    parser.add_argument("--backlog", type=int, default=1024)
    parser.add_argument("--line-timeout-s", type=float, default=2.0)
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument("--journal", action="store_true", help="the product's journal on stderr, not counts")
    parser.add_argument("--audit-key-hex")
    parser.add_argument("--long-windows", type=int, default=0)
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--searching-file", type=Path)
    args = parser.parse_args()

    if args.nofile:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, hard))

    from daemon.reader.service import ReaderService
    from daemon.reader.sockets import bind_socket
    from tests.reader_fakes import FakeEmbedder, FakeIndex, corpus, long_windows

    windows = corpus() + long_windows(args.long_windows)
    generation = [1]
    opened: list[FakeIndex] = []

    class MarkingIndex(FakeIndex):
        """Touches ``--searching-file`` when a query starts: a test knows a request is in flight."""

        def _pause(self) -> None:
            if args.searching_file is not None:
                args.searching_file.touch()
            super()._pause()

    def open_index() -> FakeIndex:
        mine = generation[0]
        time.sleep(0.005)  # opening a generation takes a while (a copy)
        index = MarkingIndex(windows, generation=mine, delay_s=args.delay_s)
        index.newer_available = lambda: generation[0] != mine  # type: ignore[attr-defined]
        opened.append(index)
        return index

    stop_publishing = threading.Event()

    def publish() -> None:
        while not stop_publishing.wait(args.swap_every_s):
            generation[0] += 1

    log = CountingLogger()
    if args.journal:
        from daemon.journal import configure

        configure(sys.stderr)
    service = ReaderService(
        open_index,
        FakeEmbedder,
        None,
        logger=None if args.journal else log,
        audit_key=bytes.fromhex(args.audit_key_hex) if args.audit_key_hex else None,
        swap_check_s=0.02,
        request_check_s=0.01,
        line_timeout_s=args.line_timeout_s,
        backlog=args.backlog,
    )

    if args.serve:
        print(json.dumps({"max_connections": service._max_connections}), flush=True)
        code = asyncio.run(service.run(path=args.path))
        print(json.dumps({"exit": code, "events": dict(log.counts)}), flush=True)
        return code

    async def run() -> None:
        sock = bind_socket(args.path, args.backlog)
        print(json.dumps({"bound": True}), flush=True)
        if args.hold_until is not None:
            while not args.hold_until.exists():
                await asyncio.sleep(0.02)
        await service.start(sock=sock)
        print(json.dumps({"serving": True, "max_connections": service._max_connections}), flush=True)
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        if args.swap_every_s:
            threading.Thread(target=publish, daemon=True).start()
        await stopping.wait()
        stop_publishing.set()
        await service.stop(grace_s=2)
        Path(args.path).unlink(missing_ok=True)

    asyncio.run(run())
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the process that forked us
    # (a pytest process of several hundred MiB), while VmHWM belongs to this address space alone.
    peak_kib = next(
        int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:")
    )
    ranking_calls = sum(1 for index in opened for call in index.calls if call[0] in ("hybrid", "lexical"))
    print(
        json.dumps(
            {
                "peak_rss_mib": round(peak_kib / 1024, 1),
                "swaps": service.swaps,
                "events": dict(log.counts),
                "ranking_calls": ranking_calls,
                "candidates": sum(index.candidates for index in opened),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
