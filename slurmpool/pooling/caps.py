"""MIG capability device files: who may open a MIG instance.

Opening a MIG instance needs read access to its GPU-instance and
compute-instance capability files, ``<devices_root>/nvidia-caps/nvidia-cap<n>``
(minors from the driver's ``mig-minors`` table).  The prolog hands both to
the job's user (owner uid, mode 0400: the user and root); the epilog gives
them back to root (0400).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

CAP_MODE = 0o400


class CapsError(OSError):
    """A capability file is missing or cannot be changed."""


def cap_path(devices_root: str | os.PathLike[str], minor: int) -> str:
    return os.path.join(os.fspath(devices_root), "nvidia-caps", f"nvidia-cap{minor}")


def _set(devices_root: str | os.PathLike[str], minors: Iterable[int], uid: int) -> list[str]:
    done = []
    for minor in minors:
        path = cap_path(devices_root, minor)
        try:
            os.chown(path, uid, 0, follow_symlinks=False)
            os.chmod(path, CAP_MODE)
        except FileNotFoundError:
            raise CapsError(
                f"MIG capability file {path} does not exist (create the nvidia-caps "
                "device nodes, e.g. with nvidia-modprobe)"
            ) from None
        except OSError as e:
            raise CapsError(f"cannot hand {path} to uid {uid}: {e.strerror}") from None
        done.append(path)
    return done


def grant(devices_root: str | os.PathLike[str], minors: Iterable[int], uid: int) -> list[str]:
    """Make the capability files readable by ``uid`` (and root) only."""
    return _set(devices_root, minors, uid)


def restore(devices_root: str | os.PathLike[str], minors: Iterable[int]) -> list[str]:
    """Give the capability files back to root only; missing files are skipped."""
    existing = [m for m in minors if os.path.exists(cap_path(devices_root, m))]
    return _set(devices_root, existing, 0)


def owner(devices_root: str | os.PathLike[str], minor: int) -> tuple[int, int]:
    """``(uid, mode)`` of one capability file (for status and tests)."""
    st = os.stat(cap_path(devices_root, minor))
    return st.st_uid, st.st_mode & 0o7777
