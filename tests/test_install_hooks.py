"""The hook entry points: dispatch, structured logging, import weight, exit statuses."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_node import NODE_SLURM

from slurmpool.configgen.render import generate
from slurmpool.hooks.__main__ import main
from slurmpool.hooks.dispatch import HOOKS
from slurmpool.hooks.log import format_line, quote
from slurmpool.install import HOOKS as INSTALLED_HOOKS
from slurmpool.policy.loader import load_policy

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sandbox.yaml"


@pytest.fixture
def node_config(tmp_path: Path) -> Path:
    policy = load_policy(EXAMPLE, variables={"root": str(tmp_path)})
    path = tmp_path / "node-config.json"
    path.write_text(generate(policy, installed=NODE_SLURM).files["node-config.json"])
    return path


def run(
    hook: str, node_config: Path, env: dict[str, str], log_file: Path | None = None
) -> tuple[int, str]:
    err = io.StringIO()
    argv = [hook, "--node-config", str(node_config)]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    return main(argv, env, stderr=err, use_syslog=False), err.getvalue()


def test_every_installed_hook_has_an_entry_point() -> None:
    assert set(HOOKS) == {h.name for h in INSTALLED_HOOKS}


def cpu_job_squeue(bin_dir: Path, job_id: str) -> Path:
    """A stand-in ``squeue`` that reports ``job_id`` as a CPU job (slurmctld's answer)."""
    from pooling_env import squeue_line

    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "alloc").write_text(squeue_line(job_id, 0, nodes="sbx2"))
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {bin_dir / 'alloc'}\n")
    squeue.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_hooks_log_one_line_and_exit_0(hook: str, node_config: Path, tmp_path: Path) -> None:
    env = {
        "PATH": f"{cpu_job_squeue(tmp_path / 'bin', '12')}:/usr/bin:/bin",
        "SLURM_JOB_ID": "12",
        "SLURM_JOB_UID": "1000",
        "SLURM_JOB_USER": "alice",
        "SLURMD_NODENAME": "sbx2",
    }
    log = tmp_path / "hooks.log"
    rc, err = run(hook, node_config, env, log)
    assert rc == 0
    (line,) = err.splitlines()
    assert line.startswith(f"slurmpool: hook={hook} action=")
    assert "job=12" in line and "user=alice" in line
    assert log.read_text().count("\n") == 1
    if hook != "epilog-slurmctld":
        assert "node_class=sbx vgpu_count=14" in line


def test_hostile_values_cannot_forge_fields_or_lines(node_config: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_USER": 'x" action=forged\nlevel=error $(id)'}
    rc, err = run("prolog", node_config, env)
    assert rc == 0
    (line,) = err.splitlines()
    assert line.startswith("slurmpool: hook=prolog action=job-start level=info job=1 ")
    assert '"x\\" action=forged\\nlevel=error $(id)"' in line


def test_quote() -> None:
    assert quote("sbx1") == "sbx1"
    assert quote("a b") == '"a b"'
    assert quote("") == '""'
    assert json.loads(quote("é\n")) == "é\n"
    assert format_line({"a": 1, "b": "x=y"}) == 'a=1 b="x=y"'


def test_missing_node_config_fails_loudly(tmp_path: Path) -> None:
    rc, err = run("prolog", tmp_path / "none.json", {"SLURM_JOB_ID": "5"})
    assert rc == 1
    assert "action=node-config-error level=error job=5" in err
    assert "cannot read" in err


def test_usage_errors() -> None:
    err = io.StringIO()
    assert main(["carve"], {}, stderr=err, use_syslog=False) == 2
    assert "unknown hook 'carve'" in err.getvalue()
    assert main(["prolog", "--bogus"], {}, stderr=err, use_syslog=False) == 2


def test_import_is_light() -> None:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import slurmpool.hooks.__main__"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if "|" in line}
    for heavy in ("click", "jinja2", "yaml", "pynvml", "slurmpool.policy", "slurmpool.catalogue"):
        assert heavy not in modules, f"the hook imports {heavy}"


# Slow to import and unneeded by a hook (Slurm starts a fresh interpreter for each).
STARTUP_HEAVY = ("dataclasses", "typing", "pathlib", "inspect")


def _imported_by(modules: list[str], watch: tuple[str, ...]) -> list[str]:
    """Which of ``watch`` importing ``modules`` pulls in, as the installed wrapper runs
    Python (``-I -S``: no site, so nothing else is imported on the side)."""
    root = str(Path(__file__).resolve().parent.parent)
    code = (
        f"import sys; sys.path.insert(0, {root!r})\n"
        + "".join(f"import {m}\n" for m in modules)
        # From 3.13 `import collections` registers collections.abc as another name of
        # _collections_abc, which every interpreter has loaded: only a module of its
        # own is an import.
        + f"loaded = [m for m in {watch!r} if m in sys.modules]\n"
        + "abc = sys.modules.get('collections.abc')\n"
        + "if 'collections.abc' in loaded and abc is sys.modules.get('_collections_abc'):\n"
        + "    loaded.remove('collections.abc')\n"
        + "print(','.join(loaded))"
    )
    res = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    return [m for m in res.stdout.strip().split(",") if m]


def test_task_prolog_imports_no_startup_heavy_module() -> None:
    watch = (*STARTUP_HEAVY, "collections.abc", "contextlib", "subprocess", "sqlite3")
    assert _imported_by(["slurmpool.hooks.__main__", "slurmpool.pooling.jobfile"], watch) == []


def test_prolog_and_epilog_import_no_startup_heavy_module() -> None:
    modules = [
        "slurmpool.hooks.__main__",
        "slurmpool.pooling.prolog",
        "slurmpool.pooling.epilog",
        "slurmpool.pooling.requeue",
        "slurmpool.pooling.slurmjob",
        "slurmpool.accounting.enqueue",
    ]
    assert _imported_by(modules, STARTUP_HEAVY) == []


def test_prolog_common_path_runs_no_subprocess_module() -> None:
    # Imported when called (the squeue read, the text fallback), not with the modules.
    watch = ("subprocess", "slurmpool.slurm.runner", "slurmpool.slurm.parse")
    assert _imported_by(["slurmpool.hooks.__main__", "slurmpool.pooling.prolog"], watch) == []
