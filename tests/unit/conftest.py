"""Fixtures shared by the unit tests that talk to a live reader over a Unix socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

# A socket path has ~108 bytes, so a root longer than this is not used for sock_dir.
SHORT_ROOT_MAX = 32


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # AF_UNIX paths are limited to ~108 bytes; pytest's tmp_path can be longer. In memory where
    # the test temp root is (tests/conftest.py: /dev/shm): some tests keep an Edge index beside
    # the socket, and each of its commits syncs the filesystem, seconds a test on a disk.
    root = os.environ.get("PYTEST_DEBUG_TEMPROOT")
    parent = root if root and len(root) <= SHORT_ROOT_MAX else "/tmp"
    path = Path(tempfile.mkdtemp(prefix="hc-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)
