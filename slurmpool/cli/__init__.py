"""The ``slurmpool`` command line.

Each command lives in its own module and is imported only when it runs, so
``slurmpool --help`` and the hook entry points stay cheap.  To add a command,
add ``"name": "module:attribute"`` to ``COMMANDS``.
"""

from __future__ import annotations

import importlib

import click

from slurmpool import __version__

COMMANDS: dict[str, str] = {
    "models": "slurmpool.cli.models:models",
    "mig": "slurmpool.cli.mig:mig",
    "sandbox": "slurmpool.cli.sandbox:sandbox",
    "install": "slurmpool.cli.install:install",
    "uninstall": "slurmpool.cli.install:uninstall",
    "doctor": "slurmpool.cli.doctor:doctor",
    "policy": "slurmpool.cli.policy:policy",
    "generate-config": "slurmpool.cli.generate:generate_config",
    "discover": "slurmpool.cli.discover:discover",
    "sim": "slurmpool.cli.sim:sim",
    "status": "slurmpool.cli.status:status",
    "monitord": "slurmpool.cli.monitord:monitord",
    "accounting": "slurmpool.cli.accounting:accounting",
    "jobstats": "slurmpool.cli.jobstats:jobstats",
    "report": "slurmpool.cli.report:report",
    "simulate": "slurmpool.cli.simulate:simulate",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmpool")
def main() -> None:
    """slurmpool: GPU pooling for Slurm.

    Carves a MIG instance per job, binds whole GPUs, or hands out time-sliced
    shares, from one policy file.  Run ``slurmpool COMMAND --help`` for each
    command.
    """
