"""The driver's ``mig-minors`` table: which ``/dev/nvidia-caps`` minor grants
access to which GPU instance and compute instance.

``/proc/driver/nvidia-caps/mig-minors`` lists ``<name> <minor>`` lines
(``config``, ``monitor``, ``gpu<g>/gi<i>/access``, ``gpu<g>/gi<i>/ci<c>/access``).
The backend reads it to give a job its instance's capability files; the
simulator writes one the same way.  Standard library only.
"""

from __future__ import annotations

from slurmpool.records import record

MIG_MINORS_PATH = "/proc/driver/nvidia-caps/mig-minors"


@record(frozen=True, slots=True)
class MigMinors:
    """The parsed ``mig-minors`` table.  Keys of ``caps`` are
    ``(gpu_minor, gi_id, None)`` for GPU instances and
    ``(gpu_minor, gi_id, ci_id)`` for compute instances."""

    config: int | None
    monitor: int | None
    caps: dict[tuple[int, int, int | None], int]

    def get(self, key: tuple[int, int | None, int | None]) -> int | None:
        gpu, gi, ci = key
        if gi is None:
            return None
        return self.caps.get((gpu, gi, ci))

    def gi_minor(self, gpu_minor: int, gi_id: int) -> int | None:
        return self.caps.get((gpu_minor, gi_id, None))

    def ci_minor(self, gpu_minor: int, gi_id: int, ci_id: int) -> int | None:
        return self.caps.get((gpu_minor, gi_id, ci_id))


def _cap_key(name: str) -> tuple[int, int, int | None] | None:
    # gpu<g>/gi<i>/access or gpu<g>/gi<i>/ci<c>/access
    parts = name.split("/")
    if len(parts) not in (3, 4) or parts[-1] != "access":
        return None
    nums = []
    for part, prefix in zip(parts[:-1], ("gpu", "gi", "ci"), strict=False):
        if not part.startswith(prefix) or not part[len(prefix) :].isdigit():
            return None
        nums.append(int(part[len(prefix) :]))
    return (nums[0], nums[1], nums[2] if len(nums) == 3 else None)


def parse_mig_minors(text: str, source: str = "mig-minors") -> MigMinors:
    """Parse ``/proc/driver/nvidia-caps/mig-minors`` (lines ``<name> <minor>``).

    Unknown names are ignored (newer drivers may add some); a line that is
    not ``<name> <number>`` raises ``ValueError`` naming the line.
    """
    config = monitor = None
    caps: dict[tuple[int, int, int | None], int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, minor = table_line(line, source, lineno)
        if name == "config":
            config = minor
        elif name == "monitor":
            monitor = minor
        else:
            key = _cap_key(name)
            if key is not None:
                caps[key] = minor
    return MigMinors(config, monitor, caps)


def table_line(line: str, source: str, lineno: int) -> tuple[str, int]:
    """One ``<name> <minor>`` line; ValueError naming ``source`` and ``lineno`` otherwise."""
    fields = line.split()
    if len(fields) != 2 or not fields[1].isdigit():
        raise ValueError(f"{source}: line {lineno}: expected '<name> <minor>', got {line!r}")
    return fields[0], int(fields[1])
