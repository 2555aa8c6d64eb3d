"""The journal reads as aligned lines on a terminal and stays JSON lines otherwise or when asked:
the real `huginn-chat refresh` under a pseudo-terminal (stdlib ``pty``) and under a pipe."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

# Each test starts a child under a pseudo-terminal and waits for its lines: `slow`.
pytestmark = pytest.mark.slow


REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text("syt_dGVzdA_NotARealToken_000000\n")
    token.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")}
    env.update(
        HUGINN_CHAT_HOMESERVER="http://127.0.0.1:9",
        HUGINN_CHAT_TOKEN_FILE=str(token),
        HUGINN_CHAT_STATE_DIR=str(tmp_path / "state"),
        HUGINN_CHAT_EMBED_MODEL_DIR=str(tmp_path / "no-model"),  # fails at once, with one journal line
        TERM="dumb",
    )
    return env


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stderr (and stdout) on a pty; everything it wrote, and its exit code."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli.main", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_console_lines(tmp_path: Path) -> None:
    code, out = _on_a_terminal(["refresh"], _env(tmp_path))
    assert code == 1 and "embedder_unavailable" in out
    assert not out.lstrip().startswith("{"), out  # not a JSON line


def test_log_format_json_keeps_json_on_a_terminal(tmp_path: Path) -> None:
    code, out = _on_a_terminal(["--log-format", "json", "refresh"], _env(tmp_path))
    assert code == 1
    [line] = [json.loads(raw) for raw in out.splitlines() if raw.strip()]
    assert line["event"] == "embedder_unavailable"


def test_a_pipe_gets_json_lines(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli.main", "refresh"],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    [line] = [json.loads(raw) for raw in proc.stderr.splitlines()]
    assert proc.returncode == 1 and line["event"] == "embedder_unavailable"
