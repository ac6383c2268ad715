"""``slurmpool doctor``: what is wrong with this node, and how to fix it."""

from __future__ import annotations

import os
from pathlib import Path

import click

from slurmpool.cli.common import (
    EXIT_FAIL,
    echo_json,
    json_option,
    load_policy_or_exit,
    root_option,
    var_option,
)
from slurmpool.cli.nodeopts import node_option
from slurmpool.configgen.nodeconfig import (
    DEFAULT_NODE_CONFIG,
    NODE_CONFIG_ENV,
    NODE_CONFIG_NAME,
    SYSTEMD_DIR,
)


@click.command()
@click.option(
    "--node-config",
    default=None,
    envvar=NODE_CONFIG_ENV,
    help="The compiled node config [$SLURMPOOL_NODE_CONFIG, or <slurm config dir>/"
    "node-config.json from --policy].",
)
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The policy install used (locates the node config).",
)
@var_option
@node_option
@click.option("--slurm-conf", default=None, help="slurm.conf [<slurm config dir>/slurm.conf].")
@click.option("--backend", default=None, help="GPU backend spec [the node config's gpu_backend].")
@root_option("Check a staged tree (implies --no-slurm).")
@click.option(
    "--systemd-dir",
    default=SYSTEMD_DIR,
    show_default=True,
    help="Where `slurmpool install` put the monitord unit, and `systemctl enable` links it.",
)
@click.option("--no-slurm", is_flag=True, help="Skip the checks that ask Slurm.")
@click.option("--no-gpus", is_flag=True, help="Skip the checks that ask the GPU backend.")
@json_option("the findings")
def doctor(
    node_config: str | None,
    policy_path: Path | None,
    variables: dict[str, str],
    node: str,
    slurm_conf: str | None,
    backend: str | None,
    root: Path,
    systemd_dir: str,
    no_slurm: bool,
    no_gpus: bool,
    as_json: bool,
) -> None:
    """Check this node against the policy; print each problem with its fix.

    Exit status 1 when something is wrong.

    Example: ``slurmpool doctor --policy pool.yaml --node gpu01``
    """
    from slurmpool.doctor import DoctorOptions, run_doctor
    from slurmpool.slurm.runner import Runner

    if node_config is None:
        if policy_path is None:
            node_config = DEFAULT_NODE_CONFIG
        else:
            policy = load_policy_or_exit(policy_path, variables)
            node_config = os.path.join(policy.paths.slurm_config_dir, NODE_CONFIG_NAME)
    staged = root != Path("/")
    report = run_doctor(
        DoctorOptions(
            node_config=node_config,
            node=node,
            root=root,
            slurm_conf=slurm_conf,
            backend_spec=backend,
            runner=None if (no_slurm or staged) else Runner(env=dict(os.environ)),
            check_gpus=not no_gpus,
            systemd_dir=systemd_dir,
        )
    )
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.text())
    if not report.ok:
        raise SystemExit(EXIT_FAIL)
