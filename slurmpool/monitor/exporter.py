"""Prometheus metrics of the latest sampling pass, and a small HTTP server for them.

The collector renders the most recent :class:`~.sampler.Snapshot` when
scraped (nothing is kept per label set, so a finished job's series simply
stop).  Utilisation series exist only where the hardware reports one: on
an Ampere MIG instance ``slurmpool_mig_sm_utilization_percent`` is absent
and ``slurmpool_mig_utilization_available`` is 0, never a made-up zero.

The server answers ``/metrics`` (Prometheus text format) and
``/jobs/<id>`` (the job's summary so far on this node, JSON; what
``slurmpool jobstats`` reads for a running job).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from slurmpool.monitor.sampler import Snapshot
from slurmpool.state.samples import KIND_MIG

_MIB = 1024 * 1024


@dataclass(slots=True)
class MonitorStats:
    passes: int = 0
    errors: int = 0
    last_pass_s: float = 0.0
    cpu_s: float = 0.0
    outbox_pending: int = 0
    pushed: int = 0
    push_failures: int = 0
    fit_repairs: int = 0
    fit_repair_failures: int = 0


class SnapshotCollector:
    """A prometheus_client collector over the latest snapshot."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.stats = MonitorStats()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        st = self.stats
        yield from _monitor_metrics(st, snap)
        if snap is None:
            return
        node = snap.node
        glabels = ["node", "gpu", "uuid", "model", "job", "user", "account"]
        g_util = GaugeMetricFamily(
            "slurmpool_gpu_utilization_percent",
            "GPU utilisation (NVML), whole GPUs",
            labels=glabels,
        )
        g_mem = GaugeMetricFamily(
            "slurmpool_gpu_memory_used_bytes", "GPU memory used", labels=glabels
        )
        g_tot = GaugeMetricFamily(
            "slurmpool_gpu_memory_total_bytes", "GPU memory size", labels=glabels
        )
        g_pow = GaugeMetricFamily("slurmpool_gpu_power_watts", "GPU power draw", labels=glabels)
        g_en = CounterMetricFamily(
            "slurmpool_gpu_energy_joules", "GPU energy since driver load", labels=glabels
        )
        mig_enabled = GaugeMetricFamily(
            "slurmpool_gpu_mig_enabled", "1 when MIG mode is on", labels=["node", "gpu", "uuid"]
        )
        ilabels = ["node", "gpu", "gi", "profile", "uuid", "job", "user", "account"]
        i_mem = GaugeMetricFamily(
            "slurmpool_mig_memory_used_bytes", "MIG instance memory used", labels=ilabels
        )
        i_tot = GaugeMetricFamily(
            "slurmpool_mig_memory_total_bytes", "MIG instance memory size", labels=ilabels
        )
        i_util = GaugeMetricFamily(
            "slurmpool_mig_sm_utilization_percent",
            "MIG instance SM utilisation (GPM, Hopper and later); absent where not available",
            labels=ilabels,
        )
        i_avail = GaugeMetricFamily(
            "slurmpool_mig_utilization_available",
            "1 when the instance's utilisation is measured, 0 when the hardware cannot",
            labels=ilabels,
        )
        jlabels = ["node", "job", "user", "account", "device", "kind", "profile"]
        j_util = GaugeMetricFamily(
            "slurmpool_job_gpu_utilization_percent",
            "utilisation of a job's GPU device; absent where not available",
            labels=jlabels,
        )
        j_mem = GaugeMetricFamily(
            "slurmpool_job_gpu_memory_used_bytes", "memory a job uses on a device", labels=jlabels
        )
        j_slices = GaugeMetricFamily(
            "slurmpool_job_gpu_fraction",
            "fraction of a GPU the job holds on the device (2g of 7 = 0.2857)",
            labels=jlabels,
        )
        j_procs = GaugeMetricFamily(
            "slurmpool_job_gpu_processes", "processes of the job on the device", labels=jlabels
        )
        for s in snap.samples:
            job, user, account = s.job_id or "", s.user or "", s.account or ""
            if s.kind == KIND_MIG:
                lv = [
                    node,
                    str(s.gpu_index),
                    str(s.gi_id),
                    s.profile or "",
                    s.uuid or "",
                    job,
                    user,
                    account,
                ]
                if s.mem_used_mib is not None:
                    i_mem.add_metric(lv, s.mem_used_mib * _MIB)
                if s.mem_total_mib is not None:
                    i_tot.add_metric(lv, s.mem_total_mib * _MIB)
                if s.util is not None:
                    i_util.add_metric(lv, s.util)
                i_avail.add_metric(lv, 1 if s.util is not None else 0)
            else:
                lv = [node, str(s.gpu_index), s.uuid or "", s.model or "", job, user, account]
                if s.util is not None:
                    g_util.add_metric(lv, s.util)
                if s.mem_used_mib is not None:
                    g_mem.add_metric(lv, s.mem_used_mib * _MIB)
                if s.mem_total_mib is not None:
                    g_tot.add_metric(lv, s.mem_total_mib * _MIB)
                if s.power_mw is not None:
                    g_pow.add_metric(lv, s.power_mw / 1000.0)
                if s.energy_mj is not None:
                    g_en.add_metric(lv, s.energy_mj / 1000.0)
            if s.job_id is None:
                continue
            device = str(s.gpu_index) if s.gi_id is None else f"{s.gpu_index}/gi{s.gi_id}"
            jl = [node, job, user, account, device, s.kind, s.profile or ""]
            if s.util is not None:
                j_util.add_metric(jl, s.util)
            if s.mem_used_mib is not None:
                j_mem.add_metric(jl, s.mem_used_mib * _MIB)
            if s.slices and s.total_slices:
                j_slices.add_metric(jl, s.slices / s.total_slices)
            else:
                j_slices.add_metric(jl, 1.0)
            j_procs.add_metric(jl, s.nprocs)
        for g in snap.gpus:
            mig_enabled.add_metric([node, str(g.index), g.uuid], 1 if g.mig_current else 0)
        yield from (g_util, g_mem, g_tot, g_pow, g_en, mig_enabled)
        yield from (i_mem, i_tot, i_util, i_avail, j_util, j_mem, j_slices, j_procs)


