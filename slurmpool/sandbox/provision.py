"""Create one host's simulated GPUs; run by ``sandbox up`` inside that host's mount namespace.

``python -m slurmpool.sandbox.provision --backend sim:DIR --devices-root DIR
--mig-minors PATH --node NAME --gpus MODEL:mig,MODEL:nomig,...``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

MIG_MINORS_SUFFIX = "/driver/nvidia-caps/mig-minors"


def proc_root_for(mig_minors: str) -> str:
    if not mig_minors.endswith(MIG_MINORS_SUFFIX):
        raise ValueError(f"mig-minors path {mig_minors!r} does not end in {MIG_MINORS_SUFFIX}")
    return mig_minors[: -len(MIG_MINORS_SUFFIX)]


def main(argv: Sequence[str]) -> int:
    from slurmpool.sim.node import create_node

    ap = argparse.ArgumentParser(prog="slurmpool.sandbox.provision")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--devices-root", required=True)
    ap.add_argument("--mig-minors", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--gpus", required=True)
    args = ap.parse_args(argv)
    if not args.backend.startswith("sim:"):
        print(
            f"the sandbox needs a sim: GPU backend, the policy has {args.backend!r}",
            file=sys.stderr,
        )
        return 2
    gpus = [g for g in args.gpus.split(",") if g]
    create_node(
        args.backend[len("sim:") :],
        args.devices_root,
        gpus,
        proc_root=proc_root_for(args.mig_minors),
        node_name=args.node,
        force=True,
        # Capability nodes keep the owner and mode the prolog gives them only where
        # the driver may not reset them (NVreg_ModifyDeviceFiles=0).
        modify_device_files=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
