"""What the sandbox needs on the machine, and which Debian package provides it."""

from __future__ import annotations

from dataclasses import dataclass

from slurmpool.slurm.runner import Runner

# program -> Debian (bookworm) package
REQUIRED_PROGRAMS: dict[str, str] = {
    "munged": "munge",
    "mungekey": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "slurmdbd": "slurmdbd",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "scontrol": "slurm-client",
    "sinfo": "slurm-client",
    "sacctmgr": "slurm-client",
    "unshare": "util-linux",
    "runuser": "util-linux",
    "mount": "mount",
    "timeout": "coreutils",
}


@dataclass(frozen=True, slots=True)
class Missing:
    programs: tuple[str, ...]
    packages: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.programs)

    def message(self) -> str:
        return (
            f"the sandbox needs {', '.join(self.programs)}, not found on this machine; "
            f"install them with: apt-get install {' '.join(self.packages)}"
        )


def missing_programs(runner: Runner) -> Missing:
    programs = tuple(p for p in REQUIRED_PROGRAMS if not runner.has(p))
    packages = tuple(sorted({REQUIRED_PROGRAMS[p] for p in programs}))
    return Missing(programs, packages)