def _monitor_metrics(st: MonitorStats, snap: Snapshot | None) -> Iterator[Metric]:
    passes = CounterMetricFamily("slurmpool_monitor_passes", "sampling passes done")
    passes.add_metric([], st.passes)
    errors = CounterMetricFamily("slurmpool_monitor_errors", "sampling passes with errors")
    errors.add_metric([], st.errors)
    dur = GaugeMetricFamily("slurmpool_monitor_pass_seconds", "wall time of the last pass")
    dur.add_metric([], st.last_pass_s)
    cpu = CounterMetricFamily("slurmpool_monitor_cpu_seconds", "CPU time monitord used")
    cpu.add_metric([], st.cpu_s)
    pending = GaugeMetricFamily(
        "slurmpool_accounting_outbox_pending", "job summaries not yet stored in accounting"
    )
    pending.add_metric([], st.outbox_pending)
    pushed = CounterMetricFamily("slurmpool_accounting_pushed", "summaries stored and verified")
    pushed.add_metric([], st.pushed)
    failed = CounterMetricFamily("slurmpool_accounting_push_failures", "failed push attempts")
    failed.add_metric([], st.push_failures)
    repairs = CounterMetricFamily(
        "slurmpool_fit_repairs",
        "times slurmctld had other vgpufit counts than the node's and was sent them",
    )
    repairs.add_metric([], st.fit_repairs)
    repair_failed = CounterMetricFamily(
        "slurmpool_fit_repair_failures", "repairs of the vgpufit counts that failed"
    )
    repair_failed.add_metric([], st.fit_repair_failures)
    yield from (passes, errors, dur, cpu, pending, pushed, failed, repairs, repair_failed)
    if snap is not None:
        last = GaugeMetricFamily(
            "slurmpool_monitor_last_pass_timestamp_seconds", "when the last pass ran"
        )
        last.add_metric([], snap.t)
        yield last


def make_registry(collector: SnapshotCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


class MetricsServer:
    """``/metrics`` and ``/jobs/<id>`` on ``address:port`` in a background thread.

    ``job_view(job_id)`` returns the JSON-able view of a job, or None when
    this node has no samples of it.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        address: str,
        port: int,
        job_view: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        self.registry = registry
        self.job_view = job_view
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer((address, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        if path in ("/metrics", "/"):
            body = generate_latest(self.registry)
            self._send(req, 200, CONTENT_TYPE_LATEST, body)
            return
        if path.startswith("/jobs/") and self.job_view is not None:
            job_id = path[len("/jobs/") :].strip("/")
            if not job_id.isdigit():
                self._send_json(req, 400, {"error": f"bad job id {job_id!r}: expected digits"})
                return
            try:
                view = self.job_view(job_id)
            except Exception as e:  # a broken store must not take the exporter down
                self._send_json(req, 500, {"error": f"{type(e).__name__}: {e}"})
                return
            if view is None:
                self._send_json(req, 404, {"error": f"no samples of job {job_id} on this node"})
            else:
                self._send_json(req, 200, view)
            return
        self._send_json(req, 404, {"error": "not found; try /metrics or /jobs/<id>"})

    def _send_json(self, req: BaseHTTPRequestHandler, code: int, data: Any) -> None:
        self._send(req, code, "application/json", json.dumps(data).encode())

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, code: int, ctype: str, body: bytes) -> None:
        req.send_response(code)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
