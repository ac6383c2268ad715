"""``slurmpool generate-config``: render Slurm's config and the node config from a policy."""

from __future__ import annotations

import click

from slurmpool.catalogue import default_catalogue
from slurmpool.cli.common import EXIT_USAGE, installed_slurm_for, var_option
from slurmpool.configgen.inventory import ConfigError, load_inventories
from slurmpool.configgen.render import generate
from slurmpool.policy.errors import PolicyError
from slurmpool.policy.loader import load_policy


@click.command("generate-config")
@click.option(
    "--policy",
    "policy_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The pool policy (YAML, version v1).",
)
@click.option(
    "--inventory",
    "inventory_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="`slurmpool discover --json` output of a node (repeatable; one per node class).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write the generated files into.",
)
@var_option
def generate_config(
    policy_file: str, inventory_files: tuple[str, ...], out_dir: str, variables: dict[str, str]
) -> None:
    """Write slurmpool.conf, gres.conf, cgroup.conf, job_submit.lua and node-config.json.

    Include slurmpool.conf from slurm.conf; gres.conf, cgroup.conf and
    job_submit.lua go next to slurm.conf; node-config.json is what the
    job hooks read.  They are for the Slurm installed here (``slurmd -V``, else
    ``scontrol -V``) unless the policy sets ``slurm_version``.

    Example: ``slurmpool generate-config --policy pool.yaml --inventory gpu001.json --out gen/``
    """
    try:
        policy = load_policy(policy_file, variables=variables)
        inventories = load_inventories(inventory_files, default_catalogue())
        result = generate(policy, inventories, installed=installed_slurm_for(policy))
    except (PolicyError, ConfigError) as err:
        click.echo(f"error: {err}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    for path in result.write(out_dir):
        click.echo(f"wrote {path}")
