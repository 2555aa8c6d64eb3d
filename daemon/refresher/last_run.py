"""The last refresh run's summary: ``STATE_DIR/last_run.json``.

Owns: the file's name, writing a finished run's summary there (``write_last_run``, replaced whole
through ``daemon.safe_files``), and reading it back for `huginn-chat status` (``read_last_run``).
The summary lives beside the index rather than in it, so a run that changed nothing writes nothing
to the index and publishes no generation.

Must not: decide what a summary holds (``daemon.refresher.summary`` does), follow a link planted
where the file belongs, or fail `status` over a file it cannot read (it says why instead).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.safe_files import PlantedLinkError, make_configured_dir, read_text, write_atomically

LAST_RUN_FILE = "last_run.json"


def write_last_run(state_dir: Path, summary: dict[str, Any]) -> None:
    """The run summary for `huginn-chat status`, beside the index rather than in it, so a run that
    changed nothing writes nothing to the index and publishes no generation."""
    make_configured_dir(state_dir)
    write_atomically(state_dir / LAST_RUN_FILE, json.dumps(summary, sort_keys=True))


def read_last_run(state_dir: Path) -> dict[str, Any] | None:
    """The refresher's last run summary, or None if no run was recorded."""
    try:
        value = json.loads(read_text(Path(state_dir) / LAST_RUN_FILE))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, PlantedLinkError) as exc:
        return {"unreadable": f"{type(exc).__name__}: {exc}"}
    return value if isinstance(value, dict) else {"unreadable": "not a JSON object"}
