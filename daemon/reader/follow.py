"""Noticing a publication cheaply: has a file been replaced since we last looked?

Owns: ``FileChangeWatch``, one ``os.stat`` per look (inode, size, mtime), which the reader runs
about twice a second on ``generations/CURRENT`` so a published generation is served within a
second, while the full check (open the newer generation, swap it in) runs only when the file
changed. The refresher replaces CURRENT whole (a temp file renamed over it), so every publication
gives it a new inode.

Must not: read the file, open an index or import anything of the write side; it only says
"look now".
"""

from __future__ import annotations

import os
from pathlib import Path


class FileChangeWatch:
    """``changed()`` is True on the first look and whenever the file's identity differs from the
    previous look's (appeared, vanished, replaced, rewritten)."""

    _UNSEEN = ("unseen",)

    def __init__(self, path: Path):
        self.path = path
        self._seen: tuple[object, ...] = self._UNSEEN

    def _identity(self) -> tuple[object, ...]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return ("absent",)
        except OSError as exc:  # unreadable directory: a full check will say what is wrong
            return ("error", exc.errno)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def changed(self) -> bool:
        now = self._identity()
        changed, self._seen = now != self._seen, now
        return changed
