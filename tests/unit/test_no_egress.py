"""No egress it did not ask for: loading the embedder and searching through the
reader's own wiring connects nowhere and writes nothing outside the private directory.

The probe runs in a network namespace with no route (``unshare -n``), under ``strace -f`` (every
connect, every file created or written, in every thread), with ``HOME`` an empty directory that
must still be empty afterwards. Was: onnxruntime wrote a telemetry device id under
``$HOME/.cache/Microsoft/DeveloperTools`` on import (and may upload). Remove
``ORT_DISABLE_TELEMETRY`` from ``daemon.embedder.TELEMETRY_OFF`` and this test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import asyncio, sys, uuid
from pathlib import Path
from daemon.config import load_settings
from daemon.wiring import open_embedder
from daemon.index.edge_writer import EdgeIndexWriter
from daemon.index.port import IndexMeta, WindowPoint
from daemon.reader.service import ReaderService
from daemon.wiring import make_embedder_factory, make_index_opener

private = Path(sys.argv[1])
settings = load_settings(state_dir=private / "state", reader_private_dir=private / "reader")

# The writing side, as the refresher would (its caches under the state dir).
embedder = open_embedder(settings)
texts = ["the kettle in the kitchen is broken", "who brings tools to the workday"]
writer = EdgeIndexWriter(private / "state" / "index")
writer.reset(IndexMeta(model=embedder.model_id, dim=embedder.dim, chat_version="probe"))
points = []
for n, (text, dense, sparse) in enumerate(zip(texts, embedder.embed(texts), embedder.sparse(texts))):
    chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, text))
    payload = {"kind": "window", "chunk_id": chunk_id, "room_id": "!r:x", "room_alias": None, "text": text,
               "messages": [{"event_id": f"$e{n}", "sender": "@a:x", "ts": 1000 + n, "body": text}],
               "senders": ["@a:x"], "event_ids": [f"$e{n}"], "ts_start": 1000 + n, "ts_end": 1000 + n,
               "first_event_id": f"$e{n}", "last_event_id": f"$e{n}", "n_messages": 1}
    points.append(WindowPoint(chunk_id, [dense], sparse, payload))  # one message: one vector
writer.write_windows("!r:x", points, [])
writer.commit()
writer.close()

# The reader, through its own wiring.
class Quiet:
    def info(self, *a, **k): pass
    warning = error = info

async def main():
    service = ReaderService(make_index_opener(settings), make_embedder_factory(settings), settings, logger=Quiet())
    service._swap_lock = asyncio.Lock()
    await service._load_embedder()
    await service.check_index()
    reply = await service.answer(b'{"v":1,"op":"search","texts":["broken kettle"],"top_k":1}')
    print(reply.decode(), end="")
    assert service.embedder_state == "loaded", service.embedder_state
    assert b'"ok":true' in reply and b"$e0" in reply, reply

asyncio.run(main())
import time
time.sleep(1)  # onnxruntime's telemetry works on a thread of its own: give it time to show itself
"""

WRITE_SYSCALLS = re.compile(
    r"^\d+\s+(open|openat|openat2|creat|mkdir|mkdirat|rename|renameat2?|unlink|unlinkat|rmdir|"
    r"link|linkat|symlink|symlinkat|truncate|chmod|fchmodat|utimensat)\("
)
NETWORK_CONNECT = re.compile(r"^\d+\s+(connect|sendto|sendmsg)\((\d+)<[^>]*>?,\s*\{sa_family=(AF_INET6?|AF_NETLINK)")


def _written_paths(trace: str) -> list[str]:
    """Every path the traced processes created, removed or opened for writing (strace -y shows
    a directory fd's path, so ``openat(6</dir>, "name", ...)`` resolves)."""
    out = []
    for line in trace.splitlines():
        match = WRITE_SYSCALLS.match(line)
        if not match or "= -1 " in line:
            continue
        call = match.group(1)
        if (
            call.startswith(("open", "creat"))
            and not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", line)
            and call != "creat"
        ):
            continue
        dirfd = re.search(r"\(\s*\d+<([^>]*)>,\s*\"([^\"]*)\"", line)
        plain = re.search(r"\"([^\"]*)\"", line)
        if dirfd:
            path = dirfd.group(2) if dirfd.group(2).startswith("/") else f"{dirfd.group(1)}/{dirfd.group(2)}"
        elif plain:
            path = plain.group(1)
        else:
            continue
        out.append(path)
    return out


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
@pytest.mark.slow
def test_loading_the_embedder_and_searching_connects_nowhere_and_writes_only_the_private_dir(tmp_path: Path) -> None:
    from daemon.config import default_model_dir

    if default_model_dir() is None:
        pytest.skip("no offline model (make setup)")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here (unshare -n needs CAP_SYS_ADMIN)")
    private, home = tmp_path / "private", tmp_path / "home"
    private.mkdir()
    home.mkdir()
    trace = tmp_path / "trace"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",  # the interpreter's own .pyc cache is not the program's doing
        "TMPDIR": str(private / "tmp"),
    }
    (private / "tmp").mkdir()
    proc = subprocess.run(
        [
            "unshare",
            "-n",
            "strace",
            "-f",
            "-qq",
            "-y",
            "-e",
            "trace=network,%file",
            "-o",
            str(trace),
            sys.executable,
            "-c",
            PROBE,
            str(private),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"ok":true' in proc.stdout
    text = trace.read_text()
    connects = [line for line in text.splitlines() if NETWORK_CONNECT.match(line)]
    assert connects == [], connects[:5]
    written = _written_paths(text)
    outside = [p for p in written if not p.startswith((str(private), "/dev/null", "/dev/shm/"))]
    assert outside == [], outside[:10]
    # Not even inside the private dir: a telemetry device id is telemetry wherever it lands.
    assert not [p for p in written if "DeveloperTools" in p or "onnxruntime.db" in p or "deviceid" in p]
    assert list(home.iterdir()) == [], "something wrote under $HOME"


def test_telemetry_is_off_before_onnxruntime_is_imported() -> None:
    """In a fresh interpreter: importing daemon.embedder turns the switches on, so whatever
    imports onnxruntime afterwards starts with telemetry off."""
    code = "import os, daemon.embedder as e; print(all(os.environ.get(k) == v for k, v in e.TELEMETRY_OFF.items()))"
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
