"""``huginn-chat serve`` as a child process for the benchmarks (``bench/bench.py``, ``bench/eval.py``).

Owns: the CLI command line the benchmarks and integration tests run (``cli``, ``run_cli``), starting the reader in its own session
with its output in a log file, waiting until its ``status`` says the index (and, where asked, the
embedder) is ready, and stopping it by its own PID.
Must not: be imported by the product; it is a measuring tool, like ``devtools/``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "daemon.cli.main", *args]


def run_cli(env: dict[str, str], *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """One ``huginn-chat`` command run to its end from the repo, its output captured as text."""
    return subprocess.run(cli(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


class ReaderProcess:
    """``with ReaderProcess(env, log) as reader: ...``; ``env`` names the socket (``HUGINN_CHAT_SOCKET``)."""

    def __init__(self, env: dict[str, str], log_path: Path, *, ready_s: float, embedder_loaded: bool = False):
        self.env, self.log_path = env, log_path
        self.socket = env["HUGINN_CHAT_SOCKET"]
        self.ready_s = ready_s
        self.embedder_loaded = embedder_loaded  # also wait for the model, so timings exclude its load
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "ReaderProcess":
        from daemon.cli.client import ReaderUnavailable, exchange

        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                cli("serve"),
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"reader exited {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                reply = exchange(self.socket, {"v": 1, "op": "status"}, timeout=5)
                result = reply.get("result") or {}
                if result.get("index_ready") and (not self.embedder_loaded or result.get("embedder") == "loaded"):
                    return self
            except ReaderUnavailable:
                pass
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"reader not ready after {self.ready_s:.0f} s")

    def __exit__(self, *exc: object) -> None:
        from devtools.synapse import stop_process

        if self.process is not None:
            stop_process(self.process, 15.0)
