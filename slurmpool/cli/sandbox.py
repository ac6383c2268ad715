"""``slurmpool sandbox up|down|status|env|restart|add-user|exec``: a real Slurm cluster
on this machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option
from slurmpool.sandbox.cluster import Sandbox, SandboxError, SandboxOptions
from slurmpool.sandbox.layout import DEFAULT_SANDBOX_DIR
from slurmpool.slurm.runner import Runner, SlurmCommandError

dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: os.environ.get("SLURMPOOL_SANDBOX_DIR", DEFAULT_SANDBOX_DIR),
    show_default=f"$SLURMPOOL_SANDBOX_DIR or {DEFAULT_SANDBOX_DIR}",
    help="The sandbox directory.",
)


def _sandbox(directory: Path) -> Sandbox:
    return Sandbox(directory, Runner(env=dict(os.environ)))


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_FAIL)


@click.group()
def sandbox() -> None:
    """A real Slurm cluster on this machine, on loopback, with simulated GPUs.

    Example::

        slurmpool sandbox up
        eval "$(slurmpool sandbox env)"
        sbatch --gres=vgpu:2 --wrap true
    """


@sandbox.command()
@dir_option
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Policy to generate the config from (default: the bundled examples/sandbox.yaml).",
)
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True)
@click.option(
    "--configless",
    is_flag=True,
    help="Run configless: slurmctld serves the configuration and every slurmd fetches it "
    "(--conf-server), as many sites do.",
)
def up(directory: Path, policy: Path | None, timeout_s: float, configless: bool) -> None:
    """Start munged, MariaDB, slurmdbd, slurmctld and one slurmd per node; wait until idle.

    Example: ``slurmpool sandbox up --dir /tmp/sbx``
    """
    sb = _sandbox(directory)
    opts = SandboxOptions(
        directory=directory,
        policy=policy,
        python=sys.executable,
        timeout_s=timeout_s,
        configless=configless,
    )
    try:
        state = sb.up(opts, progress=lambda msg: click.echo(f"sandbox: {msg}", err=True))
    except SandboxError as e:
        _fail(str(e))
        return
    nodes = ", ".join(state.nodes)
    click.echo(f"sandbox up in {state.startup_s} s: cluster {state.cluster}, nodes {nodes}")
    click.echo(f'use it with: eval "$(slurmpool sandbox env --dir {directory})"')


@sandbox.command()
@dir_option
@click.option("--keep", is_flag=True, help="Keep the directory (logs) after stopping.")
def down(directory: Path, keep: bool) -> None:
    """Stop the daemons this sandbox started (by PID) and remove its directory."""
    try:
        for line in _sandbox(directory).down(remove=not keep):
            click.echo(line)
    except SandboxError as e:
        _fail(str(e))


@sandbox.command()
@dir_option
@json_option("the status")
def status(directory: Path, as_json: bool) -> None:
    """Show the sandbox daemons and the nodes with their GRES; exit 1 when it is not up."""
    from slurmpool.sandbox import procs

    sb = _sandbox(directory)
    st = sb.state()
    if st is None:
        _fail(f"no sandbox in {directory}")
        return
    daemons = [
        {"name": d.name, "pid": d.pid, "running": procs.is_running(d), "log": d.log}
        for d in st.daemons
    ]
    nodes: list[dict[str, str]] = []
    error = None
    try:
        nodes = [
            {
                "name": n.name,
                "state": "+".join((n.state, *n.flags)),
                "gres": ",".join(str(g) for g in n.gres),
            }
            for n in sb.nodes()
        ]
    except SlurmCommandError as e:
        error = str(e)
    healthy = st.phase == "up" and all(d["running"] for d in daemons) and error is None
    if as_json:
        echo_json(
            {
                "directory": st.directory,
                "phase": st.phase,
                "healthy": healthy,
                "slurm_conf": st.slurm_conf,
                "ports": st.ports,
                "daemons": daemons,
                "nodes": nodes,
                "error": error,
            }
        )
    else:
        click.echo(f"sandbox {st.directory}: {st.phase}, cluster {st.cluster}")
        for d in daemons:
            click.echo(
                f"  {d['name']:<14} pid {d['pid']:<8} {'running' if d['running'] else 'STOPPED'}"
            )
        for n in nodes:
            click.echo(f"  node {n['name']:<10} {n['state']:<12} gres {n['gres']}")
        if error:
            click.echo(f"  slurm: {error}")
    if not healthy:
        raise SystemExit(EXIT_FAIL)


@sandbox.command()
@dir_option
def env(directory: Path) -> None:
    """Print shell exports for the sandbox: ``eval "$(slurmpool sandbox env)"``."""
    try:
        for line in _sandbox(directory).env_lines():
            click.echo(line)
    except SandboxError as e:
        _fail(str(e))


@sandbox.command()
@dir_option
@click.argument("daemons", nargs=-1, required=True)
def restart(directory: Path, daemons: tuple[str, ...]) -> None:
    """Restart DAEMONS (names as ``sandbox status`` lists them: ``slurmctld``,
    ``slurmd-sbx1``, ``monitord-sbx1``, ...) one after the other, by PID, so that they
    read the configuration as it is now; wait until each serves again.

    Example, after an edit of the sandbox's slurm.conf::

        slurmpool sandbox restart slurmctld slurmd-sbx1 slurmd-sbx2
    """
    sb = _sandbox(directory)
    for name in daemons:
        try:
            d = sb.restart(name)
        except SandboxError as e:
            _fail(str(e))
            return
        click.echo(f"restarted {name} (pid {d.pid})")


@sandbox.command("add-user")
@dir_option
@click.argument("users", nargs=-1, required=True)
def add_user(directory: Path, users: tuple[str, ...]) -> None:
    """Give Unix USERS made after ``up`` an association under the sandbox's default
    account (``up`` gives one to root and every login user that exists then).

    Example: ``slurmpool sandbox add-user alice bob``
    """
    try:
        _sandbox(directory).add_user(*users)
    except (SandboxError, SlurmCommandError) as e:
        _fail(str(e))
        return
    click.echo(f"associations in the sandbox's default account: {', '.join(users)}")


@sandbox.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@dir_option
@click.argument("node")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(directory: Path, node: str, command: tuple[str, ...]) -> None:
    """Run COMMAND on NODE as that node sees the world: in its mount namespace (its
    simulated GPUs, state and run directories), with the sandbox's SLURM_CONF,
    SLURMD_NODENAME=NODE and its node config, so node-side commands need no flags.
    Exits with COMMAND's status.

    Example: ``slurmpool sandbox exec sbx1 -- slurmpool accounting status``
    """
    import subprocess

    if command[:1] == ("--",):  # click keeps the separator in an unprocessed argument
        command = command[1:]
    if not command:
        _fail("no command to run: slurmpool sandbox exec NODE -- COMMAND [ARG...]")
    sb = _sandbox(directory)
    try:
        argv = sb.on_node(node, command)
        env = sb.node_env(node)
    except SandboxError as e:
        _fail(str(e))
        return
    # This slurmpool's own bin directory first: `slurmpool ...` is this one.
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "/usr/bin:/bin")])
    raise SystemExit(subprocess.run(argv, env=env, check=False).returncode)
