"""One refresh at a time on a state directory: the lock a whole refresh cycle holds.

Owns: ``STATE_DIR/refresh.lock``, an ``flock`` taken before a refresh asks the homeserver anything
and held until it has stored (or dropped) its sync token. The index writer's own ``work.lock``
keeps two runs from writing one shard; this one also keeps a second refresh (the timer's, while
``huginn-chat follow`` runs one, or one started by hand) from reading ``sync.json`` and deciding
while the first is half way, and from failing as "index_unavailable" when it would only have found
nothing new. A refresh that finds the lock taken ends at once (journal ``run_skipped``): the one
holding it reads everything there is.

Must not: write anything into the file (it only exists to be locked; nothing reads it), follow a
link at its place (``safe_files.open_no_follow``), or wait without a way out: ``acquire`` takes
the lock at once or says no; a caller that waits asks again between its own stop checks.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from daemon.safe_files import make_configured_dir, open_no_follow

REFRESH_LOCK_FILE = "refresh.lock"


class RefreshLock:
    """``acquire()`` is True once this object holds the lock; ``release()`` gives it back. A
    process forked while the lock is held shares it: the child runs under it and must not
    release it (the parent does, once the child has ended)."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / REFRESH_LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        make_configured_dir(self.path.parent)
        fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
