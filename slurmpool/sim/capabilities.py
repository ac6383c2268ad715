"""The simulated driver's ``/proc/driver/nvidia`` files and its ``nvidia-modprobe -f``.

- ``params`` carries ``ModifyDeviceFiles`` (the state's ``modify_device_files``,
  1 by default as in the driver) and the device-file owner and mode the driver
  uses for ``/dev/nvidiaN``.
- ``capabilities/mig/{config,monitor}`` exist on every node; each GPU and
  compute instance has its ``access`` file from its creation to its
  destruction (:func:`update_access_files` after each MIG administration
  call, :func:`sync_access_files` when a node is made or reset).  GI and CI
  capabilities advertise ``DeviceFileMode: 292`` (0444),
  ``config`` 256 (0400), ``monitor`` 292, and ``DeviceFileModify`` follows
  ``ModifyDeviceFiles``.
- :func:`reset_node` is what ``nvidia-modprobe -f <access file>`` does where
  the driver may modify device files: it makes the capability's node root's
  with the advertised mode, re-creating it when its type, owner or mode differ.
  The real helper is setuid root and libcuda runs it before it opens a
  capability, so any user can have a node reset.  The simulator cannot be
  setuid: an unprivileged caller's reset fails with EPERM, and simulated CUDA
  then opens the node the helper would have made instead, a root-owned copy
  with the advertised mode that :func:`make_reset_nodes` prepares under
  ``<device root>/.nvidia-modprobe/`` (the device cgroup judges that copy
  as it would the real node, since it checks major and minor, not the path).

Standard library only: simulated CUDA runs as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import os
import stat

from slurmpool.driver.procfs import (
    CapabilityAccess,
    access_path,
    access_text,
    capabilities_dir,
    params_path,
    parse_access,
)
from slurmpool.sim import devices

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from slurmpool.sim.state import State

# The modes the driver advertises, in its access files (MIG user guide).
CONFIG_MODE = 0o400
MONITOR_MODE = 0o444
INSTANCE_MODE = 0o444
# The driver's defaults for /dev/nvidiaN (NVreg_DeviceFileUID/GID/Mode).
DEVICE_FILE_MODE = 0o666
_MIG_MINORS_SUFFIX = os.path.join("driver", "nvidia-caps", "mig-minors")


def proc_root(st: State) -> str:
    """The node's stand-in for ``/proc``: where its ``mig-minors`` table lies."""
    if st.get("proc_root"):
        return str(st["proc_root"])
    minors = str(st["mig_minors_path"])
    return minors[: -len(_MIG_MINORS_SUFFIX)].rstrip("/") or "/"


def params_text(modify: bool) -> str:
    return (
        f"ModifyDeviceFiles: {int(modify)}\n"
        "DeviceFileUID: 0\n"
        "DeviceFileGID: 0\n"
        f"DeviceFileMode: {DEVICE_FILE_MODE}\n"
    )


def write_params(proc: str, modify: bool) -> None:
    from pathlib import Path

    path = Path(params_path(proc))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(params_text(modify))
    path.chmod(0o444)


def wanted_access(st: State) -> dict[str, CapabilityAccess]:
    """Every access file the driver shows for this state, by path."""
    proc = proc_root(st)
    modify = bool(st.get("modify_device_files", True))
    base = capabilities_dir(proc)
    want = {
        os.path.join(base, "mig", "config"): CapabilityAccess(
            devices.CONFIG_MINOR, CONFIG_MODE, modify
        ),
        os.path.join(base, "mig", "monitor"): CapabilityAccess(
            devices.MONITOR_MINOR, MONITOR_MODE, modify
        ),
    }
    for gpu in st["gpus"]:
        if not gpu["mig_current"]:
            continue
        m = gpu["minor"]
        for gi in gpu["gis"]:
            want[access_path(proc, m, gi["id"])] = CapabilityAccess(
                devices.gi_minor(m, gi["id"]), INSTANCE_MODE, modify
            )
            for ci in gi["cis"]:
                want[access_path(proc, m, gi["id"], ci["id"])] = CapabilityAccess(
                    devices.ci_minor(m, gi["id"], ci["id"]), INSTANCE_MODE, modify
                )
    return want


