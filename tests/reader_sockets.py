"""Socket helpers for the reader tests that talk to a live ``ReaderService`` the way the CLI does:
plain blocking Unix sockets. (The ``sock_dir`` fixture is in tests/unit/conftest.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from daemon.reader.service import ReaderService
from tests.reader_fakes import FakeEmbedder, RecordingLogger


def connect(path: Path, timeout: float = 5.0) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.connect(str(path))
    return conn


def ask(path: Path, request: Any, timeout: float = 5.0) -> dict[str, Any]:
    with connect(path, timeout) as conn:
        data = request if isinstance(request, bytes) else json.dumps(request).encode()
        conn.sendall(data + b"\n")
        with conn.makefile("rb") as stream:
            return json.loads(stream.readline())


def read_until_closed(conn: socket.socket) -> list[bytes]:
    chunks = []
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return [line for line in b"".join(chunks).split(b"\n") if line]


def service_over(index: Any, embedder: Any = None, **kwargs: Any) -> ReaderService:
    kwargs.setdefault("logger", RecordingLogger())
    return ReaderService(lambda: index, lambda: embedder if embedder is not None else FakeEmbedder(), None, **kwargs)
