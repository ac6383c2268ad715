"""POSIX access ACLs on the hooks' own directories: which users besides root may
traverse one.

Written as the kernel's ``system.posix_acl_access`` extended attribute (the format
of ``<linux/posix_acl_xattr.h>``: a version word, then ``(tag, perm, id)``
entries sorted by tag and id), so no ``setfacl`` is needed on the node.  The
group class bits of the mode show the ACL's mask, so the directory's mode with
an ACL is ``0o7<mask>0``.

Only :mod:`os` and :mod:`struct`: this runs on job start.
"""

from __future__ import annotations

import os
import struct

XATTR = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_UNDEFINED = 0xFFFFFFFF
TRAVERSE = 0o1


class AclError(OSError):
    """The filesystem takes no ACL, or the directory cannot be given one."""


def encode(owner_perm: int, users: dict[int, int]) -> bytes:
    """An access ACL: the owner's ``owner_perm``, each uid in ``users`` its perm, the
    owning group and others nothing, the mask the union of the users' perms."""
    mask = 0
    for perm in users.values():
        mask |= perm
    entries = [(_USER_OBJ, owner_perm & 7, _UNDEFINED)]
    entries += [(_USER, users[uid] & 7, uid) for uid in sorted(users)]
    entries += [(_GROUP_OBJ, 0, _UNDEFINED), (_MASK, mask, _UNDEFINED), (_OTHER, 0, _UNDEFINED)]
    return struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)


def decode_users(data: bytes) -> dict[int, int]:
    """The named users' perms of an encoded ACL."""
    (version,) = struct.unpack_from("<I", data)
    if version != _VERSION:
        raise ValueError(f"ACL version {version}, expected {_VERSION}")
    out = {}
    for off in range(4, len(data) - 7, 8):
        tag, perm, uid = struct.unpack_from("<HHI", data, off)
        if tag == _USER:
            out[uid] = perm
    return out


def let_traverse(path: str, uids: set[int]) -> None:
    """Root alone may list and change the directory ``path``; ``uids`` may pass through
    it (reach what it holds by name).  The directory is opened without following a
    link, and the ACL set on that descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            os.setxattr(fd, XATTR, encode(0o7, dict.fromkeys(uids - {0}, TRAVERSE)))
        except OSError as e:
            raise AclError(e.errno, f"cannot give {path} an ACL: {e.strerror}") from None
    finally:
        os.close(fd)


def traversers(path: str) -> set[int]:
    """The uids besides the owner that the ACL of ``path`` lets through (none without one)."""
    try:
        data = os.getxattr(path, XATTR, follow_symlinks=False)
    except OSError:
        return set()
    return {uid for uid, perm in decode_users(data).items() if perm & TRAVERSE}