def sync_access_files(st: State) -> None:
    """Make the capability access files those of the instances in ``st``."""
    want = wanted_access(st)
    base = capabilities_dir(proc_root(st))
    have = {
        os.path.join(top, name)
        for top, _dirs, files in os.walk(base)
        for name in files
        if not name.startswith(".")
    }
    _apply(have - want.keys(), want)


def update_access_files(before: dict[str, CapabilityAccess], st: State) -> None:
    """After a change from the instances that gave ``before`` (:func:`wanted_access`):
    write the access files that are new, remove those that went."""
    want = wanted_access(st)
    if want == before:
        return
    _apply(before.keys() - want.keys(), want, before)


def _apply(
    gone: set[str],
    want: dict[str, CapabilityAccess],
    before: dict[str, CapabilityAccess] | None = None,
) -> None:
    for path in sorted(gone, key=len, reverse=True):  # a CI's before its GI's
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        top = os.path.dirname(path)
        # The instance's own directory (gi<i> or ci<c>); gpu<g>/mig stays.
        if os.path.basename(top).startswith(("gi", "ci")):
            with contextlib.suppress(OSError):  # a GI's that still holds a CI's
                os.rmdir(top)
    for path, access in want.items():
        if before is not None and before.get(path) == access:
            continue
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o444)
        except FileNotFoundError:  # a new instance's directory
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            fd = os.open(path, flags, 0o444)
        try:
            os.write(fd, access_text(access).encode())
        finally:
            os.close(fd)


def reset_path(device_root: str | os.PathLike[str], minor: int) -> Path:
    """The node ``nvidia-modprobe -f`` would make for ``minor`` (see the module docstring)."""
    from pathlib import Path

    return Path(device_root) / devices.RESET_DIR / f"nvidia-cap{minor}"


def make_reset_nodes(device_root: Path, gpu_minors: list[int]) -> None:
    """Root-owned copies of every GI and CI capability node, in the advertised mode."""
    where = device_root / devices.RESET_DIR
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o755)
    for m in gpu_minors:
        for gi in range(devices.MAX_GI_ID + 1):
            minors = [devices.gi_minor(m, gi)]
            minors += [devices.ci_minor(m, gi, ci) for ci in range(devices.MAX_CI_ID + 1)]
            for n in minors:
                devices.make_node(reset_path(device_root, n), devices.CAPS_MAJOR, n, INSTANCE_MODE)


def _as_reset(st: os.stat_result, mode: int) -> bool:
    return st.st_uid == 0 and st.st_gid == 0 and stat.S_IMODE(st.st_mode) == mode


def reset_node(access_file: str | os.PathLike[str], device_root: str | os.PathLike[str]) -> str:
    """``nvidia-modprobe -f ACCESS_FILE``: returns ``"unchanged"``, ``"reset"`` or
    ``"not-modifiable"`` (``DeviceFileModify: 0``).  Raises OSError (ENOENT for a
    capability that does not exist, EPERM for a caller who may not make the node)."""
    from pathlib import Path

    access = parse_access(Path(access_file).read_text(), str(access_file))
    if not access.modify:
        return "not-modifiable"
    node = Path(devices.cap_path(Path(device_root), access.minor))
    with contextlib.suppress(FileNotFoundError):
        if _as_reset(node.lstat(), access.mode):
            return "unchanged"
    if os.geteuid() != 0:
        raise PermissionError(1, "nvidia-modprobe: only root may reset a device node", str(node))
    devices.make_node(node, devices.CAPS_MAJOR, access.minor, access.mode)
    os.chown(node, 0, 0, follow_symlinks=False)
    return "reset"


def node_as_opened(
    access_file: str | os.PathLike[str], device_root: str | os.PathLike[str], minor: int
) -> Path:
    """The node simulated CUDA opens for the capability of ``minor``: where the
    driver may modify device files, the node as ``nvidia-modprobe -f`` leaves it."""
    from pathlib import Path

    node = devices.cap_path(Path(device_root), minor)
    try:
        access = parse_access(Path(access_file).read_text(), str(access_file))
    except (OSError, ValueError):
        return node  # no access file: the open decides on the node as it is
    if not access.modify or access.minor != minor:
        return node
    try:
        reset_node(access_file, device_root)
    except PermissionError:
        return reset_path(device_root, minor)
    except OSError:
        pass
    return node
