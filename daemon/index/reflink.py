"""Copy-on-write file clones (reflinks) where the filesystem offers them.

Owns: ``clone_file`` — Linux's ``FICLONE`` ioctl, which makes the destination share the source's
extents; a later write to either side gets new blocks (copy on write), so the clone never
changes under a reader and costs metadata, not data, however large the file. XFS (made with
``reflink=1``, the default since xfsprogs 5.1), Btrfs and bcachefs offer it; ext4 and tmpfs do not,
and the caller copies instead.

Must not: copy data itself (it only says whether the clone happened), or hide a real failure: only
"this filesystem or this pair of files cannot be cloned" answers False.
"""

from __future__ import annotations

import errno
import fcntl

# _IOW(0x94, 9, int) from linux/fs.h; Python 3.11's fcntl has no name for it.
FICLONE = 0x40049409

# The answers of a filesystem (or a pair of files, e.g. on two filesystems) that cannot clone.
_CANNOT_CLONE = frozenset({errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM})


def clone_file(src_fd: int, dst_fd: int) -> bool:
    """Make ``dst_fd`` (open for writing, empty) a clone of ``src_fd``. False when the filesystem
    cannot; any other failure raises."""
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _CANNOT_CLONE:
            return False
        raise
    return True
