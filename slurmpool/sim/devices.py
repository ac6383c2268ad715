"""Simulated driver files: the ``mig-minors`` table and the device nodes.

``/proc/driver/nvidia-caps/mig-minors`` maps MIG capabilities to minor
numbers of ``/dev/nvidia-caps/nvidia-cap<n>``.  The real file lists every
possible GPU instance (swizzId 0..14) and compute instance (0..7) of up to
32 GPUs, whether or not they exist; so does this one.  Minor numbers follow
the formula observed on real systems: ``gi = 3 + 135*gpu + 9*gi_id`` and
``ci = gi + 1 + ci_id``.

Device nodes are real character devices when the simulator runs as root
(``os.mknod``; opening them fails with ENXIO since no driver is behind them,
so simulated CUDA takes that ENXIO for a successful open), and
regular files otherwise.  ``/dev/nvidiaN`` and ``nvidiactl`` use major 195
and mode 0666 like the driver.  The capability major is dynamic on real
systems; the simulator uses 511.  Capability nodes default to mode 0400,
owner root: the restrictive setting that MIG isolation relies on (with
``NVreg_ModifyDeviceFiles=1`` the driver owns these modes and any user can
have them reset: :mod:`slurmpool.sim.capabilities`; the MIG user guide shows
``config`` as ``cr--------``).  ``monitor`` (cap 2) is 0444 as
on real systems.  slurmpool hands a job its instance by chowning the GI
and CI nodes to the job's user.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: the hooks' NVML path imports this module
    from pathlib import Path

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
CAPS_MAJOR = 511
CONFIG_MINOR = 1
MONITOR_MINOR = 2
MAX_GPUS = 32
MAX_GI_ID = 14
MAX_CI_ID = 7
GPU_NODE_MODE = 0o666
CAP_MODE = 0o400
MONITOR_MODE = 0o444
# Where the simulator keeps the nodes nvidia-modprobe would make (sim.capabilities).
RESET_DIR = ".nvidia-modprobe"


def gi_minor(gpu_minor: int, gi_id: int) -> int:
    return 3 + 135 * gpu_minor + 9 * gi_id


def ci_minor(gpu_minor: int, gi_id: int, ci_id: int) -> int:
    return gi_minor(gpu_minor, gi_id) + 1 + ci_id


def mig_minors_text(gpu_count: int = MAX_GPUS) -> str:
    """The ``mig-minors`` file for ``gpu_count`` GPU minors (the driver writes 32)."""
    lines = [f"config {CONFIG_MINOR}", f"monitor {MONITOR_MINOR}"]
    for gpu in range(gpu_count):
        for gi in range(MAX_GI_ID + 1):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            for ci in range(MAX_CI_ID + 1):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_minor(gpu, gi, ci)}")
    return "\n".join(lines) + "\n"


def write_mig_minors(path: Path, gpu_count: int = MAX_GPUS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(mig_minors_text(gpu_count))
    path.chmod(0o444)


def cap_path(device_root: Path, minor: int) -> Path:
    return device_root / "nvidia-caps" / f"nvidia-cap{minor}"


def gpu_path(device_root: Path, gpu_minor: int) -> Path:
    return device_root / f"nvidia{gpu_minor}"


def make_node(path: Path, major: int, minor: int, mode: int) -> str:
    """Create (or re-create) one device node; returns ``"char"`` or ``"file"``."""
    if path.exists() or path.is_symlink():
        path.unlink()
    kind = "file"
    if os.geteuid() == 0:
        try:
            os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
            kind = "char"
        except PermissionError:  # a container without CAP_MKNOD
            pass
    if kind == "file":
        path.touch()
    os.chmod(path, mode)  # mknod and touch are subject to the umask
    return kind


def make_device_nodes(device_root: Path, gpu_minors: list[int], cap_mode: int = CAP_MODE) -> str:
    """All nodes of a node's GPUs: nvidiactl, nvidiaN, and every possible GI/CI capability."""
    caps = device_root / "nvidia-caps"
    caps.mkdir(parents=True, exist_ok=True)
    os.chmod(caps, 0o755)
    kind = make_node(device_root / "nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR, GPU_NODE_MODE)
    make_node(cap_path(device_root, CONFIG_MINOR), CAPS_MAJOR, CONFIG_MINOR, CAP_MODE)
    make_node(cap_path(device_root, MONITOR_MINOR), CAPS_MAJOR, MONITOR_MINOR, MONITOR_MODE)
    for minor in gpu_minors:
        make_node(gpu_path(device_root, minor), NVIDIA_MAJOR, minor, GPU_NODE_MODE)
        for gi in range(MAX_GI_ID + 1):
            n = gi_minor(minor, gi)
            make_node(cap_path(device_root, n), CAPS_MAJOR, n, cap_mode)
            for ci in range(MAX_CI_ID + 1):
                n = ci_minor(minor, gi, ci)
                make_node(cap_path(device_root, n), CAPS_MAJOR, n, cap_mode)
    return kind


def remove_device_nodes(device_root: Path) -> None:
    """Remove the nodes a previous ``make_device_nodes`` created (for ``--force``)."""
    for caps in (device_root / "nvidia-caps", device_root / RESET_DIR):
        for p in caps.glob("nvidia-cap*"):
            p.unlink()
    for p in device_root.glob("nvidia*"):
        if p.name == "nvidiactl" or p.name[6:].isdigit():
            p.unlink()
