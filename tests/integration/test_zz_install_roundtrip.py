"""Last: uninstall from the live sandbox restores the site's files; reinstall runs jobs again.

(Named zz so it runs after the other tests that need slurmpool installed.)
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from slurmpool.configgen.render import generate
from slurmpool.install import Role, apply, plan_install, plan_uninstall, target_for_policy
from slurmpool.sandbox.cluster import SandboxOptions, hook_interpreter

from .conftest import Cluster


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_uninstall_restores_and_reinstall_works(cluster: Cluster) -> None:
    layout = cluster.sandbox.layout
    conf = Path(cluster.state.slurm_conf)
    etc = conf.parent
    installed = {p: digest(p) for p in etc.iterdir() if p.is_file()}
    hooks = sorted((layout.node_root / "hooks").iterdir())
    policy_dir = layout.node_root / "state"

    apply(plan_uninstall(str(policy_dir)))
    policy = cluster.sandbox.policy_as_installed(cluster.state)
    # Every site file byte-identical to what the site wrote before slurmpool came.
    site = cluster.sandbox.site_files(cluster.state, policy)
    for name, text in site.items():
        assert (etc / name).read_text() == text, name
    assert "#slurmpool-" not in conf.read_text()
    assert not (etc / "slurmpool.conf").exists()
    assert not (etc / "job_submit.site.lua").exists()
    assert all(not h.exists() for h in hooks)

    # Reinstall the same policy: the same bytes as the sandbox's install.
    python, python_path = hook_interpreter(
        SandboxOptions(directory=layout.root, python=sys.executable)
    )
    target = target_for_policy(
        policy,
        slurm_conf=str(conf),
        systemd_dir=str(layout.systemd_dir),
        python=python,
        python_path=python_path,
        timeout_bin=cluster.slurm.which("timeout"),
    )
    files = generate(policy, installed=cluster.sandbox.installed_slurm).files
    site_options = cluster.sandbox.site_options()
    roles: tuple[Role, ...] = ("controller", "node")
    for role in roles:
        apply(plan_install(target, files, options=site_options, role=role))
    assert {p: digest(p) for p in etc.iterdir() if p.is_file()} == installed
    assert plan_install(target, files).empty  # the manifest keeps the --task-cgroup choice

    cluster.slurm.run("scontrol", "reconfigure", timeout=30)
    job = cluster.submit("--gres=vgpu:1", "-o", "/dev/null", "--wrap", "true", user="sp-bob")
    assert cluster.wait(job) == "COMPLETED"
    site_log = (layout.site_dir / "prolog.log").read_text()
    assert f"site-prolog job={job} " in site_log
    node = cluster.job(job)["NodeList"]
    assert f"action=job-start level=info job={job} " in cluster.host_hook_log(node)
