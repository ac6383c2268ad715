"""``slurmpool install`` / ``uninstall``: hooks, generated config and state dir into a node."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmpool.cli.common import (
    EXIT_FAIL,
    installed_slurm_for,
    load_policy_or_exit,
    root_option,
    usage_error,
    var_option,
)
from slurmpool.configgen.nodeconfig import SYSTEMD_DIR
from slurmpool.slurm.siteneeds import TASK_CGROUP_CHOICES, TaskCgroup

if TYPE_CHECKING:
    from slurmpool.install import Plan, Role

staging_root_option = root_option("Staging root: every path is taken inside it.")
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print a unified diff of every change; change nothing."
)


def _run(plan: Plan, dry_run: bool) -> None:
    from slurmpool.install import apply

    for note in plan.notes:
        click.echo(f"note: {note}", err=True)
    if plan.empty:
        click.echo("nothing to do")
        return
    for change in plan.changes:
        click.echo(f"# {change.explain()}" if dry_run else f"site line: {change.explain()}")
    if dry_run:
        click.echo(plan.diff(), nl=False)
        click.echo(
            f"# dry run: {len(plan.dirs) + len(plan.files)} change(s), nothing written", err=True
        )
        return
    for line in apply(plan):
        click.echo(line)
    click.echo(
        "restart slurmctld and slurmd to load the change (EpilogSlurmctld and GRES "
        "changes are not picked up by `scontrol reconfigure`)",
        err=True,
    )


@click.command()
@click.option(
    "--policy",
    "policy_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The pool policy.",
)
@var_option
@click.option(
    "--slurm-conf", default=None, help="The site's slurm.conf [<slurm_config_dir>/slurm.conf]."
)
@click.option("--systemd-dir", default=SYSTEMD_DIR, show_default=True)
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="this interpreter",
    help="Interpreter the hooks run with; every job user must be able to run it.",
)
@click.option(
    "--python-path",
    default=None,
    help="PYTHONPATH for the hooks when slurmpool is not installed in --python.",
)
@click.option(
    "--task-cgroup",
    type=click.Choice(TASK_CGROUP_CHOICES),
    default=None,
    help="Where slurm.conf's TaskPlugin lacks task/cgroup, which fences devices: "
    "require (refuse), add (also puts cgroup.conf's CPU and memory limits on every job) "
    "or skip (pool unfenced). [the previous install's choice, else require]",
)
@click.option(
    "--controller",
    "role",
    flag_value="controller",
    help="Write the Slurm configuration every daemon shares (slurm.conf, slurmpool.conf, "
    "gres.conf, cgroup.conf, job_submit.lua) and the EpilogSlurmctld wrapper.",
)
@click.option(
    "--node",
    "role",
    flag_value="node",
    help="Write what one node needs (hook wrappers, node config, state dir, monitord "
    "enabled); slurm.conf is only read, for the site's own hooks.",
)
@staging_root_option
@dry_run_option
def install(
    policy_path: Path,
    variables: dict[str, str],
    slurm_conf: str | None,
    systemd_dir: str,
    python: str,
    python_path: str | None,
    task_cgroup: TaskCgroup | None,
    role: Role | None,
    root: Path,
    dry_run: bool,
) -> None:
    """Install hook wrappers, the generated config, the state dir and the monitord unit.

    Keeps the site's own Prolog/Epilog/TaskProlog/EpilogSlurmctld running
    through the wrappers; ``slurmpool uninstall`` restores every file exactly.
    Running it twice changes nothing the second time.  The config is generated
    for the Slurm this machine runs (``slurmd -V``), unless the policy sets
    ``slurm_version`` (staging for other machines).

    Without --controller or --node, both (one machine that is both).

    Example: ``slurmpool install --policy pool.yaml --dry-run``
    """
    from slurmpool.configgen.inventory import ConfigError
    from slurmpool.configgen.render import generate, target_slurm
    from slurmpool.install import InstallError, SiteOptions, plan_install, target_for_policy

    policy = load_policy_or_exit(policy_path, variables)
    installed = installed_slurm_for(policy)
    if installed is not None and root.resolve() != Path("/"):
        click.echo(
            f"note: staged root: generated for this machine's Slurm "
            f"{installed.version.release} ({installed.detected_by}); set slurm_version in "
            "the policy to stage for machines that run another",
            err=True,
        )
    target = target_for_policy(
        policy,
        slurm_conf=slurm_conf,
        systemd_dir=systemd_dir,
        python=python,
        python_path=python_path,
    )
    try:
        files = generate(policy, installed=installed).files
        slurm = target_slurm(policy, installed).version
    except ConfigError as e:
        usage_error(str(e))
    try:
        plan = plan_install(target, files, root, SiteOptions(slurm, task_cgroup), role or "both")
    except InstallError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    _run(plan, dry_run)


@click.command()
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The policy install used (for its state dir).",
)
@var_option
@click.option("--state-dir", default=None, help="The state dir holding the install manifest.")
@staging_root_option
@dry_run_option
def uninstall(
    policy_path: Path | None,
    variables: dict[str, str],
    state_dir: str | None,
    root: Path,
    dry_run: bool,
) -> None:
    """Restore every file install changed, byte for byte, and remove what it created.

    Example: ``slurmpool uninstall --state-dir /var/lib/slurmpool``
    """
    from slurmpool.install import InstallError, plan_uninstall

    if state_dir is None:
        if policy_path is None:
            usage_error("pass --policy or --state-dir")
        state_dir = load_policy_or_exit(policy_path, variables).paths.state_dir
    assert state_dir is not None
    try:
        plan = plan_uninstall(state_dir, root)
    except InstallError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    _run(plan, dry_run)
