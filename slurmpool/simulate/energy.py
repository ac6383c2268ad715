"""Energy per policy, from a per-model power model over a replay's runs.

The model is linear in what the tasks ask for: a GPU draws its idle watts for as
long as the pool runs, plus ``busy - idle`` watts times the fraction of its
compute its tasks ask for (a task asking 3 of 7 slices, 3/7 of it).  So the
work costs every policy the same energy; policies differ in how long the pool
runs (first arrival to last completion) and in how many GPU-hours no task holds
any part of a GPU.  Those *empty* GPU-hours are what a site can save on by
capping idle GPUs (or powering them down): ``empty_kwh`` is what they draw at
idle, the most such capping saves.

``busy`` is the board's maximum power from NVIDIA's datasheets.  ``idle`` is an
estimate, 15 % of that, until a site measures its own (``nvidia-smi
--query-gpu=power.draw`` on a GPU with nothing on it, or slurmpool's own samples)
and gives it with ``--watts``.  A model with no known maximum has no default: its
energy is unknown, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.simulate.pools import NodeShape


IDLE_SHARE = 0.15  # the idle estimate: this share of the board's maximum power
A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet (max TDP)"
H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet (max TDP)"
# Maximum board power, W, and where it comes from.
MAX_POWER: dict[str, tuple[float, str]] = {
    "A100-SXM4-40GB": (400, A100_DATASHEET),
    "A100-SXM4-80GB": (400, A100_DATASHEET),
    "A100-PCIE-80GB": (300, A100_DATASHEET),
    "A30-24GB": (165, "NVIDIA A30 Tensor Core GPU datasheet (max TDP)"),
    "H100-SXM5-80GB": (700, H100_DATASHEET),
    "H100-PCIe-80GB": (350, H100_DATASHEET),
    "H100-NVL-94GB": (400, H100_DATASHEET),
}


class WattsError(ValueError):
    """A power figure that cannot be read."""


@dataclass(frozen=True, slots=True)
class Watts:
    """One GPU model's power: at idle and at full load, and where the figures come from."""

    idle: float
    busy: float
    source: str

    def to_json(self) -> dict[str, object]:
        return {"idle_w": self.idle, "busy_w": self.busy, "source": self.source}


def default_watts(model: str) -> Watts | None:
    """The power model slurmpool knows for ``model``, or None."""
    known = MAX_POWER.get(model)
    if known is None:
        return None
    busy, source = known
    return Watts(busy * IDLE_SHARE, busy, f"busy: {source}; idle: estimate, {IDLE_SHARE:.0%} of it")


def parse_watts(specs: Iterable[str]) -> tuple[Watts | None, dict[str, Watts]]:
    """``--watts`` values, ``[MODEL=]IDLE/BUSY``: (the figure for every model, or None;
    the figures for named models)."""
    every: Watts | None = None
    named: dict[str, Watts] = {}
    for spec in specs:
        model, eq, figures = spec.rpartition("=")
        idle_text, slash, busy_text = figures.partition("/")
        try:
            idle, busy = float(idle_text), float(busy_text)
        except ValueError:
            idle = busy = -1.0
        if not slash or not 0 <= idle <= busy or busy == 0:
            raise WattsError(
                f"--watts {spec!r}: expected [MODEL=]IDLE/BUSY in watts, idle at most busy, "
                "such as 60/400 or A100-SXM4-80GB=55/400"
            )
        given = Watts(idle, busy, "given with --watts")
        if eq:
            named[model] = given
        else:
            every = given
    return every, named


def power_for(
    shapes: Sequence[NodeShape], every: Watts | None = None, named: Mapping[str, Watts] = {}
) -> dict[str, Watts | None]:
    """Each model of the pool -> its power model: a named ``--watts``, else one for every
    model, else slurmpool's default, else None (unknown)."""
    out: dict[str, Watts | None] = {}
    for shape in shapes:
        name = shape.model.name
        out[name] = named.get(name) or every or default_watts(name)
    return out


@dataclass(frozen=True, slots=True)
class Energy:
    energy_kwh: float  # the pool, from the first arrival to the last completion
    empty_gpu_h: float  # GPU-hours in which no task held any part of a GPU
    empty_kwh: float  # what those draw at idle: the most capping idle GPUs saves


def measure_energy(
    shapes: Sequence[NodeShape],
    occupied_gpu_s: Sequence[float],
    asked_gpu_s: Sequence[float],
    span: int,
    power: Mapping[str, Watts | None],
) -> Energy | None:
    """The pool's energy over ``span`` seconds, from what its nodes' GPUs did in them
    (per node: the GPU-seconds in which a task held the GPU, and the GPU-seconds of
    compute the tasks asked for); None when a model's power is unknown."""
    if any(power.get(s.model.name) is None for s in shapes):
        return None
    joules = empty_j = empty_s = 0.0
    for node, shape in enumerate(shapes):
        watts = power[shape.model.name]
        assert watts is not None
        empty = shape.gpus * span - occupied_gpu_s[node]
        joules += shape.gpus * span * watts.idle + (watts.busy - watts.idle) * asked_gpu_s[node]
        empty_j += empty * watts.idle
        empty_s += empty
    return Energy(joules / 3.6e6, empty_s / 3600, empty_j / 3.6e6)
