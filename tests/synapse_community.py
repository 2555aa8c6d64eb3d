"""What the Synapse integration modules share about a seeded community: its names, and running
the real CLI against it (``refresh`` with its journal lines, ``search --json`` with its answer).

Owns: ``Community``, the base each module extends with the fields and helpers of its own story.
Must not: seed anything (each module seeds its own rooms through ``tests/conftest.py``'s Synapse)
or start a reader (``bench/reader_process.ReaderProcess`` does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.reader_process import run_cli


def json_lines(text: str) -> list[dict[str, Any]]:
    """The journal's structlog JSON lines in a process's stderr, other lines skipped."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@dataclass
class Community:
    tmp: Path
    tag: str
    server: str
    env: dict[str, str] = field(default_factory=dict)
    rooms: dict[str, str] = field(default_factory=dict)
    events: dict[str, str] = field(default_factory=dict)

    def alias(self, name: str) -> str:
        """A room alias made unique to this community by its tag."""
        return f"#{name}{self.tag}:{self.server}"

    def refresh(self, timeout: float = 180) -> list[dict[str, Any]]:
        """One real ``huginn-chat refresh`` that must succeed; its journal lines."""
        proc = run_cli(self.env, "refresh", timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json_lines(proc.stderr)

    def search(self, *args: str) -> dict[str, Any]:
        """``huginn-chat search ARGS --json`` that must succeed; its answer."""
        proc = run_cli(self.env, "search", *args, "--json", timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
