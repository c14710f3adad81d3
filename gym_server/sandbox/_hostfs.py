"""Reading and writing a sandbox's files from the host without following the sandbox's symlinks.

The local backends keep a sandbox's work dir and /tmp in host folders. Code inside the sandbox controls
what those folders hold: a symlink `out.txt -> /etc/shadow`, a FIFO that blocks any reader, a folder
swapped for a link. Every path component is therefore opened relative to its parent with `O_NOFOLLOW`,
only regular files are read or written, and opens never block (`O_NONBLOCK`), so the host touches exactly
the sandbox's own files and nothing else, even when it runs as root.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["read_file", "write_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_parent(base: Path, parts: list[str], *, create: bool, owner: int | None) -> int:
    """An fd of the folder holding `parts[-1]`, walking (and maybe creating) folders without links."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, owner, owner, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(
    base: Path, parts: list[str], data: bytes, *, owner: int | None = None, mode: int = 0o644
) -> None:
    """Write `data` to `base/parts...`, creating folders; refuses links and non-regular files.

    Raises:
        OSError: a component is a symlink (ELOOP), not a folder, or the file is not a regular file.
    """
    if not parts:
        raise IsADirectoryError(str(base))
    parent = _open_parent(base, parts, create=True, owner=owner)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, mode, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{'/'.join(parts)} is not a regular file")
        os.ftruncate(fd, 0)
        if owner is not None:
            os.fchown(fd, owner, owner)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def read_file(base: Path, parts: list[str], max_bytes: int) -> bytes:
    """Read at most `max_bytes` of the regular file `base/parts...`; refuses links, FIFOs and devices.

    Raises:
        FileNotFoundError: no such file.
        OSError: a component is a symlink or the file is not a regular file.
    """
    if not parts:
        raise IsADirectoryError(str(base))
    parent = _open_parent(base, parts, create=False, owner=None)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{'/'.join(parts)} is not a regular file")
        chunks: list[bytes] = []
        left = max_bytes
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
