"""One node as the pooling hooks see it: config, state store, GPU backend, log.

The store and the backend open lazily, so a hook that needs neither (a
CPU-only job) pays for neither.
"""

from __future__ import annotations

import os

from slurmpool.gpu.backend import InvalidRequestError
from slurmpool.modes import GpuMode
from slurmpool.records import record
from slurmpool.state.db import store_path
from slurmpool.state.store import open_node_store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Protocol

    from slurmpool.catalogue import Catalogue
    from slurmpool.configgen.nodeconfig import NodeClassConfig, NodeConfig, NodeGpu
    from slurmpool.gpu.interface import GpuBackend
    from slurmpool.pooling.deadline import Deadline
    from slurmpool.state.db import Component
    from slurmpool.state.store import NodeStore

    class EventLog(Protocol):
        """One structured line per action (:class:`slurmpool.hooks.log.HookLog`).

        For type checkers only: the hooks never import :mod:`typing`.
        """

        def event(
            self,
            action: str,
            fields: Mapping[str, object] | None = None,
            level: str = "info",
            **more: object,
        ) -> str: ...


class Broken(RuntimeError):
    """The node cannot serve GPU jobs (NVML unreachable, GPU lost, bad install).

    The hook exits non-zero with this message: Slurm drains the node.
    """


@record(frozen=True, slots=True)
class Job:
    job_id: str
    uid: int
    user: str
    cluster: str | None = None  # SLURM_CLUSTER_NAME (the accounting summary's cluster)
    run: int = 0  # SLURM_JOB_RESTART_COUNT: which run of a requeued job this is


class Node:
    """This node as one hook run sees it: its config, and the store, GPU backend
    and catalogue it opens on first use (and :meth:`close` closes)."""

    def __init__(
        self,
        name: str,
        config: NodeConfig,
        cls: NodeClassConfig,
        log: EventLog,
        open_backend: Callable[[], GpuBackend],
        deadline: Deadline,
    ) -> None:
        self.name = name
        self.config = config
        self.cls = cls
        self.log = log
        self.open_backend = open_backend
        self.deadline = deadline
        self._store: NodeStore | None = None
        self._backend: GpuBackend | None = None
        self._indices: dict[int, int] = {}
        self._catalogue: Catalogue | None = None

    def __repr__(self) -> str:
        return f"Node({self.name!r}, class {self.cls.name!r})"

    @property
    def state_dir(self) -> str:
        return self.config.path("state_dir")

    @property
    def run_dir(self) -> str:
        return self.config.path("run_dir")

    @property
    def devices_root(self) -> str:
        return self.config.path("devices_root")

    @property
    def proc_root(self) -> str:
        return self.config.path("proc_root")

    def gpus(self, *modes: GpuMode) -> list[NodeGpu]:
        return [g for g in self.cls.gpus if g.mode in modes]

    def has_store(self) -> bool:
        """A hook made the node's store already (no store: nothing was ever allocated
        or sampled here)."""
        return os.path.exists(store_path(self.state_dir, self.name))

    def store(self) -> NodeStore:
        """The node's store, one connection for the hook run: the allocations, and
        with accounting on, the samples the epilog summarises and the outbox."""
        if self._store is None:
            components: tuple[Component, ...] = ()
            if self.config.accounting:
                from slurmpool.accounting.outbox import OUTBOX
                from slurmpool.state.samples import SAMPLES

                components = (SAMPLES, OUTBOX)
            self._store = open_node_store(
                self.state_dir, self.name, components, lock_wait=self.deadline.lock_wait
            )
        return self._store

    def opened_store(self) -> NodeStore | None:
        """The store if this hook run opened it already (a run that never did
        allocated nothing)."""
        return self._store

    def backend(self) -> GpuBackend:
        if self._backend is None:
            self._backend = self.open_backend()
        return self._backend

    def catalogue(self) -> Catalogue:
        """The GPU catalogue, reading only this node's models' files unless more is asked."""
        if self._catalogue is None:
            from slurmpool.catalogue import PartialCatalogue

            self._catalogue = PartialCatalogue(g.model for g in self.cls.gpus)
        return self._catalogue

    def nvml_index(self, gpu: NodeGpu) -> int:
        """NVML's index of a configured GPU, found by device minor (``/dev/nvidia<minor>``).

        Usually the config index; not while another GPU is bound to vfio-pci,
        since NVML enumerates only the GPUs its driver holds.  A GPU NVML does
        not list any more is lost: :class:`Broken`.
        """
        known = self._indices.get(gpu.minor)
        if known is not None:
            return known
        if not any(g.vfio for g in self.cls.gpus):
            return gpu.index  # nothing can take a GPU away from NVML on this node
        b = self.backend()
        try:
            if b.gpu(gpu.index).minor == gpu.minor:
                self._indices[gpu.minor] = gpu.index
                return gpu.index
        except InvalidRequestError:
            pass
        for info in b.gpus():
            if info.minor == gpu.minor:
                self._indices[gpu.minor] = info.index
                return info.index
        raise Broken(
            f"GPU {gpu.index} (/dev/nvidia{gpu.minor}, {gpu.model}) is not visible to NVML: "
            "lost or fallen off the bus"
        )

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        if self._store is not None:
            self._store.close()
            self._store = None
