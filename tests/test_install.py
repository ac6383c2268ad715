"""install/uninstall on staged roots: round trip, idempotence, dry run, site hooks kept."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import needs
import pytest
from click.testing import CliRunner, Result
from slurm_node import NODE_SLURM, SITE_NEEDS, node_slurm_on_path

from slurmpool.cli import main
from slurmpool.configgen.render import generate
from slurmpool.install import (
    DISABLED_PREFIX,
    HOOKS,
    InstallError,
    InstallTarget,
    apply,
    edit_conf,
    plan_install,
    plan_uninstall,
    target_for_policy,
    why_others_cannot_run,
)
from slurmpool.policy.loader import load_policy
from slurmpool.policy.model import Policy

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sandbox.yaml"

SITE_CONF = """\
# the site's slurm.conf
ClusterName=site
SlurmctldHost=head
Prolog={prolog}
EPILOG={epilog}
PrologFlags=Contain
NodeName=sbx[1-2] CPUs=8
""" + SITE_NEEDS.replace("{", "{{").replace("}", "}}")


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file and directory under root with its bytes and mode."""
    out: dict[str, tuple[bytes | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath, d)
            out[str(p.relative_to(root))] = (None, stat.S_IMODE(p.stat().st_mode))
        for f in filenames:
            p = Path(dirpath, f)
            out[str(p.relative_to(root))] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    """A site with its own prolog and epilog, whose slurm.conf lives in the policy's config dir."""
    node = tmp_path / "node"
    log = tmp_path / "site.log"
    prolog = script(tmp_path / "site" / "prolog.sh", f'echo "site prolog $SLURM_JOB_ID" >> {log}\n')
    epilog = script(tmp_path / "site" / "epilog.sh", f'echo "site epilog $SLURM_JOB_ID" >> {log}\n')
    conf = node / "etc" / "slurm" / "slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(SITE_CONF.format(prolog=prolog, epilog=epilog))
    conf.chmod(0o640)
    return {
        "root": tmp_path,
        "node": node,
        "conf": conf,
        "log": log,
        "prolog": prolog,
        "epilog": epilog,
    }


def policy_for(node: Path) -> Policy:
    return load_policy(EXAMPLE, variables={"root": str(node)})


def do_install(policy: Policy, root: str | Path = "/", **kw: str) -> list[str]:
    target = target_for_policy(
        policy,
        systemd_dir=kw.get("systemd_dir", policy.paths.state_dir + "-systemd"),
        python=needs.hook_python(),
    )
    return apply(plan_install(target, generate(policy, installed=NODE_SLURM).files, root))


def test_round_trip_restores_bytes_and_site_prolog_runs(site: dict[str, Path]) -> None:
    before = snapshot(site["root"])
    policy = policy_for(site["node"])
    do_install(policy)
    conf = site["conf"].read_text()
    assert f"{DISABLED_PREFIX}Prolog={site['prolog']}" in conf
    assert f"{DISABLED_PREFIX}EPILOG=" in conf
    assert f"{DISABLED_PREFIX}PrologFlags=Contain" in conf  # the fragment sets PrologFlags
    # ... with the site's flags first: Contain (pam_slurm_adopt) stays in force.
    fragment = (Path(policy.paths.slurm_config_dir) / "slurmpool.conf").read_text()
    assert "PrologFlags=Contain,Alloc\n" in fragment
    assert conf.count("Include ") == 1
    assert conf.rstrip().endswith("#slurmpool-include")
    assert stat.S_IMODE(site["conf"].stat().st_mode) == 0o640
    state = Path(policy.paths.state_dir)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert state.stat().st_uid == os.geteuid()

    # The wrapper runs the site prolog first, then slurmpool's hook.
    prolog = Path(policy.paths.hooks_dir) / "prolog"
    assert os.access(prolog, os.X_OK)
    env = {
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "sbx1",
        "SLURM_JOB_UID": "0",
    }  # no slurmctld here: the prolog cannot read the allocation, carves nothing, exits 0
    res = subprocess.run([str(prolog)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert site["log"].read_text() == "site prolog 42\n"
    assert "hook=prolog action=job-start" in res.stderr
    assert "action=request-unknown" in res.stderr
    assert "job=42" in (state / "hooks.log").read_text()

    epilog = Path(policy.paths.hooks_dir) / "epilog"
    res = subprocess.run([str(epilog)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert site["log"].read_text().splitlines()[-1] == "site epilog 42"

    (state / "hooks.log").unlink()  # written by the hooks, not by install
    site["log"].unlink()
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before


def test_second_install_is_a_no_op(site: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    node_slurm_on_path(site["root"] / "bin", monkeypatch)  # what the CLI detects
    policy = policy_for(site["node"])
    target = target_for_policy(
        policy, systemd_dir=str(site["root"] / "systemd"), python=needs.hook_python()
    )
    files = generate(policy, installed=NODE_SLURM).files
    first = plan_install(target, files)
    assert not first.empty
    apply(first)
    after_first = snapshot(site["root"])
    second = plan_install(target, files)
    assert second.empty, second.summary()
    assert snapshot(site["root"]) == after_first
    result = CliRunner().invoke(
        main,
        [
            "install",
            "--policy",
            str(EXAMPLE),
            "--var",
            f"root={site['node']}",
            "--systemd-dir",
            str(site["root"] / "systemd"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "nothing to do"


SITE_LISTS = """\
GresTypes=gpu,shard
AccountingStorageTRES=gres/gpu,license/matlab
PrologFlags=Contain,X11
JobSubmitPlugins=lua
"""


def test_a_sites_lists_keep_their_items_and_gain_slurmpools(site: dict[str, Path]) -> None:
    """The site's GRES types, TRES, prolog flags and submit plugins stay in force, in
    its order, with slurmpool's items after them; uninstall gives back every byte."""
    with site["conf"].open("a") as f:
        f.write(SITE_LISTS)
    before = snapshot(site["root"])
    policy = policy_for(site["node"])
    target = target_for_policy(
        policy, systemd_dir=policy.paths.state_dir + "-systemd", python=needs.hook_python()
    )
    plan = plan_install(target, generate(policy, installed=NODE_SLURM).files)
    apply(plan)
    conf = site["conf"].read_text()
    for line in SITE_LISTS.splitlines():
        assert f"{DISABLED_PREFIX}{line}\n" in conf
    fragment = (Path(policy.paths.slurm_config_dir) / "slurmpool.conf").read_text()
    lists = [line for line in fragment.splitlines() if line.split("=")[0] in LIST_NAMES]
    assert lists == [
        "GresTypes=gpu,shard,vgpu,vgpufit",
        "AccountingStorageTRES=gres/gpu,license/matlab,gres/vgpu",
        "PrologFlags=Contain,X11,Alloc",
        "JobSubmitPlugins=lua",
    ]
    said = "\n".join(c.explain() for c in plan.changes)
    assert "('GresTypes=gpu,shard'): set aside: the site's gpu,shard is kept" in said
    assert "(slurmpool adds vgpu, vgpufit)" in said
    assert "sets JobSubmitPlugins=lua (slurmpool adds nothing)" in said
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before


LIST_NAMES = ("GresTypes", "AccountingStorageTRES", "PrologFlags", "JobSubmitPlugins")


def install_cli(site: dict[str, Path], *more: str) -> Result:
    return CliRunner().invoke(
        main,
        [
            "install",
            "--policy",
            str(EXAMPLE),
            "--var",
            f"root={site['node']}",
            "--systemd-dir",
            str(site["root"] / "systemd"),
            "--python",
            needs.hook_python(),
            *more,
        ],
    )


def test_dry_run_changes_nothing_and_shows_diff(site: dict[str, Path]) -> None:
    gres = site["conf"].parent / "gres.conf"
    gres.write_text("AutoDetect=nvml\nNodeName=gpu01 Name=gpu File=/dev/nvidia0\n")
    before = snapshot(site["root"])
    result = install_cli(site, "--dry-run")
    assert result.exit_code == 0, result.output
    assert snapshot(site["root"]) == before
    out = result.output
    assert f"+{DISABLED_PREFIX}Prolog={site['prolog']}" in out
    assert f"-Prolog={site['prolog']}" in out
    assert f"+++ b{site['node']}/hooks/prolog" in out
    assert "--- /dev/null" in out
    assert "create directory" in out
    # Every line of a site file that changes, with its reason, before the diff.
    conf = site["conf"]
    said = [line for line in out.splitlines() if line.startswith(f"# {conf}")]
    assert said == [
        f"# {conf} line 4 ('Prolog={site['prolog']}'): set aside: runs inside slurmpool's "
        f"wrapper {site['node']}/hooks/prolog: {HOOKS[0].order_text}",
        f"# {conf} line 5 ('EPILOG={site['epilog']}'): set aside: runs inside slurmpool's "
        f"wrapper {site['node']}/hooks/epilog: {HOOKS[2].order_text}",
        f"# {conf} line 6 ('PrologFlags=Contain'): set aside: the site's Contain is kept: "
        f"{conf.parent}/slurmpool.conf sets PrologFlags=Contain,Alloc (slurmpool adds Alloc)",
        f"# {conf} line 7 ('NodeName=sbx[1-2] CPUs=8'): set aside: the policy's node group sbx "
        "is defined here: slurmpool's GRES replace its GPU GRES",
        f"# {conf} line 8 (new): added: the site's line for node group sbx, with slurmpool's GRES",
        f"# {conf} line 11 (new): 'Include slurmpool.conf #slurmpool-include' "
        f"pulls in {conf.parent}/slurmpool.conf: slurmpool's settings, GRES, nodes and partitions",
    ]
    assert f"# {gres} line 3 (new): added, through line " in out
    # A site job_submit.lua Slurm does not run (no lua in JobSubmitPlugins) is refused.
    job_submit = conf.parent / "job_submit.lua"
    job_submit.write_text("function slurm_job_submit() return 0 end\n")
    refused = install_cli(site, "--dry-run")
    assert refused.exit_code == 1
    assert "but the site's JobSubmitPlugins has no lua, so Slurm does not run it" in (
        refused.output
    )


def test_install_refuses_a_site_whose_settings_contradict_the_pool(site: dict[str, Path]) -> None:
    """Every contradicting line in one error, each named with its fix; nothing written."""
    text = site["conf"].read_text()
    text = text.replace("select/cons_tres", "select/linear")
    text = text.replace("task/affinity,task/cgroup", "task/affinity")
    site["conf"].write_text(text + "PrologEpilogTimeout=40\n")
    before = snapshot(site["root"])
    result = install_cli(site)
    assert result.exit_code == 1
    assert snapshot(site["root"]) == before
    err = result.output
    assert "error: the site's Slurm configuration cannot take slurmpool as it is:" in err
    assert "line 8 ('SelectType=select/linear'): select/linear gives each job whole nodes" in err
    assert "line 9 ('TaskPlugin=task/affinity') has no task/cgroup" in err
    assert "line 10 ('PrologEpilogTimeout=40'): Slurm kills the epilog after 40 s" in err
    assert "Set PrologEpilogTimeout=80 or more, or lower hooks.epilog_timeout_s" in err


def test_task_cgroup_add_is_kept_by_the_next_install_and_undone_by_uninstall(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    text = site["conf"].read_text().replace("task/affinity,task/cgroup", "task/affinity")
    site["conf"].write_text(text)
    before = snapshot(site["root"])
    result = install_cli(site, "--task-cgroup", "add")
    assert result.exit_code == 0, result.output
    assert f"{DISABLED_PREFIX}TaskPlugin=task/affinity\n" in site["conf"].read_text()
    policy = policy_for(site["node"])
    fragment = (Path(policy.paths.slurm_config_dir) / "slurmpool.conf").read_text()
    assert "\nTaskPlugin=task/affinity,task/cgroup\n" in fragment
    assert fragment.index("TaskPlugin=") < fragment.index("NodeName=")
    # The manifest keeps the choice: a later install without the option changes nothing.
    again = install_cli(site)
    assert again.exit_code == 0 and "nothing to do" in again.output, again.output
    # ... and one told to require task/cgroup again refuses, as on a new site.
    assert install_cli(site, "--task-cgroup", "require").exit_code == 1
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before


def test_staged_root_prefixes_every_path(tmp_path: Path) -> None:
    root = tmp_path / "stage"
    conf = root / "srv/pool/etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("ClusterName=x\nTaskProlog=/usr/local/bin/site-task-prolog\n" + SITE_NEEDS)
    before = snapshot(root)
    policy = policy_for(Path("/srv/pool"))
    target = target_for_policy(policy, systemd_dir="/etc/systemd/system")
    apply(plan_install(target, generate(policy, installed=NODE_SLURM).files, root))
    assert (root / "srv/pool/hooks/task-prolog").is_file()
    assert (root / "etc/systemd/system/slurmpool-monitord.service").is_file()
    assert "ExecStart=" in (root / "etc/systemd/system/slurmpool-monitord.service").read_text()
    assert (root / "srv/pool/etc/slurm/gres.conf").is_file()
    assert (root / "srv/pool/state/install-manifest.json").is_file()
    wrapper = (root / "srv/pool/hooks/task-prolog").read_text()
    assert "/usr/local/bin/site-task-prolog || return $?" in wrapper
    assert not Path("/srv/pool/hooks").exists()
    assert plan_install(target, generate(policy, installed=NODE_SLURM).files, root).empty
    apply(plan_uninstall("/srv/pool/state", root))
    assert snapshot(root) == before


def test_uninstall_keeps_admin_edits_made_after_install(site: dict[str, Path]) -> None:
    policy = policy_for(site["node"])
    original = site["conf"].read_text()
    do_install(policy)
    with site["conf"].open("a") as f:
        f.write("MaxJobCount=5000\n")
    plan = plan_uninstall(policy.paths.state_dir)
    assert any("changed since install" in n for n in plan.notes)
    apply(plan)
    assert site["conf"].read_text() == original + "MaxJobCount=5000\n"


SITE_GRES = """\
AutoDetect=nvml
NodeName=sbx[1-3] Name=gpu Type=a100 File=/dev/nvidia[0-2]
NodeName=sbx[1-2] Name=nic File=/dev/infiniband/uverbs0
"""


def test_a_sites_gres_conf_keeps_its_other_lines_and_gains_slurmpools(
    site: dict[str, Path],
) -> None:
    """The site's lines for other nodes and other GRES stay; its GPU line for the pooled
    nodes is set aside (a copy for sbx3 takes its place); slurmpool's lines come last,
    with AutoDetect=off over the site's global AutoDetect; uninstall restores the bytes."""
    gres = site["conf"].parent / "gres.conf"
    gres.write_text(SITE_GRES)
    gres.chmod(0o600)
    policy = policy_for(site["node"])
    plan = plan_install(
        target_for_policy(policy, python=needs.hook_python()),
        generate(policy, installed=NODE_SLURM).files,
    )
    apply(plan)
    text = gres.read_text()
    head, ours = text.split("#slurmpool-begin: slurmpool's lines for the GPUs of its node groups\n")
    assert head == (
        "AutoDetect=nvml\n"
        f"{DISABLED_PREFIX}NodeName=sbx[1-3] Name=gpu Type=a100 File=/dev/nvidia[0-2]\n"
        "NodeName=sbx3 Name=gpu Type=a100 File=/dev/nvidia[0-2] #slurmpool-added\n"
        "NodeName=sbx[1-2] Name=nic File=/dev/infiniband/uverbs0\n"
    )
    generated = generate(policy, installed=NODE_SLURM).files["gres.conf"]
    grest = [line for line in generated.splitlines() if line.startswith("NodeName=")]
    assert grest and all(f"{line} AutoDetect=off" in ours for line in grest)
    assert ours.endswith("#slurmpool-end\n")
    said = [c.explain() for c in plan.changes if c.path == str(gres)]
    assert said[:2] == [
        f"{gres} line 2 ('NodeName=sbx[1-3] Name=gpu Type=a100 File=/dev/nvidia[0-2]'): "
        "set aside: slurmpool describes the GPUs of node group sbx (sbx[1-2])",
        f"{gres} line 3 (new): added: the set-aside line for its other nodes, sbx3",
    ]
    assert "AutoDetect=off, which trumps the site's global AutoDetect" in said[2]
    assert stat.S_IMODE(gres.stat().st_mode) == 0o600
    apply(plan_uninstall(policy.paths.state_dir))
    assert gres.read_text() == SITE_GRES
    assert stat.S_IMODE(gres.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("Name=gpu File=/dev/nvidia0", "a gpu line without NodeName describes every node"),
        ("NodeName=sbx1 AutoDetect=nvml", "AutoDetect=nvml on nodes slurmpool describes"),
        ("NodeName=sbx[1-2] Name=shard Count=4", "a shard on node group sbx, whose MIG GPUs"),
        ("NodeName=sbx2 Name=vgpu Count=2", "vgpu is slurmpool's own GRES"),
    ],
)
def test_a_gres_conf_line_that_contradicts_the_pool_is_refused(
    site: dict[str, Path], line: str, why: str
) -> None:
    gres = site["conf"].parent / "gres.conf"
    gres.write_text(f"NodeName=gpu01 Name=gpu File=/dev/nvidia0\n{line}\n")
    before = snapshot(site["root"])
    result = install_cli(site)
    assert result.exit_code == 1
    assert f"{gres} line 2 ({line!r}): {why}" in result.output
    assert snapshot(site["root"]) == before


def test_refuses_a_site_hook_at_the_wrapper_path(site: dict[str, Path]) -> None:
    policy = policy_for(site["node"])
    site["conf"].write_text(f"Prolog={policy.paths.hooks_dir}/prolog\n" + SITE_NEEDS)
    with pytest.raises(InstallError, match="move the site's hook"):
        plan_install(target_for_policy(policy), generate(policy, installed=NODE_SLURM).files)


def test_missing_slurm_conf_is_a_clear_error(tmp_path: Path) -> None:
    policy = policy_for(tmp_path / "nothing")
    with pytest.raises(InstallError, match=r"no slurm\.conf there"):
        plan_install(target_for_policy(policy), generate(policy, installed=NODE_SLURM).files)


def test_uninstall_without_install_says_nothing_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["uninstall", "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 0
    assert "nothing to do" in result.output


@pytest.mark.parametrize(
    ("hook", "site_rc", "ours_ok", "expect_rc", "expect_log"),
    [
        ("prolog", 0, True, 0, ["site"]),
        ("prolog", 3, True, 3, ["site"]),
        ("epilog", 4, True, 4, ["site"]),
        ("epilog", 0, False, 1, ["site"]),
        ("task-prolog", 5, True, 5, ["site"]),
    ],
    ids=[
        "prolog-ok",
        "prolog-site-fails",
        "epilog-site-fails",
        "epilog-ours-fails",
        "task-site-fails",
    ],
)
def test_wrapper_failure_propagation(
    tmp_path: Path, hook: str, site_rc: int, ours_ok: bool, expect_rc: int, expect_log: list[str]
) -> None:
    log = tmp_path / "order.log"
    key = next(h.slurm_key for h in HOOKS if h.name == hook)
    site_hook = script(
        tmp_path / "site-hook", f"echo site >> {log}\necho 'export SITE=1'\nexit {site_rc}\n"
    )
    node = tmp_path / "node"
    conf = node / "etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"{key}={site_hook}\n" + SITE_NEEDS)
    policy = policy_for(node)
    do_install(policy)
    if not ours_ok:
        Path(policy.paths.slurm_config_dir, "node-config.json").write_text("{}")
    wrapper = Path(policy.paths.hooks_dir) / hook
    res = subprocess.run(
        [str(wrapper)], env={"SLURM_JOB_ID": "7"}, capture_output=True, text=True, timeout=30
    )
    assert res.returncode == expect_rc, res.stderr
    assert log.read_text().split() == expect_log
    if hook == "task-prolog":
        assert res.stdout.startswith("export SITE=1\n")


def test_wrapper_sets_path_and_slurm_conf_in_an_empty_environment(site: dict[str, Path]) -> None:
    policy = policy_for(site["node"])
    do_install(policy)
    wrapper = (Path(policy.paths.hooks_dir) / "epilog-slurmctld").read_text()
    assert f"SLURM_CONF={site['conf']}" in wrapper
    assert sys.executable in wrapper
    res = subprocess.run(
        [str(Path(policy.paths.hooks_dir) / "epilog-slurmctld")],
        env={},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr


# -- the hooks' interpreter, as a job user sees it ----------------------------------------


def _private_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o700)
    return path


def _venv_python(venv: Path, target: str = "/usr/bin/python3") -> Path:
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.symlink_to(target)
    return python


def test_refuses_an_interpreter_under_a_private_directory(
    site: dict[str, Path], shared_dir: Path
) -> None:
    home = _private_dir(shared_dir / "root")
    # The venv's python links to /usr/bin/python3, which anyone can run: the path the
    # wrapper runs still goes through the 0700 directory.
    python = _venv_python(home / "venv")
    policy = policy_for(site["node"])
    target = target_for_policy(policy, python=str(python))
    with pytest.raises(InstallError) as e:
        plan_install(target, generate(policy, installed=NODE_SLURM).files)
    msg = str(e.value)
    assert f"directory {home} (mode 0700) is not searchable by other users" in msg
    assert "--python /opt/slurmpool/bin/python" in msg and "chmod o+x" in msg
    assert not Path(policy.paths.hooks_dir).exists()  # nothing written


def test_refuses_a_venv_whose_python_links_into_a_private_directory(
    site: dict[str, Path], shared_dir: Path
) -> None:
    private = _private_dir(shared_dir / "private")
    real = private / "python3"
    real.symlink_to("/usr/bin/python3")
    python = _venv_python(shared_dir / "venv", str(real))
    policy = policy_for(site["node"])
    with pytest.raises(InstallError, match=f"directory {private} \\(mode 0700\\)"):
        plan_install(
            target_for_policy(policy, python=str(python)),
            generate(policy, installed=NODE_SLURM).files,
        )


def test_cli_refusal_names_the_directory_and_the_fix(
    site: dict[str, Path], shared_dir: Path
) -> None:
    home = _private_dir(shared_dir / "home")
    python = _venv_python(home / "venv")
    args = ["install", "--policy", str(EXAMPLE), "--var", f"root={site['node']}"]
    result = CliRunner().invoke(main, [*args, "--python", str(python), "--dry-run"])
    assert result.exit_code != 0
    assert f"error: job users cannot run the hooks' interpreter {python}" in result.output
    assert f"directory {home} (mode 0700)" in result.output


def test_accepts_an_interpreter_every_user_can_reach(shared_dir: Path) -> None:
    python = _venv_python(shared_dir / "venv")
    assert why_others_cannot_run(str(python)) is None
    (shared_dir / "venv" / "bin").chmod(0o750)
    assert "venv/bin (mode 0750)" in (why_others_cannot_run(str(python)) or "")
    assert "cannot be resolved" in (why_others_cannot_run(str(shared_dir / "nope")) or "")


def test_a_setting_of_slurmpools_the_site_sets_otherwise_is_refused() -> None:
    target = InstallTarget("/etc/slurm/slurm.conf", "/etc/slurm", "/hooks", "/state")
    site = "MpiDefault=none\n" + SITE_NEEDS
    (why,) = edit_conf(site, "MpiDefault=pmix\n", target).refusals
    assert why.startswith("/etc/slurm/slurm.conf line 1 ('MpiDefault=none'): slurmpool needs Mp")
    same = edit_conf(site, "mpidefault=None\n", target)
    assert same.text.startswith(f"{DISABLED_PREFIX}MpiDefault=none\n")
    assert (
        same.changes[0].reason
        == "set aside: /etc/slurm/slurmpool.conf sets the same MpiDefault=None"
    )


SITE_CGROUP = "CgroupPlugin=cgroup/v1\nAllowedRAMSpace=95\n"


def test_a_sites_cgroup_conf_keeps_every_line_and_gains_constrain_devices(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    cgroup = site["conf"].parent / "cgroup.conf"
    cgroup.write_text(SITE_CGROUP)
    cgroup.chmod(0o640)
    before = snapshot(site["root"])
    dry = install_cli(site, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert (
        f"# {cgroup} line 3 (new): added: keeps each job to the GPU device files Slurm gave it"
        in dry.output
    )
    assert f"# {cgroup}: the site's file" not in dry.output
    assert install_cli(site).exit_code == 0
    assert cgroup.read_text() == SITE_CGROUP + "ConstrainDevices=yes #slurmpool-added\n"
    assert stat.S_IMODE(cgroup.stat().st_mode) == 0o640
    assert install_cli(site).output.strip() == "nothing to do"
    policy = policy_for(site["node"])
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before

    # An admin's later edit stays through uninstall; only slurmpool's line goes.
    assert install_cli(site).exit_code == 0
    with cgroup.open("a") as f:
        f.write("ConstrainSwapSpace=yes\n")
    plan = plan_uninstall(policy.paths.state_dir)
    assert f"{cgroup} changed since install; removed slurmpool's lines and kept the rest" in (
        plan.notes
    )
    apply(plan)
    assert cgroup.read_text() == SITE_CGROUP + "ConstrainSwapSpace=yes\n"


def test_a_cgroup_conf_that_turns_device_fencing_off_is_refused(site: dict[str, Path]) -> None:
    cgroup = site["conf"].parent / "cgroup.conf"
    cgroup.write_text(SITE_CGROUP + "ConstrainDevices=no\n")
    before = snapshot(site["root"])
    result = install_cli(site)
    assert result.exit_code == 1
    assert f"{cgroup} line 3 ('ConstrainDevices=no'): slurmpool needs ConstrainDevices=yes" in (
        result.output
    )
    assert snapshot(site["root"]) == before
    # Pooling unfenced, the site's file is not touched at all.
    assert install_cli(site, "--task-cgroup", "skip").exit_code == 0
    assert cgroup.read_text() == SITE_CGROUP + "ConstrainDevices=no\n"


SITE_NODES = """\
NodeName=DEFAULT Gres=gpu:a100:3,nic:1 Feature=ib
NodeName=sbx[1-3] CPUs=32 RealMemory=64000 Weight=5
PartitionName=pool Nodes=sbx[1-3] Default=YES MaxTime=INFINITE State=UP
"""


def test_the_sites_own_node_and_partition_lines_stay_the_definitions(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes and partitions the site defines are not defined again by slurmpool.conf:
    the site's lines are edited in place; uninstall gives back every byte."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    site["conf"].write_text(site["conf"].read_text().replace("NodeName=sbx[1-2] CPUs=8\n", ""))
    with site["conf"].open("a") as f:
        f.write(SITE_NODES)
    before = snapshot(site["root"])
    result = install_cli(site)
    assert result.exit_code == 0, result.output
    conf = site["conf"].read_text()
    assert "\nNodeName=sbx[1-2] CPUs=32 RealMemory=64000 Weight=5 Gres=gpu:a100:1,vgpu:14," in conf
    assert ",nic:1 #slurmpool-added\nNodeName=sbx3 CPUs=32 RealMemory=64000 Weight=5 #slur" in conf
    assert "\nPartitionName=pool Nodes=sbx[1-3],vgpufit-sbx Default=YES " in conf
    policy = policy_for(site["node"])
    fragment = (Path(policy.paths.slurm_config_dir) / "slurmpool.conf").read_text()
    defined = [
        line.split()[0] for line in fragment.splitlines() if line.startswith(("Node", "Part"))
    ]
    assert defined == ["NodeName=vgpufit-sbx"]  # only the fit anchor is slurmpool's own
    assert install_cli(site).output.strip() == "nothing to do"
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before


def test_the_sites_included_files_are_read_and_edited_where_their_lines_are(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node, a partition and a list setting in files slurm.conf includes are edited
    there, as in slurm.conf itself; uninstall restores both files, or after an admin's
    edit removes only slurmpool's lines; an include of a file not there is refused."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    etc = site["conf"].parent
    text = site["conf"].read_text().replace("NodeName=sbx[1-2] CPUs=8\n", "")
    site["conf"].write_text(text + "Include nodes.conf\nInclude " + str(etc) + "/%c-sched.conf\n")
    nodes = etc / "nodes.conf"
    nodes.write_text(SITE_NODES)
    sched = etc / "site-sched.conf"
    sched.write_text("SchedulerParameters=bf_continue\nGresTypes=gpu,nic\n")
    before = snapshot(site["root"])
    dry = install_cli(site, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"# {nodes} line 2 ('NodeName=sbx[1-3] CPUs=32 RealMemory=64000 Weight=5'): set" in (
        dry.output
    )
    assert f"# {sched} line 2 ('GresTypes=gpu,nic'): set aside: the site's gpu,nic is kept" in (
        dry.output
    )
    assert install_cli(site).exit_code == 0
    assert f"{DISABLED_PREFIX}GresTypes=gpu,nic\n" in sched.read_text()
    assert "\nNodeName=sbx[1-2] CPUs=32 RealMemory=64000 Weight=5 Gres=" in nodes.read_text()
    policy = policy_for(site["node"])
    fragment = (Path(policy.paths.slurm_config_dir) / "slurmpool.conf").read_text()
    assert "\nGresTypes=gpu,nic,vgpu,vgpufit\n" in fragment
    assert "NodeName=sbx[1-2]" not in fragment and "PartitionName=pool" not in fragment
    assert install_cli(site).output.strip() == "nothing to do"
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before

    assert install_cli(site).exit_code == 0
    with nodes.open("a") as f:
        f.write("NodeName=cpu01 CPUs=4\n")
    apply(plan_uninstall(policy.paths.state_dir))
    assert nodes.read_text() == SITE_NODES + "NodeName=cpu01 CPUs=4\n"
    assert sched.read_text() == "SchedulerParameters=bf_continue\nGresTypes=gpu,nic\n"

    nodes.unlink()
    result = install_cli(site)
    assert result.exit_code == 1
    assert f"line 9 ('Include nodes.conf') includes {nodes}, which is not there" in result.output


SITE_LUA = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.account == nil then
    slurm.log_user("please give --account")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


def test_a_sites_job_submit_lua_moves_where_slurmpools_runs_it_first(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    with site["conf"].open("a") as f:
        f.write("JobSubmitPlugins=lua\n")
    lua = site["conf"].parent / "job_submit.lua"
    lua.write_text(SITE_LUA)
    lua.chmod(0o640)
    copy = site["conf"].parent / "job_submit.site.lua"
    before = snapshot(site["root"])
    dry = install_cli(site, "--dry-run")
    assert f"# {lua}: the site's file moves to {copy}, which slurmpool's job_submit.lua " in (
        dry.output
    )
    assert install_cli(site).exit_code == 0
    assert copy.read_text() == SITE_LUA and stat.S_IMODE(copy.stat().st_mode) == 0o640
    assert f"local SITE_LUA = {str(copy)!r}".replace("'", '"') in lua.read_text()
    assert install_cli(site).output.strip() == "nothing to do"
    policy = policy_for(site["node"])
    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before

    # Edits made to the site's file where slurmpool runs it survive a reinstall and
    # go back with uninstall.
    assert install_cli(site).exit_code == 0
    copy.write_text(SITE_LUA.replace("please give", "give"))
    assert install_cli(site).output.strip() == "nothing to do"
    plan = plan_uninstall(policy.paths.state_dir)
    assert f"{lua} gets back the site's file as edited in {copy}" in plan.notes
    apply(plan)
    assert lua.read_text() == SITE_LUA.replace("please give", "give") and not copy.exists()


SHARED_FILES = ("slurmpool.conf", "gres.conf", "cgroup.conf", "job_submit.lua")


def test_controller_and_node_are_installed_apart(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--controller writes the shared configuration and the EpilogSlurmctld wrapper;
    --node reads slurm.conf for the site's hooks and writes only what a node needs;
    the two on one machine are plain install's files, and uninstall undoes both."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    policy = policy_for(site["node"])
    etc, hooks = Path(policy.paths.slurm_config_dir), Path(policy.paths.hooks_dir)
    systemd = site["root"] / "systemd"
    before = snapshot(site["root"])
    site_conf = site["conf"].read_bytes()

    assert install_cli(site, "--controller").exit_code == 0
    assert all((etc / name).is_file() for name in SHARED_FILES)
    assert site["conf"].read_bytes() != site_conf
    assert [p.name for p in hooks.iterdir()] == ["epilog-slurmctld"]
    assert not systemd.exists()
    controller = snapshot(site["root"])

    # A node of the same site: the shared slurm.conf is read, never written.
    shared = site["conf"].read_bytes()
    node_result = install_cli(site, "--node")
    assert node_result.exit_code == 0, node_result.output
    assert site["conf"].read_bytes() == shared
    assert sorted(p.name for p in hooks.iterdir()) == [
        "epilog",
        "epilog-slurmctld",
        "prolog",
        "task-prolog",
    ]
    # The node's prolog wrapper runs the site's prolog, read from the shared slurm.conf.
    assert f"{site['prolog']} || return $?" in (hooks / "prolog").read_text()
    link = systemd / "multi-user.target.wants" / "slurmpool-monitord.service"
    assert os.readlink(link) == str(systemd / "slurmpool-monitord.service")
    assert install_cli(site, "--node").output.strip() == "nothing to do"
    assert install_cli(site).output.strip() == "nothing to do"  # both: the same files
    changed = {k for k, v in snapshot(site["root"]).items() if controller.get(k) != v}
    assert all(
        "hooks/" in k or "systemd" in k or k.endswith(("install-manifest.json", "state"))
        for k in changed
    ), changed

    apply(plan_uninstall(policy.paths.state_dir))
    assert snapshot(site["root"]) == before


def test_a_node_image_is_built_without_touching_the_shared_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """install --node --root DIR: a stateless image; the site's slurm.conf in it is read."""
    node_slurm_on_path(tmp_path / "bin", monkeypatch)
    image = tmp_path / "image"
    conf = image / "srv/pool/etc/slurm/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("ClusterName=x\nEpilog=/usr/local/sbin/site-epilog\n" + SITE_NEEDS)
    before = snapshot(image)
    args = ["install", "--policy", str(EXAMPLE), "--var", "root=/srv/pool", "--node"]
    result = CliRunner().invoke(main, [*args, "--root", str(image)])
    assert result.exit_code == 0, result.output
    assert conf.read_text() == before["srv/pool/etc/slurm/slurm.conf"][0].decode()
    assert not (image / "srv/pool/etc/slurm/gres.conf").exists()
    assert "/usr/local/sbin/site-epilog" in (image / "srv/pool/hooks/epilog").read_text()
    assert (
        image / "etc/systemd/system/multi-user.target.wants/slurmpool-monitord.service"
    ).is_symlink()
    # Without slurm.conf there, a node cannot know the site's own hooks: refused.
    conf.unlink()
    refused = CliRunner().invoke(main, [*args, "--root", str(image)])
    assert refused.exit_code == 1 and "install --node reads the site's slurm.conf" in refused.output


def test_the_include_line_is_relative_where_slurmpool_conf_is_next_to_slurm_conf(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Configless slurmctld ships only relatively named includes (probe-configless.sh);
    an install by an earlier version (absolute name) is taken over."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    policy = policy_for(site["node"])
    target = target_for_policy(policy)
    assert target.include_line == "Include slurmpool.conf #slurmpool-include"
    elsewhere = target_for_policy(policy, slurm_conf="/etc/slurm/slurm.conf")
    assert elsewhere.include_line == f"Include {target.fragment} #slurmpool-include"

    assert install_cli(site).exit_code == 0
    conf = site["conf"].read_text()
    site["conf"].write_text(
        conf.replace("Include slurmpool.conf", f"Include {target.fragment}")
    )  # as an earlier version wrote it
    assert install_cli(site).exit_code == 0
    assert site["conf"].read_text() == conf


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_sites_files_keep_their_owner(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmctld may read the site's files as SlurmUser: install and uninstall keep each
    site file's owner and group; the moved job_submit.lua keeps the original's; what
    slurmpool creates itself (the wrappers) is root's."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    slurm_user = (4242, 4343)
    with site["conf"].open("a") as f:
        f.write("JobSubmitPlugins=lua\n")
    gres = site["conf"].parent / "gres.conf"
    gres.write_text(SITE_GRES)
    lua = site["conf"].parent / "job_submit.lua"
    lua.write_text(SITE_LUA)
    for path in (site["conf"], gres, lua):
        os.chown(path, *slurm_user)
    assert install_cli(site).exit_code == 0
    copy = site["conf"].parent / "job_submit.site.lua"
    for path in (site["conf"], gres, copy):
        assert (path.stat().st_uid, path.stat().st_gid) == slurm_user, path
    policy = policy_for(site["node"])
    assert (Path(policy.paths.hooks_dir) / "prolog").stat().st_uid == 0
    apply(plan_uninstall(policy.paths.state_dir))
    for path in (site["conf"], gres, lua):
        assert (path.stat().st_uid, path.stat().st_gid) == slurm_user, path


def test_uninstall_refuses_where_an_admin_changed_slurmpools_own_lines(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uninstall after an admin's edits keeps them, but takes back only the lines install
    wrote as it wrote them: one changed since is named, and nothing is touched."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    gres = site["conf"].parent / "gres.conf"
    gres.write_text(SITE_GRES)
    assert install_cli(site).exit_code == 0
    policy = policy_for(site["node"])
    conf = site["conf"].read_text()
    ours = next(line for line in conf.splitlines() if line.endswith("#slurmpool-added"))
    site["conf"].write_text(conf.replace(ours, ours.replace("CPUs=8", "CPUs=12")) + "X=1\n")
    block = gres.read_text()
    vgpu = next(line for line in block.splitlines() if "Name=vgpu " in line)
    gres.write_text(block.replace(vgpu, vgpu.replace("Count=14", "Count=7")))
    installed = snapshot(site["root"])
    with pytest.raises(InstallError) as refused:
        plan_uninstall(policy.paths.state_dir)
    said = str(refused.value)
    assert f"  - {site['conf']}: {ours!r}" in said
    assert f"  - {gres}: {vgpu!r}" in said
    assert snapshot(site["root"]) == installed
    # Put back, the admin's own line stays and slurmpool's go.
    site["conf"].write_text(conf + "X=1\n")
    gres.write_text(block)
    apply(plan_uninstall(policy.paths.state_dir))
    assert site["conf"].read_text().endswith("NodeName=sbx[1-2] CPUs=8\n" + SITE_NEEDS + "X=1\n")
    assert gres.read_text() == SITE_GRES


def test_an_install_by_an_earlier_version_is_taken_over(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier version replaced gres.conf, cgroup.conf and job_submit.lua whole and
    recorded the site's files in its manifest: install merges the site's recorded files
    instead, and uninstall still gives back every byte."""
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    etc = site["conf"].parent
    with site["conf"].open("a") as f:
        f.write("JobSubmitPlugins=lua\n")
    (etc / "gres.conf").write_text(SITE_GRES)
    (etc / "cgroup.conf").write_text(SITE_CGROUP)
    (etc / "job_submit.lua").write_text(SITE_LUA)
    before = snapshot(site["root"])
    assert install_cli(site).exit_code == 0
    policy = policy_for(site["node"])
    generated = generate(policy, installed=NODE_SLURM).files
    # The earlier version's state: generated files in place, no records of merges.
    for name in ("gres.conf", "cgroup.conf", "job_submit.lua"):
        (etc / name).write_text(generated[name])
    (etc / "job_submit.site.lua").unlink()
    manifest_path = Path(policy.paths.state_dir) / "install-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for key in ("merged_sha256", "moved", "marked", "links_created"):
        manifest.pop(key, None)
    manifest_path.write_text(json.dumps(manifest))
    assert install_cli(site).exit_code == 0
    assert (etc / "gres.conf").read_text().startswith(SITE_GRES.splitlines()[0] + "\n")
    assert (etc / "cgroup.conf").read_text().startswith(SITE_CGROUP)
    assert (etc / "job_submit.site.lua").read_text() == SITE_LUA
    apply(plan_uninstall(policy.paths.state_dir))
    after = snapshot(site["root"])
    assert after == before


# The site the issue was found on, all at once: its lists, licence, nodes and
# partitions, cgroup.conf, gres.conf with a global AutoDetect and shards on a node
# slurmpool does not pool, and a job_submit.lua with an account rule.
WHOLE_SITE_CONF = """\
GresTypes=gpu,shard
AccountingStorageTRES=gres/gpu,license/matlab
Licenses=matlab:10
JobSubmitPlugins=lua
NodeName=sbx[1-2] CPUs=32 RealMemory=64000 Gres=gpu:a100:3 Features=ib
NodeName=old01 CPUs=16 Gres=gpu:titanv:1,shard:8
PartitionName=pool Nodes=sbx[1-2] State=UP
PartitionName=old Nodes=old01 State=UP
"""
WHOLE_SITE_GRES = """\
AutoDetect=nvml
NodeName=sbx[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-2]
NodeName=old01 Name=gpu Type=titanv File=/dev/nvidia0
NodeName=old01 Name=shard Count=8
"""


def test_a_whole_site_keeps_every_setting_through_install_and_uninstall(
    site: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    node_slurm_on_path(site["root"] / "bin", monkeypatch)
    etc = site["conf"].parent
    site["conf"].write_text(site["conf"].read_text().replace("NodeName=sbx[1-2] CPUs=8\n", ""))
    with site["conf"].open("a") as f:
        f.write(WHOLE_SITE_CONF)
    (etc / "cgroup.conf").write_text(SITE_CGROUP)
    (etc / "gres.conf").write_text(WHOLE_SITE_GRES)
    (etc / "job_submit.lua").write_text(SITE_LUA)
    before = snapshot(site["root"])

    dry = install_cli(site, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert snapshot(site["root"]) == before
    said = [line for line in dry.output.splitlines() if line.startswith("# /")]
    # Each site line install changes is named with its reason; none it keeps is.
    for kept in ("Licenses=matlab:10", "NodeName=old01", "PartitionName=old", "AutoDetect=nvml"):
        assert not any(f"('{kept}" in line for line in said), (kept, said)
    for changed in ("GresTypes=gpu,shard", "NodeName=sbx[1-2]", "PartitionName=pool"):
        assert any(f"('{changed}" in line for line in said), (changed, said)
    assert any("cgroup.conf line 3 (new): added: keeps each job" in line for line in said)
    assert any("job_submit.lua: the site's file moves to" in line for line in said)

    result = install_cli(site)
    assert result.exit_code == 0, result.output
    conf = site["conf"].read_text()
    fragment = (etc / "slurmpool.conf").read_text()
    assert "\nLicenses=matlab:10\n" in conf
    assert "\nNodeName=old01 CPUs=16 Gres=gpu:titanv:1,shard:8\n" in conf
    assert "\nPartitionName=old Nodes=old01 State=UP\n" in conf
    assert "\nNodeName=sbx[1-2] CPUs=32 RealMemory=64000 Gres=gpu:a100:1,vgpu:14," in conf
    assert "GresTypes=gpu,shard,vgpu,vgpufit\n" in fragment
    assert "AccountingStorageTRES=gres/gpu,license/matlab,gres/vgpu\n" in fragment
    # Defined once: the site's lines are the definitions, slurmpool.conf adds its anchor.
    assert [ln.split()[0] for ln in fragment.splitlines() if ln.startswith(("Node", "Part"))] == [
        "NodeName=vgpufit-sbx"
    ]
    assert (etc / "cgroup.conf").read_text() == SITE_CGROUP + (
        "ConstrainDevices=yes #slurmpool-added\n"
    )
    gres = (etc / "gres.conf").read_text()
    assert gres.startswith("AutoDetect=nvml\n")
    assert "\nNodeName=old01 Name=gpu Type=titanv File=/dev/nvidia0\n" in gres
    assert "\nNodeName=old01 Name=shard Count=8\n" in gres
    assert (etc / "job_submit.site.lua").read_text() == SITE_LUA
    assert install_cli(site).output.strip() == "nothing to do"

    apply(plan_uninstall(policy_for(site["node"]).paths.state_dir))
    assert snapshot(site["root"]) == before
