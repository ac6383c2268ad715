"""Slurm version detection and the features each version gates.

The installed Slurm is detected (``slurmd -V``, else ``scontrol -V``) when a
config is generated or installed; a policy's ``slurm_version`` overrides it for
staging a config for other machines.  Everything else asks a
:class:`SlurmVersion` whether it ``supports`` a feature, never compares numbers.
"""

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
    # No SelectType line means select/cons_tres (before: select/linear), and a
    # select/cons_res line is read as cons_tres (read_config.h, interfaces/select.c).
    "cons_tres_default": (23, 11),
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

    @property
    def release(self) -> str:
        """``MAJOR.MINOR`` (``24.11``): what a config is generated for."""
        return f"{self.major:02d}.{self.minor:02d}"

    @property
    def shown(self) -> str:
        """``24.11.5``; ``24.11`` for a release named without its micro version."""
        return str(self) if self.micro else self.release

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


# slurmd -V reads no slurm.conf; scontrol -V (a login host has no slurmd) needs one
# on 24.11+ (SLURM_FACTS.md), which a host it is worth generating on has.
DETECT_PROGRAMS = ("slurmd", "scontrol")


@record(frozen=True, slots=True)
class InstalledSlurm:
    """A Slurm version and how it became known (``slurmd -V``, ``policy``...)."""

    version: SlurmVersion
    detected_by: str


def installed_version(runner: Runner) -> InstalledSlurm:
    """The Slurm installed here: the first of :data:`DETECT_PROGRAMS` that answers
    ``-V``.  Raises SlurmVersionError naming what each one said."""
    from slurmpool.slurm.runner import SlurmCommandError

    tried = []
    for program in DETECT_PROGRAMS:
        try:
            return InstalledSlurm(detect_version(runner, program), f"{program} -V")
        except (SlurmCommandError, SlurmVersionError) as e:
            tried.append(str(e) if isinstance(e, SlurmCommandError) else f"{program} -V: {e}")
    raise SlurmVersionError("no installed Slurm answered: " + "; ".join(tried))
