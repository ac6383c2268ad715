"""Every example policy's generated gres.conf parses with the real ``slurmd -G``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurmpool.configgen.render import generate
from slurmpool.doctor import _gres_conf_entries, expand_files, slurmd_gres_totals
from slurmpool.hostlist import HostList
from slurmpool.policy.loader import load_policy
from slurmpool.slurm.parse import parse_slurmd_gres

from .conftest import Cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
BASE = "ClusterName=gres-check\nSlurmctldHost=localhost\nSlurmdParameters=config_overrides\n"


def device_paths(gres_conf: str) -> list[str]:
    paths = []
    for line in gres_conf.splitlines():
        for token in line.split("#", 1)[0].split():
            key, _, value = token.partition("=")
            if key.lower() in ("file", "multiplefiles"):
                paths += expand_files(value)
    return paths


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_slurmd_parses_generated_gres_conf(cluster: Cluster, tmp_path: Path, example: Path) -> None:
    root = tmp_path / "root"
    policy = load_policy(example, variables={"root": str(root)})
    files = generate(policy, installed=cluster.sandbox.installed_slurm).files
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "gres.conf").write_text(files["gres.conf"])
    (etc / "slurmpool.conf").write_text(files["slurmpool.conf"])
    # slurmd -G authenticates with munge from 24.11 on: the sandbox's munged.
    auth = f"AuthType=auth/munge\nAuthInfo=socket={cluster.sandbox.layout.munge_socket}\n"
    (etc / "slurm.conf").write_text(BASE + auth + f"Include {etc / 'slurmpool.conf'}\n")
    # Device nodes where gres.conf expects them, in a private /dev (and $root) for slurmd -G.
    fake_dev = tmp_path / "dev"
    fake_dev.mkdir()
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
        os.system(f"mknod -m 666 {fake_dev / name} c 1 {minor}")
    script = ["set -e"]
    for path in device_paths(files["gres.conf"]):
        target = Path(path)
        base = fake_dev / target.relative_to("/dev") if path.startswith("/dev/") else target
        base.parent.mkdir(parents=True, exist_ok=True)
        if not base.exists():
            os.mknod(base, 0o666 | 0o020000, os.makedev(195, 0))
    script.append(f'mount --bind "{fake_dev}" /dev')
    for group in policy.node_groups:
        node = HostList(group.nodes).expand()[0]
        cmd = [*script, f"exec slurmd -G -N {node} -f {etc / 'slurm.conf'}"]
        res = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                "\n".join(cmd),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        out = res.stdout + res.stderr
        assert res.returncode == 0 and "fatal" not in out, out
        have = {k: c for k, (c, _) in slurmd_gres_totals(parse_slurmd_gres(out)).items()}
        want = {k: c for k, (c, _) in _gres_conf_entries(files["gres.conf"], node).items()}
        assert have == want, f"{example.name} node {node}:\n{out}"
