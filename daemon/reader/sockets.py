"""The reader's listening socket as the operating system sees it.

Owns: binding the socket path (created 0660, a stale socket file replaced, a live one refused),
taking the socket systemd hands over (``LISTEN_FDS``/``LISTEN_PID``), telling systemd the reader is
ready or stopping (``NOTIFY_SOCKET``), and the kernel's limits on both: the listen backlog
(``net.core.somaxconn``) and how many connections the descriptor limit leaves room for.

Must not: accept, read or write a connection (``daemon.reader.connections`` does), or log: the
caller says what a failure means.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import stat
from pathlib import Path

SOCKET_MODE = 0o660
SYSTEMD_FIRST_FD = 3

# The listen backlog we ask for when we bind the path ourselves; under systemd the socket unit's
# Backlog= sets it. The kernel caps either at net.core.somaxconn.
DEFAULT_BACKLOG = 1024
# Connections served at once. Kept below RLIMIT_NOFILE (LimitNOFILE= in the unit) minus the
# descriptors the process needs for itself (index files, model, journal, worker threads), so
# accept() never meets EMFILE because of our own connections.
DEFAULT_MAX_CONNECTIONS = 1024
FD_RESERVE = 128


def somaxconn() -> int | None:
    """The kernel's cap on any listen backlog, or None where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text().strip())
    except (OSError, ValueError):
        return None


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to stay ``FD_RESERVE`` below the soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


def systemd_socket() -> socket.socket | None:
    """The listening socket systemd passed (socket activation), or None when not activated."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)  # children must not think the socket is theirs
    if count < 1:
        return None
    sock = socket.socket(fileno=SYSTEMD_FIRST_FD)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise OSError("the socket systemd passed is not a Unix stream socket")
    os.set_inheritable(sock.fileno(), False)
    sock.setblocking(False)
    return sock


def bind_socket(path: str | os.PathLike[str], backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """Bind ``path`` with mode 0660 and listen with ``backlog`` (the kernel silently caps it at
    net.core.somaxconn). A stale socket file is replaced; a live one is refused."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        if not stat.S_ISSOCK(target.lstat().st_mode):
            raise OSError(f"{target} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(target))
        except OSError:
            target.unlink()  # nobody listening: a leftover of a reader that died
        else:
            raise OSError(f"another reader is already listening on {target}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o117)  # created 0660 from the start, no window where it is wider
    try:
        sock.bind(str(target))
    finally:
        os.umask(old_umask)
    os.chmod(target, SOCKET_MODE)
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def sd_notify(message: str) -> None:
    """Tell systemd ``message`` (``READY=1``, ``STOPPING=1``) when it asked to be told."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.sendto(message.encode("ascii"), address)
