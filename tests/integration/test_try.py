"""`make try`: the demo leaves its homeserver and reader running, prints the lines to paste, and
the line it prints stops them and removes their files. Runs the real demo (`devtools.demo --try`)
as `make try` does, then follows its printed instructions in a shell."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STOP_WITHIN_S = 60.0

pytestmark = pytest.mark.synapse


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie left by an exited parent still answers; /proc says what it is.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[-1][:1] != "Z"


def test_make_try_leaves_the_reader_running_and_its_stop_line_stops_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--try"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    exports = re.findall(r"^\s*export (HUGINN_CHAT_SOCKET=\S+)$", proc.stdout, re.MULTILINE)
    [stop] = re.findall(r"^\s*(kill [\d ]+ && .* rm -rf \S+)$", proc.stdout, re.MULTILINE)
    pids = [int(pid) for pid in stop.split("&&")[0].split()[1:]]
    base = Path(stop.rsplit(" ", 1)[-1])
    try:
        assert exports and all(_alive(pid) for pid in pids)
        shell = f"export {exports[0]}; {sys.executable} -m daemon.cli.main rooms"
        listing = subprocess.run(["sh", "-c", shell], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert listing.returncode == 0 and "#infra:" in listing.stdout, listing.stderr
    finally:
        subprocess.run(["sh", "-c", stop], check=True, timeout=60)
    deadline = time.monotonic() + STOP_WITHIN_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids) and not base.exists()
