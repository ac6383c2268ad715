"""Open a GPU backend from a spec string.

- ``nvml`` (the default): the real driver through pynvml, imported here,
  lazily, so that nothing else pays for it.
- ``sim:<state dir>``: a simulated node (see :mod:`slurmpool.sim`); the
  simulator's pynvml-compatible module goes to the same
  :class:`~slurmpool.gpu.nvml.NvmlBackend`.

The environment is not read here: the CLI maps ``$SLURMPOOL_GPU_BACKEND`` to
the spec.
"""

from __future__ import annotations

import os

from slurmpool.driver.mig_minors import MIG_MINORS_PATH
from slurmpool.driver.pynvml_import import preload_pynvml
from slurmpool.gpu.backend import BackendUnavailable, GpuBackendError
from slurmpool.gpu.nvml import NvmlBackend

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.catalogue import Catalogue
    from slurmpool.gpu.interface import GpuBackend

    # mypy checks the one implementation, on the driver or the simulator, against
    # the protocol every caller is typed with.
    _CONFORMS: type[GpuBackend] = NvmlBackend

DEFAULT_SPEC = "nvml"
SIM_PREFIX = "sim:"


class BackendSpecError(GpuBackendError):
    """The backend spec is not one slurmpool knows."""


def sim_state_dir(spec: str | None) -> str | None:
    """The simulator's state directory of a ``sim:<state dir>`` spec, else None."""
    spec = (spec or DEFAULT_SPEC).strip()
    if spec.startswith(SIM_PREFIX) and spec[len(SIM_PREFIX) :]:
        return spec[len(SIM_PREFIX) :]
    return None


def open_backend(
    spec: str | None = None,
    *,
    mig_minors_path: str | os.PathLike[str] | None = None,
    catalogue: Catalogue | None = None,
) -> NvmlBackend:
    """The backend named by ``spec`` (``nvml`` or ``sim:<state dir>``), initialised.

    Raises :class:`BackendUnavailable` when there is no driver/GPU (or no
    simulated node at the path) and :class:`BackendSpecError` for an
    unknown spec.  ``mig_minors_path`` overrides where the capability table
    is read (real default ``/proc/driver/nvidia-caps/mig-minors``; the
    simulator's own file for ``sim:``).
    """
    spec = (spec or DEFAULT_SPEC).strip()
    if spec == "nvml":
        try:
            pynvml = preload_pynvml()
        except ImportError as e:
            raise BackendUnavailable(
                f"no NVIDIA driver/GPU found: cannot import pynvml (nvidia-ml-py): {e}"
            ) from None
        return NvmlBackend(
            pynvml,
            name="nvml",
            mig_minors_path=mig_minors_path or MIG_MINORS_PATH,
            catalogue=catalogue,
        )
    if spec.startswith(SIM_PREFIX):
        state_dir = sim_state_dir(spec)
        if state_dir is None:
            raise BackendSpecError("backend 'sim:' needs a state directory: 'sim:<state dir>'")
        from slurmpool.sim.nvml import SimNvml

        sim = SimNvml(state_dir)
        if not sim.mig_minors_path:
            raise BackendUnavailable(
                f"no simulated node at {state_dir}: {os.path.join(state_dir, 'state.json')} "
                "does not exist (create one with `slurmpool sim init`)"
            )
        return NvmlBackend(
            sim,
            name=spec,
            mig_minors_path=mig_minors_path or sim.mig_minors_path,
            catalogue=catalogue,
        )
    raise BackendSpecError(f"unknown GPU backend {spec!r}; expected 'nvml' or 'sim:<state dir>'")
