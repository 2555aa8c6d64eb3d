"""Files under the state directory, written and read so that nothing planted there is followed.

Owns: the product's modes (``PRODUCT_UMASK``, ``FILE_MODE``, ``DIR_MODE``, ``restrict_umask``),
``PlantedLinkError``, and the only ways the product touches a file of its own under the state
directory: ``make_configured_dir`` (the state directory itself), ``make_dir`` (mode set here, a
link refused), ``open_no_follow`` (locks, markers),
``read_bytes`` / ``read_text`` (state files), ``write_atomically`` (a unique temporary name from
``tempfile.mkstemp`` in the same directory, fsync, ``os.replace``), ``require_writable_dir``.

Why: the state directory may be writable by someone less trusted than whoever runs ``purge`` from
a root shell. A fixed temporary name (``last_run.tmp``) or a lock opened by name follows a link
planted there and writes through it, outside the state directory; the process umask decides who
may read the chat text in every generation. So no name is opened with a fixed temporary suffix,
every open is ``O_NOFOLLOW``, a link where a product file belongs is refused by name, and modes are
set here, never left to the shell's umask.

Must not: import anything but the standard library and ``daemon.errors`` (the reader imports it,
and the read side must not load a write path); decide what is written or where.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from daemon.errors import OperationalError

PRODUCT_UMASK = 0o027  # nothing for others; the group may read (the reader, an operator group)
FILE_MODE = 0o640
DIR_MODE = 0o750


class PlantedLinkError(OperationalError):
    """A symbolic link (or something else that is not ours) where a product file belongs."""

    def __init__(self, path: str | os.PathLike[str], what: str = "a symbolic link"):
        self.path = Path(path)
        super().__init__(f"refused: {self.path} is {what}, not a file huginn-chat made; remove it and run again")


def restrict_umask() -> int:
    """Add ``PRODUCT_UMASK`` to the process umask (a tighter one, such as a unit's 0077, stays
    as it is); returns the previous umask."""
    previous = os.umask(PRODUCT_UMASK)
    os.umask(previous | PRODUCT_UMASK)
    return previous


def refuse_link(path: str | os.PathLike[str]) -> None:
    """Raise ``PlantedLinkError`` when ``path`` is a symbolic link; nothing there is fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise PlantedLinkError(path)


def make_dir(path: str | os.PathLike[str], *, parents: bool = False) -> Path:
    """Create ``path`` with ``DIR_MODE`` unless it is there already (a directory made earlier keeps
    its mode); refuse a link or a non-directory in its place."""
    path = Path(path)
    try:
        path.mkdir(mode=DIR_MODE, parents=parents)
    except FileExistsError:
        pass
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise PlantedLinkError(path)
    if not stat.S_ISDIR(mode):
        raise PlantedLinkError(path, "not a directory")
    return path


def make_configured_dir(path: str | os.PathLike[str]) -> Path:
    """A directory the operator named (``state_dir``, ``reader_private_dir``): created with
    ``DIR_MODE`` (parents too) if missing. It may itself be a link, the operator's choice (a state
    directory moved to another disk); what the product keeps under it may not (``make_dir``)."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if not path.is_dir():
        raise PlantedLinkError(path, "not a directory")
    return path


def open_no_follow(path: str | os.PathLike[str], flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` that refuses a link at ``path`` (``O_NOFOLLOW``) and anything but a regular
    file; a file it creates gets ``mode`` whatever the umask."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PlantedLinkError(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PlantedLinkError(path, "not a regular file")
        # One made before modes were the product's keeps no wider mode than a new one gets.
        if flags & os.O_CREAT and st.st_mode & 0o7777 & ~mode and st.st_uid == os.geteuid():
            os.fchmod(fd, st.st_mode & mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The whole file, never through a link (``FileNotFoundError`` when there is none)."""
    fd = open_no_follow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_text(path: str | os.PathLike[str], encoding: str = "utf-8") -> str:
    return read_bytes(path).decode(encoding)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(
    path: str | os.PathLike[str], data: bytes | str, *, mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace ``path`` with ``data`` whole: written under a unique name in the same directory
    (``tempfile.mkstemp``: ``O_EXCL``, so nothing planted is opened), given ``mode``, fsynced and
    renamed over ``path``. A crash leaves the old content or the new one. A link at ``path`` is
    refused, not replaced: it is no file of ours."""
    path = Path(path)
    refuse_link(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def require_writable_dir(path: str | os.PathLike[str]) -> None:
    """Create ``path`` (``DIR_MODE``) if missing and prove it writable by creating and removing
    a file there: ``os.access`` cannot see every reason (a read-only mount seen through a bind,
    an immutable directory). Raises ``OSError`` with the errno of the failure."""
    directory = make_configured_dir(path)
    fd, probe = tempfile.mkstemp(prefix=".writable.", dir=directory)
    os.close(fd)
    os.unlink(probe)
