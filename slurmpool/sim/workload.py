"""A test workload for simulated GPUs: ``python -m slurmpool.sim.workload``.

It behaves like a small CUDA program as far as slurmpool can tell:

- it picks its device from ``CUDA_VISIBLE_DEVICES`` the way CUDA does
  (indices, ``GPU-`` and ``MIG-`` UUIDs or unique prefixes, legacy
  ``MIG-GPU-<uuid>/<gi>/<ci>``; parsing stops at the first invalid entry;
  unset means every GPU; a MIG-enabled GPU stands for its MIG devices; a
  process uses only the first device, and at most one MIG device);
- it refuses a GPU whose ``/dev/nvidiaN`` (or ``nvidiactl``) the user cannot
  read and write, and a MIG device whose GI or CI capability node
  (``nvidia-caps/nvidia-cap<n>``, minors from the ``mig-minors`` file) the
  user cannot read, or whose node the process's device cgroup (Slurm's
  ConstrainDevices) denies: it opens each node, and EACCES is the permission
  bits' refusal, EPERM the cgroup's, while ENXIO (no driver behind a mknod'd
  node) means both let it through.  Where the driver may modify device files
  (``DeviceFileModify: 1`` in the capability's access file), it first has the
  node reset as libcuda has ``nvidia-modprobe -f`` do, so the node's owner
  and mode no longer decide (:mod:`slurmpool.sim.capabilities`);
- where an MPS control daemon listens (``CUDA_MPS_PIPE_DIRECTORY``, see
  :mod:`slurmpool.sim.mps`) it is an MPS client: it runs on the daemon's GPU,
  waits while another user's MPS server has clients, uses no more than its
  active thread percentage (its utilisation is capped there) and fails like a
  CUDA OOM when it asks for more memory than its pinned memory limit; its own
  environment can lower those limits, never raise them.  Whether a real
  client opens ``/dev/nvidiaN`` itself is not established here: the
  simulator checks the client's access to the served GPU as without MPS;
- it registers itself (pid, memory, utilisation) on the device for its
  lifetime, refusing memory beyond what is free (like a CUDA OOM) and a
  context the GPU's compute mode refuses (EXCLUSIVE_PROCESS held by another
  process, outside MPS or not, or PROHIBITED: exit 1, as CUDA's "all
  CUDA-capable devices are busy or unavailable"; :mod:`slurmpool.sim.processes`), and
  deregisters on exit, SIGTERM and SIGINT; if SIGKILLed, the simulator
  prunes the dead PID on the next read.

It runs ``--seconds`` long, or with ``--until-file PATH`` until that file
exists: a test holds a job on the file and releases it once it has looked,
so no outcome depends on a job still running after so many seconds.

The state directory comes from ``--state DIR`` or ``$SLURMPOOL_SIM_STATE``.
Exit status: 0 done, 1 no usable device, 2 bad arguments, 3 permission
denied, 4 out of memory.  Standard library only: it runs on a bare
interpreter as an unprivileged user.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from slurmpool.driver.mig_minors import parse_mig_minors
from slurmpool.driver.procfs import access_path
from slurmpool.sim.capabilities import node_as_opened, proc_root
from slurmpool.sim.devices import cap_path, gpu_path
from slurmpool.sim.mps import ClientLimits, MpsError, connect_client, disconnect_client
from slurmpool.sim.processes import attach_process, detach_process
from slurmpool.sim.state import (
    ENV_STATE_DIR,
    SimDeviceBusy,
    SimError,
    SimOutOfMemory,
    State,
    StateStore,
    state_dir_from_env,
)

EXIT_NO_DEVICE = 1
EXIT_USAGE = 2
EXIT_PERMISSION = 3
EXIT_OOM = 4


@dataclass(frozen=True, slots=True)
class VisibleDevice:
    """The device a CUDA process would use: a whole GPU or one MIG device."""

    gpu_index: int
    gpu_minor: int
    uuid: str
    gi_id: int | None = None
    ci_id: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.gi_id is not None


def _gpu_devices(gpu: State) -> list[VisibleDevice]:
    if not gpu["mig_current"]:
        return [VisibleDevice(gpu["index"], gpu["minor"], gpu["uuid"])]
    return [
        VisibleDevice(gpu["index"], gpu["minor"], ci["uuid"], gi["id"], ci["id"])
        for gi in sorted(gpu["gis"], key=lambda g: g["id"])
        for ci in sorted(gi["cis"], key=lambda c: c["id"])
    ]


def _by_prefix(
    candidates: list[tuple[str, list[VisibleDevice]]], token: str
) -> list[VisibleDevice] | None:
    exact = [devs for uid, devs in candidates if uid == token]
    if exact:
        return exact[0]
    matches = [devs for uid, devs in candidates if uid.startswith(token)]
    return matches[0] if len(matches) == 1 else None


def visible_devices(value: str | None, state: State) -> list[VisibleDevice]:
    """The devices ``CUDA_VISIBLE_DEVICES=value`` exposes, in CUDA's order."""
    gpus = state["gpus"]
    if value is None:
        return [d for g in gpus for d in _gpu_devices(g)]
    by_gpu = [(g["uuid"], _gpu_devices(g)) for g in gpus]
    by_mig = [(d.uuid, [d]) for g in gpus if g["mig_current"] for d in _gpu_devices(g)]
    out: list[VisibleDevice] = []
    for raw in value.split(","):
        token = raw.strip()
        found: list[VisibleDevice] | None = None
        if token.isdigit():
            found = _gpu_devices(gpus[int(token)]) if int(token) < len(gpus) else None
        elif token.startswith("MIG-GPU-"):
            found = _legacy_mig(token, gpus)
        elif token.startswith("MIG-"):
            found = _by_prefix(by_mig, token)
        elif token.startswith("GPU-"):
            found = _by_prefix(by_gpu, token)
        if found is None:
            break  # CUDA ignores everything from the first invalid entry on
        out.extend(d for d in found if d not in out)
    return out


