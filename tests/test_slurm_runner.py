"""The command runner, against small real programs written into a temporary search path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmpool.slurm.runner import (
    Runner,
    SlurmCommandError,
    SlurmCommandNotFound,
    SlurmCommandTimeout,
)
from slurmpool.slurm.version import detect_version


def tool(bin_dir: Path, name: str, script: str) -> Path:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def test_resolves_once_to_absolute_path(bin_dir: Path) -> None:
    exe = tool(bin_dir, "scontrol", 'echo "slurm 23.02.7"\n')
    r = Runner(search_path=[str(bin_dir)])
    assert r.which("scontrol") == str(exe)
    exe.unlink()
    assert r.which("scontrol") == str(exe)  # cached


def test_run_returns_output_and_passes_env(bin_dir: Path) -> None:
    tool(bin_dir, "show", 'echo "conf=$SLURM_CONF x=$X"; echo err >&2\n')
    r = Runner(env={"X": "1"}, search_path=[str(bin_dir)], slurm_conf="/etc/x/slurm.conf")
    res = r.run("show")
    assert res.ok
    assert res.stdout == "conf=/etc/x/slurm.conf x=1\n"
    assert res.stderr == "err\n"
    assert res.argv == (str(bin_dir / "show"),)


def test_failure_carries_argv_status_and_stderr(bin_dir: Path) -> None:
    tool(bin_dir, "sbatch", 'echo "sbatch: error: vgpu:0 asks for nothing" >&2; exit 1\n')
    r = Runner(search_path=[str(bin_dir)])
    with pytest.raises(SlurmCommandError) as info:
        r.run("sbatch", "--gres=vgpu:0", "--wrap", "true")
    err = info.value
    assert err.argv == (str(bin_dir / "sbatch"), "--gres=vgpu:0", "--wrap", "true")
    assert err.returncode == 1
    assert "asks for nothing" in err.stderr
    assert "exited with status 1" in str(err)
    assert r.run("sbatch", check=False).returncode == 1


def test_timeout(bin_dir: Path) -> None:
    tool(bin_dir, "slow", "exec /bin/sleep 5\n")
    r = Runner(search_path=[str(bin_dir)])
    with pytest.raises(SlurmCommandTimeout, match=r"timed out after 0\.2 s"):
        r.run("slow", timeout=0.2)


def test_not_found_names_the_search_path(tmp_path: Path) -> None:
    r = Runner(search_path=[str(tmp_path)])
    assert not r.has("scontrol")
    with pytest.raises(SlurmCommandNotFound, match=str(tmp_path)):
        r.run("scontrol", "ping")


def test_detect_version(bin_dir: Path) -> None:
    tool(bin_dir, "scontrol", 'echo "slurm-wlm 22.05.8"\n')
    v = detect_version(Runner(search_path=[str(bin_dir)]))
    assert (v.major, v.minor, v.micro) == (22, 5, 8)
    assert not v.features.scontrol_json


def test_child_env_is_explicit(bin_dir: Path) -> None:
    os.environ["SLURMPOOL_TEST_LEAK"] = "1"
    try:
        tool(bin_dir, "envdump", 'echo "${SLURMPOOL_TEST_LEAK:-unset}"\n')
        assert Runner(search_path=[str(bin_dir)]).run("envdump").stdout == "unset\n"
    finally:
        del os.environ["SLURMPOOL_TEST_LEAK"]


def test_the_runner_loads_no_parser() -> None:
    """A hook that only runs a command (a requeue) pays for the runner alone."""
    import subprocess
    import sys

    import slurmpool.slurm as pkg

    root = str(Path(pkg.__file__).resolve().parents[2])
    code = (
        f"import sys; sys.path.insert(0, {root!r})\n"
        "import slurmpool.slurm.runner\n"
        "print(sorted(m for m in ('slurmpool.slurm.parse', 'slurmpool.slurm.version')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# -- streaming ------------------------------------------------------------------


def test_stream_drains_a_stderr_larger_than_the_pipe(bin_dir: Path) -> None:
    """A child that writes megabytes to stderr before its output never stalls: the
    lines all arrive and the error keeps the end of stderr."""
    tool(
        bin_dir,
        "sacct",
        "i=0; while [ $i -lt 20000 ]; do echo 'warning: 0123456789012345678901234567' >&2;"
        " i=$((i+1)); done\necho 'last words' >&2\nprintf '1|a\\n2|b\\n'\nexit 3\n",
    )
    r = Runner(search_path=[str(bin_dir)], timeout=120)
    got: list[str] = []
    with pytest.raises(SlurmCommandError) as info:
        got.extend(r.stream("sacct", "-n"))
    assert got == ["1|a\n", "2|b\n"]
    err = info.value
    assert not isinstance(err, SlurmCommandTimeout)
    assert err.returncode == 3 and err.stderr.endswith("last words\n")
    assert len(err.stderr) <= 64 * 1024


def test_stream_yields_lines_and_ends_cleanly(bin_dir: Path) -> None:
    tool(bin_dir, "sacct", 'echo "conf=$SLURM_CONF"; echo two\n')
    r = Runner(search_path=[str(bin_dir)], slurm_conf="/etc/x.conf")
    assert list(r.stream("sacct")) == ["conf=/etc/x.conf\n", "two\n"]


def test_stream_times_out_and_kills_the_child(bin_dir: Path) -> None:
    tool(bin_dir, "sacct", "echo first\nexec /bin/sleep 600\n")
    r = Runner(search_path=[str(bin_dir)])
    got: list[str] = []
    with pytest.raises(SlurmCommandTimeout, match=r"timed out after 0\.5 s"):
        got.extend(r.stream("sacct", timeout=0.5))
    assert got == ["first\n"]


def test_a_stream_left_early_kills_the_child(bin_dir: Path) -> None:
    tool(bin_dir, "sacct", "echo $$\nexec /bin/sleep 600\n")
    lines = Runner(search_path=[str(bin_dir)]).stream("sacct")
    pid = int(next(lines))
    lines.close()  # the caller stops reading
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


def test_stream_reports_a_missing_program(bin_dir: Path) -> None:
    with pytest.raises(SlurmCommandNotFound):
        list(Runner(search_path=[str(bin_dir)]).stream("sacct"))
