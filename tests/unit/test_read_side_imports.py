"""The read side never loads a write path: not on import, and not through the serve wiring.

Each check runs in a fresh interpreter, because this test process has long since imported the
writers for other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Each test imports the read side in a fresh interpreter: `slow`; `make lint` holds the same
# direction statically (lint-imports).
pytestmark = pytest.mark.slow


WRITE_PATHS = ("daemon.index.edge_writer", "daemon.index.remote_writer", "daemon.refresher.run")


def run_fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON object as its last line."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_read_side_loads_no_write_path() -> None:
    seen = run_fresh(
        f"""
        import json, sys
        import daemon.reader.service, daemon.index.edge_reader, daemon.index.remote_reader, daemon.reader.search, daemon.reader.protocol
        print(json.dumps({{"loaded": [m for m in {WRITE_PATHS!r} if m in sys.modules]}}))
        """
    )
    assert seen == {"loaded": []}


def test_the_serve_wiring_opens_indexes_without_loading_a_write_path(tmp_path: Path) -> None:
    state_dir, private_dir = tmp_path / "state", tmp_path / "private"
    state_dir.mkdir()
    seen = run_fresh(
        f"""
        import json, sys
        from pathlib import Path
        from daemon.config import Settings
        from daemon.wiring import make_index_opener

        common = dict(state_dir=Path({str(state_dir)!r}), reader_private_dir=Path({str(private_dir)!r}),
                      qdrant_api_key_file=None)
        open_edge = make_index_opener(Settings(qdrant_url=None, **common))
        # No request is made until a query: the client and reader are only built here.
        open_server = make_index_opener(Settings(qdrant_url="http://127.0.0.1:9", **common))
        edge_index = open_edge()
        server_index = open_server()
        server_kind = type(server_index).__name__
        server_index.close()
        print(json.dumps({{
            "edge_index": edge_index,
            "server_kind": server_kind,
            "wiring_used": "daemon.wiring" in sys.modules,
            "loaded": [m for m in {WRITE_PATHS!r} if m in sys.modules],
        }}))
        """
    )
    assert seen == {"edge_index": None, "server_kind": "RemoteIndexReader", "wiring_used": True, "loaded": []}
    assert private_dir.is_dir()  # the Edge opener did run: it made its private directory