def _legacy_mig(token: str, gpus: list[State]) -> list[VisibleDevice] | None:
    parts = token[len("MIG-") :].split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    for g in gpus:
        if g["uuid"] == parts[0]:
            devs = [
                d for d in _gpu_devices(g) if (d.gi_id, d.ci_id) == (int(parts[1]), int(parts[2]))
            ]
            return devs or None
    return None


def choose_device(value: str | None, state: State) -> VisibleDevice | None:
    """The one device a CUDA process uses: the first visible one."""
    devices = visible_devices(value, state)
    return devices[0] if devices else None


def open_refusal(node: Path, flags: int) -> str | None:
    """Why opening ``node`` is refused (``"permission"`` or ``"cgroup"``), or None.

    The kernel checks the permission bits first (EACCES), then the device cgroup
    (EPERM: Slurm's ConstrainDevices).  A mknod'd node with no driver behind it
    fails with ENXIO after both let it through, which counts as opened, as does
    success (a regular file standing in for a node without root).
    """
    try:
        fd = os.open(node, flags | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.EPERM:
            return "cgroup"
        if e.errno in (errno.ENXIO, errno.ENODEV):
            return None
        return "permission"
    os.close(fd)
    return None


def access_problem(device: VisibleDevice, state: State) -> str | None:
    """Why the calling user cannot use ``device``, or None if they can."""
    root = Path(state["device_root"])
    for node in (root / "nvidiactl", gpu_path(root, device.gpu_minor)):
        why = open_refusal(node, os.O_RDWR)
        if why == "cgroup":
            return f"operation not permitted: the job's device cgroup does not allow {node}"
        if why is not None:
            return f"permission denied: cannot open {node} (needs read and write access)"
    gi_id = device.gi_id
    if device.is_mig and gi_id is not None:
        try:
            minors = parse_mig_minors(Path(state["mig_minors_path"]).read_text())
        except OSError as e:
            return f"cannot read the MIG capability table {state['mig_minors_path']}: {e}"
        for key in (
            (device.gpu_minor, gi_id, None),
            (device.gpu_minor, gi_id, device.ci_id),
        ):
            minor = minors.get(key)
            if minor is None:
                name = f"gpu{key[0]}/gi{key[1]}" + ("" if key[2] is None else f"/ci{key[2]}")
                return f"no capability minor for {name} in {state['mig_minors_path']}"
            node = cap_path(root, minor)
            what = "GPU instance" if key[2] is None else "compute instance"
            # libcuda has nvidia-modprobe reset the node first where the driver may.
            access = access_path(proc_root(state), device.gpu_minor, gi_id, key[2])
            why = open_refusal(node_as_opened(access, root, minor), os.O_RDONLY)
            if why == "cgroup":
                return (
                    f"operation not permitted: the job's device cgroup does not allow {node} "
                    f"({what} capability of {device.uuid})"
                )
            if why is not None:
                return f"permission denied: cannot read {node} ({what} capability of {device.uuid})"
    return None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def run(
    state_dir: str,
    env: Mapping[str, str],
    *,
    util: int,
    mem_mib: int,
    seconds: float,
    until_file: str | None = None,
) -> int:
    """Run the workload; returns the exit status (see the module docstring)."""
    store = StateStore(state_dir)
    try:
        state = store.read()
    except SimError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    device = choose_device(env.get("CUDA_VISIBLE_DEVICES"), state)
    if device is None:
        print(
            "error: no CUDA-capable device is detected "
            f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '<unset>')!r})",
            file=sys.stderr,
        )
        return EXIT_NO_DEVICE
    pid = os.getpid()
    try:
        mps = connect_client(env, pid)
    except MpsError as e:
        print(f"error: MPS: {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    try:
        return _on_device(state_dir, state, env, device, mps, util, mem_mib, seconds, until_file)
    finally:
        if mps is not None:
            disconnect_client(mps.pipe_dir, pid)


def _on_device(
    state_dir: str,
    state: State,
    env: Mapping[str, str],
    device: VisibleDevice,
    mps: ClientLimits | None,
    util: int,
    mem_mib: int,
    seconds: float,
    until_file: str | None,
) -> int:
    if mps is not None:
        # Under MPS the client sees the daemon's GPU, narrowed by its own CUDA_VISIBLE_DEVICES.
        served = choose_device(mps.gpu, state)
        if served is None or (env.get("CUDA_VISIBLE_DEVICES") and served.uuid != device.uuid):
            print(
                f"error: no CUDA-capable device is detected (the MPS daemon in {mps.pipe_dir} "
                f"serves {mps.gpu})",
                file=sys.stderr,
            )
            return EXIT_NO_DEVICE
        device = served
    problem = access_problem(device, state)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_PERMISSION
    if mps is not None:
        limit = "none" if mps.pinned_mib is None else f"{mps.pinned_mib} MiB"
        print(
            f"mps: server {mps.server}, active threads {mps.threads}%, pinned memory limit {limit}",
            flush=True,
        )
        util = min(util, mps.threads)  # no more of the GPU's SMs than its threads
        if mps.pinned_mib is not None and mem_mib > mps.pinned_mib:
            print(
                f"error: CUDA out of memory: asked for {mem_mib} MiB, the MPS pinned device "
                f"memory limit is {mps.pinned_mib} MiB",
                file=sys.stderr,
            )
            return EXIT_OOM
    pid = os.getpid()
    try:
        attach_process(
            state_dir,
            device.gpu_index,
            device.gi_id,
            device.ci_id,
            pid=pid,
            used_mib=mem_mib,
            util=util,
            context=None if mps is None else mps.server,
        )
    except SimOutOfMemory as e:
        print(f"error: CUDA {e}", file=sys.stderr)
        return EXIT_OOM
    except SimDeviceBusy as e:
        print(f"error: CUDA {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    except SimError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_NO_DEVICE
    try:
        print(
            f"running: pid {pid} on GPU {device.gpu_index} ({device.uuid}), "
            f"util {util}%, memory {mem_mib} MiB",
            flush=True,
        )
        if until_file is not None:
            while not os.path.exists(until_file):
                time.sleep(0.1)
        elif seconds > 0:
            time.sleep(seconds)
        else:
            while True:
                time.sleep(3600)
    finally:
        detach_process(state_dir, pid)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m slurmpool.sim.workload",
        description="Occupy a simulated GPU or MIG device chosen by CUDA_VISIBLE_DEVICES.",
    )
    parser.add_argument("--util", type=int, default=50, help="utilisation in percent (0..100)")
    parser.add_argument("--mem-mib", type=int, default=1000, help="device memory to use, MiB")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="how long to run (0: until signalled)"
    )
    parser.add_argument(
        "--until-file",
        metavar="PATH",
        help="run until PATH exists instead of for --seconds (a test's release)",
    )
    parser.add_argument("--state", help=f"simulator state directory (default: ${ENV_STATE_DIR})")
    args = parser.parse_args(argv)
    if not 0 <= args.util <= 100 or args.mem_mib < 0:
        parser.error("--util must be 0..100 and --mem-mib at least 0")
    try:
        state_dir = state_dir_from_env(args.state, os.environ)
    except SimError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return run(
        state_dir,
        os.environ,
        util=args.util,
        mem_mib=args.mem_mib,
        seconds=args.seconds,
        until_file=args.until_file,
    )


if __name__ == "__main__":
    sys.exit(main())
