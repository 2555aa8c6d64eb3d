"""Fixtures shared by the unit tests that talk to a live reader over a Unix socket."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # AF_UNIX paths are limited to ~108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="hc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
