"""Slurm version detection and the features each version gates."""

from __future__ import annotations

import re

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.slurm.runner import Runner

_VERSION_RE = re.compile(r"\b(\d{2})\.(\d{2})(?:\.(\d+))?")

# First version with each feature slurmpool cares about.
FEATURE_GATES: dict[str, tuple[int, int]] = {
    "scontrol_json": (23, 2),  # scontrol show ... --json
    "job_extra": (23, 2),  # job Extra= / SLURM_JOB_EXTRA in the prolog
    "cgroup_plugin_disabled": (24, 11),  # cgroup.conf CgroupPlugin=disabled honoured
}


class SlurmVersionError(ValueError):
    """A version string could not be parsed."""


@record(frozen=True, order=True, slots=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    def __str__(self) -> str:
        return f"{self.major:02d}.{self.minor:02d}.{self.micro}"

    def at_least(self, major: int, minor: int, micro: int = 0) -> bool:
        return (self.major, self.minor, self.micro) >= (major, minor, micro)

    def supports(self, feature: str) -> bool:
        """True when this version has ``feature`` (a key of FEATURE_GATES)."""
        try:
            major, minor = FEATURE_GATES[feature]
        except KeyError:
            known = ", ".join(sorted(FEATURE_GATES))
            raise KeyError(f"unknown Slurm feature {feature!r}; known: {known}") from None
        return self.at_least(major, minor)

    @property
    def features(self) -> Features:
        return Features(
            scontrol_json=self.supports("scontrol_json"),
            job_extra=self.supports("job_extra"),
        )


@record(frozen=True, slots=True)
class Features:
    scontrol_json: bool
    job_extra: bool


def parse_version(text: str) -> SlurmVersion:
    """Parse ``slurm-wlm 22.05.8`` / ``slurm 23.02.1`` (the ``-V`` output)."""
    m = _VERSION_RE.search(text)
    if m is None:
        raise SlurmVersionError(
            f"cannot read a Slurm version from {text.strip()!r}; expected e.g. 'slurm 22.05.8'"
        )
    return SlurmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def detect_version(runner: Runner, program: str = "scontrol") -> SlurmVersion:
    """Ask ``program -V`` (scontrol, slurmd, slurmctld) for the installed version."""
    result = runner.run(program, "-V", timeout=10)
    return parse_version(result.stdout or result.stderr)
