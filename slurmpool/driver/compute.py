"""NVML's compute modes (``nvmlComputeMode_t``): how many CUDA contexts a GPU takes.

``DEFAULT`` any number, ``PROHIBITED`` none, ``EXCLUSIVE_PROCESS`` one (under MPS,
the MPS server's, which its clients share).  ``EXCLUSIVE_THREAD`` (1) is no
longer supported by the driver.  Shared by the backend and the simulator.
"""

from __future__ import annotations

COMPUTE_DEFAULT = 0
COMPUTE_EXCLUSIVE_THREAD = 1
COMPUTE_PROHIBITED = 2
COMPUTE_EXCLUSIVE_PROCESS = 3
COMPUTE_MODES = (COMPUTE_DEFAULT, COMPUTE_PROHIBITED, COMPUTE_EXCLUSIVE_PROCESS)
_NAMES = {
    COMPUTE_DEFAULT: "DEFAULT",
    COMPUTE_EXCLUSIVE_THREAD: "EXCLUSIVE_THREAD",
    COMPUTE_PROHIBITED: "PROHIBITED",
    COMPUTE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS",
}


def compute_mode_name(mode: int) -> str:
    return _NAMES.get(mode, f"mode {mode}")
