"""Files and directories the root hooks make: never written through a link, never a FIFO.

``install`` and ``doctor`` see to it that no one but root can write where the
hooks write (:mod:`slurmpool.trust`).  The hooks do not rely on that alone: at
a path that is theirs, whatever is not what they make there (a symbolic link,
a FIFO, a device, a hard link to another file) is removed and made anew, and
each file is opened so that the open itself cannot follow a link or block on
a FIFO.  Removing a link removes the link, never what it points to.  A
directory of another user's where the hooks want theirs is an error, never
removed: it holds someone's files.

Only :mod:`errno`, :mod:`os` and :mod:`stat`: this runs on every job start.
"""

from __future__ import annotations

import errno
import os
import stat

# What opening a file to append says when a squatter is there: a link, a FIFO with no
# reader, a directory.
_SQUATTED = (errno.ELOOP, errno.ENXIO, errno.EISDIR)


def _mine(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid()


def _is_own_file(st: os.stat_result) -> bool:
    """A regular file of this process's user with no other name (not a hard link)."""
    return stat.S_ISREG(st.st_mode) and _mine(st) and st.st_nlink == 1


def _remove(path: str, st: os.stat_result) -> None:
    """Take away what squats at ``path``: a link, FIFO, socket or device, or a file."""
    if stat.S_ISDIR(st.st_mode):
        os.rmdir(path)  # only an empty one; one with files is an error to report
    else:
        os.unlink(path)


def own_dir(path: str, mode: int, parents: int = 0) -> str:
    """``path`` as a real directory of this process's user with ``mode``.  The
    ``parents`` directories above it are held to the same (made 0755 where missing,
    their mode left as it is); those further up are made where missing.  Returns
    ``path``."""
    if parents:
        own_dir(os.path.dirname(path), -1, parents - 1)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and not _mine(st):
        raise PermissionError(f"{path} is a directory of uid {st.st_uid}, expected {os.geteuid()}")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        _remove(path, st)
        st = None
    if st is None:
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755, exist_ok=True)
        try:
            os.mkdir(path, 0o755 if mode < 0 else mode)
        except FileExistsError:  # made meanwhile by another hook on the node
            return own_dir(path, mode)
        st = os.lstat(path)
    if mode >= 0 and stat.S_IMODE(st.st_mode) != mode:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return path


def create_new(path: str, mode: int) -> int:
    """A file descriptor for a new regular file at ``path``: whatever was there is removed
    first, and the file is created exclusively, so no link or FIFO can be slipped in."""
    return _create_new(path, os.O_WRONLY, mode)


def open_append(path: str, mode: int) -> int:
    """A file descriptor to append to the regular file ``path`` of this process's user,
    created with ``mode`` when missing; anything else there is replaced."""
    return _open_own(path, os.O_WRONLY | os.O_APPEND, mode)


def ensure_own_file(path: str, mode: int) -> None:
    """The regular file ``path`` of this process's user exists: created with ``mode``
    when missing, anything else there replaced.  One that is there already is not
    opened: closing a descriptor drops every POSIX lock this process holds on the file,
    such as those of the SQLite connections it has open on it."""
    try:
        if _is_own_file(os.lstat(path)):
            return
    except FileNotFoundError:
        pass
    os.close(_open_own(path, os.O_WRONLY, mode))


def open_read_write(path: str, mode: int) -> int:
    """A file descriptor to read and rewrite the regular file ``path`` of this process's
    user, created with ``mode`` when missing; anything else there is replaced."""
    return _open_own(path, os.O_RDWR, mode)


def _create_new(path: str, access: int, mode: int) -> int:
    flags = access | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        _remove(path, os.lstat(path))
        return os.open(path, flags, mode)


def _open_own(path: str, access: int, mode: int) -> int:
    try:
        fd = os.open(path, access | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return _created(path, access, mode)
    except OSError as e:
        if e.errno not in _SQUATTED:
            raise  # not allowed to (EACCES): nothing to replace either
        return _create_new(path, access, mode)
    if _is_own_file(os.fstat(fd)):
        return fd
    os.close(fd)
    return _create_new(path, access, mode)


def _created(path: str, access: int, mode: int) -> int:
    try:
        return os.open(path, access | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileExistsError:  # made meanwhile by another hook: open that one
        return _open_own(path, access, mode)


def remove_in(directory: str, name: str) -> bool:
    """Remove ``name`` from ``directory`` unless ``directory`` is a link (which would lead
    the removal elsewhere); whether something was removed."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # missing, or not a real directory: nothing of ours to remove
        return False
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def clear_squatter(path: str) -> str:
    """Remove from ``path`` anything but a regular file of this process's user, for a
    library that opens ``path`` by name (SQLite and its -wal and -shm files)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if not _is_own_file(st):
        _remove(path, st)
    return path
