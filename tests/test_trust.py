"""What root runs, imports and writes must be root's alone: the rules, then install
and doctor on a node staged with each unsafe case (a writable venv, a writable
editable checkout, a writable parent directory, a file owned by another user)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import needs
import pytest
from slurm_node import NODE_SLURM, SITE_NEEDS

from slurmpool.configgen.render import generate
from slurmpool.doctor import DoctorOptions, run_doctor
from slurmpool.hookpath import resolve_import_path
from slurmpool.install import (
    InstallError,
    apply,
    plan_install,
    read_manifest,
    target_for_policy,
)
from slurmpool.policy.loader import load_policy
from slurmpool.policy.model import Policy
from slurmpool.trust import RootPath, Untrusted, check

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sandbox.yaml"
NOBODY = 65534


@pytest.fixture(autouse=True)
def _as_root() -> None:
    needs.root("the files staged here are root's, and some are given to another user")


@pytest.fixture
def top(shared_dir: Path) -> Path:
    return shared_dir


def tree(*paths: Path) -> None:
    for p in paths:
        p.mkdir(parents=True, exist_ok=True)
        p.chmod(0o755)


def culprits(problems: list[Untrusted]) -> list[str]:
    return [u.culprit for u in problems]


# -- the rules ----------------------------------------------------------------------


def test_a_root_owned_tree_nobody_else_can_write_is_trusted(top: Path) -> None:
    tree(top / "a" / "b")
    (top / "a" / "b" / "m.py").write_text("")
    assert check([RootPath("x", str(top / "a"), "tree")]) == []


def test_a_writable_directory_is_named_with_its_mode_and_the_fix(top: Path) -> None:
    tree(top / "a")
    (top / "a").chmod(0o777)
    [u] = check([RootPath("the state dir", str(top / "a"))])
    assert (u.culprit, u.mode, u.owner_ok) == (str(top / "a"), 0o777, True)
    assert u.text() == f"the state dir {top}/a has mode 0777, writable by group or others"
    assert u.fix() == f"chmod go-w {top}/a"


def test_a_group_writable_parent_is_named_on_the_way(top: Path) -> None:
    tree(top / "a" / "b")
    (top / "a").chmod(0o775)
    [u] = check([RootPath("the run dir", str(top / "a" / "b"))])
    assert u.culprit == str(top / "a")
    assert u.text().startswith(f"the run dir {top}/a/b, on the way to it: {top}/a has mode 0775")


def test_another_owner_is_named_with_chown_as_the_fix(top: Path) -> None:
    tree(top / "a")
    os.chown(top / "a", NOBODY, NOBODY)
    [u] = check([RootPath("the hooks dir", str(top / "a"))])
    assert not u.owner_ok and u.mode is None
    assert "is not owned by root" in u.text()
    assert u.fix() == f"chown root:root {top}/a"


def test_a_sticky_world_writable_directory_may_lie_on_the_way_but_not_be_the_path(
    top: Path,
) -> None:
    tree(top / "tmp" / "ours")
    (top / "tmp").chmod(0o1777)
    assert check([RootPath("x", str(top / "tmp" / "ours"))]) == []
    assert culprits(check([RootPath("x", str(top / "tmp"))])) == [str(top / "tmp")]


def test_each_link_followed_counts_as_the_way(top: Path) -> None:
    tree(top / "open", top / "safe")
    (top / "open").chmod(0o777)
    (top / "open" / "python3").write_text("")
    (top / "safe" / "python").symlink_to(top / "open" / "python3")
    assert culprits(check([RootPath("x", str(top / "safe" / "python"))])) == [str(top / "open")]


def test_a_path_root_creates_later_is_judged_by_the_directory_it_goes_in(top: Path) -> None:
    tree(top / "run")
    path = RootPath("the run dir", str(top / "run" / "slurmpool"), may_be_missing=True)
    assert check([path]) == []
    (top / "run").chmod(0o777)
    assert culprits(check([path])) == [str(top / "run")]


def test_children_and_trees_are_judged_entry_by_entry(top: Path) -> None:
    tree(top / "lib" / "pkg" / "sub")
    shadow = top / "lib" / "json.py"  # would shadow the standard json for root
    shadow.write_text("")
    os.chown(shadow, NOBODY, NOBODY)
    deep = top / "lib" / "pkg" / "sub" / "mod.py"
    deep.write_text("")
    deep.chmod(0o666)
    lib = str(top / "lib")
    assert check([RootPath("x", lib)]) == []
    assert culprits(check([RootPath("x", lib, "children")])) == [str(shadow)]
    assert culprits(check([RootPath("x", lib, "tree")])) == [str(shadow), str(deep)]


def test_a_culprit_is_named_once_for_the_first_path_it_is_on_the_way_to(top: Path) -> None:
    tree(top / "a" / "b", top / "a" / "c")
    (top / "a").chmod(0o777)
    problems = check([RootPath("b", str(top / "a" / "b")), RootPath("c", str(top / "a" / "c"))])
    assert [(u.role, u.culprit) for u in problems] == [("b", str(top / "a"))]


# -- the hooks' import path, resolved at install ----------------------------------------


def venv_with_checkout(top: Path) -> tuple[Path, Path]:
    """A venv whose site-packages has an editable install's .pth line naming a checkout
    of slurmpool (with pynvml beside it): (the venv's python, the checkout)."""
    import pynvml

    import slurmpool

    venv = top / "parent" / "venv"
    tree(venv.parent)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    checkout = top / "checkout"
    shutil.copytree(Path(slurmpool.__file__).parent, checkout / "slurmpool")
    shutil.copy(pynvml.__file__, checkout / "pynvml.py")
    checkout.chmod(0o755)
    python = venv / "bin" / "python"
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "__editable__.slurmpool.pth").write_text(f"{checkout}\n")
    return python, checkout


def test_the_import_path_is_resolved_from_the_venv_and_its_pth_lines(top: Path) -> None:
    python, checkout = venv_with_checkout(top)
    path = resolve_import_path(str(python))
    assert str(checkout) in path.back
    assert path.packages["slurmpool"] == str(checkout / "slurmpool" / "__init__.py")
    assert path.packages["pynvml"] == str(checkout / "pynvml.py")
    assert check(path.root_paths()) == []


# -- install and doctor on a staged node ------------------------------------------------


def policy_at(node: Path) -> Policy:
    policy = load_policy(EXAMPLE, variables={"root": str(node)})
    conf = Path(policy.paths.slurm_config_dir) / "slurm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("ClusterName=sandbox\n" + SITE_NEEDS)
    return policy


def install(policy: Policy, python: Path) -> list[str]:
    target = target_for_policy(
        policy, systemd_dir=policy.paths.state_dir + "-systemd", python=str(python)
    )
    return apply(plan_install(target, generate(policy, installed=NODE_SLURM).files))


def refusal(policy: Policy, python: Path) -> str:
    with pytest.raises(InstallError) as e:
        install(policy, python)
    assert not Path(policy.paths.hooks_dir).exists()  # nothing written
    return str(e.value)


@pytest.fixture
def staged(top: Path, tmp_path: Path) -> tuple[Policy, Path, Path]:
    python, checkout = venv_with_checkout(top)
    return policy_at(tmp_path / "node"), python, checkout


def test_install_writes_the_resolved_path_into_the_wrappers(
    staged: tuple[Policy, Path, Path],
) -> None:
    policy, python, checkout = staged
    install(policy, python)
    wrapper = (Path(policy.paths.hooks_dir) / "prolog").read_text()
    boot = wrapper.split("SLURMPOOL_BOOT='")[1].split("'\n")[0]
    # The venv's site-packages, then the checkout its .pth names; nothing read at job time.
    assert f'/site-packages", "{checkout}"])' in boot
    assert "import site" not in boot and ".pth" not in boot
    manifest = read_manifest(Path("/"), policy.paths.state_dir)
    assert manifest is not None and manifest.hook_import_path is not None
    assert manifest.hook_import_path.packages["slurmpool"].startswith(str(checkout))


@pytest.mark.parametrize(
    ("case", "unsafe", "culprit", "fix"),
    [
        ("writable venv", "parent/venv:0777", "parent/venv", "chmod go-w"),
        ("writable checkout", "checkout:0777", "checkout", "chmod go-w"),
        ("writable parent", "parent:0775", "parent", "chmod go-w"),
        ("another owner", "checkout/slurmpool/hooks/__main__.py:nobody", "", "chown root:root"),
    ],
)
def test_install_and_doctor_refuse_what_others_can_change(
    staged: tuple[Policy, Path, Path], top: Path, case: str, unsafe: str, culprit: str, fix: str
) -> None:
    policy, python, _ = staged
    install(policy, python)  # safe: installs
    rel, how = unsafe.split(":")
    target = top / rel
    if how == "nobody":
        os.chown(target, NOBODY, NOBODY)
    else:
        target.chmod(int(how, 8))
    culprit_path = top / (culprit or rel)

    report = run_doctor(doctor_options(policy))
    [finding] = [f for f in report.findings if f.check == "trust"]
    assert not finding.ok, case
    assert str(culprit_path) in finding.message
    assert finding.fix == f"{fix} {culprit_path}"

    shutil.rmtree(policy.paths.hooks_dir)
    msg = refusal(policy, python)
    assert f"{culprit_path} " in msg and f"fix: {fix} {culprit_path}" in msg


@pytest.mark.parametrize(
    ("which", "role"),
    [("state_dir", "the state dir (it holds the hook log)"), ("run_dir", "the run dir")],
)
def test_install_refuses_a_state_or_run_dir_others_can_write(
    staged: tuple[Policy, Path, Path], which: str, role: str
) -> None:
    policy, python, _ = staged
    d = Path(getattr(policy.paths, which))
    tree(d)
    d.chmod(0o777)
    assert f"{role} {d} has mode 0777, writable by group or others" in refusal(policy, python)


def doctor_options(policy: Policy) -> DoctorOptions:
    return DoctorOptions(
        node_config=os.path.join(policy.paths.slurm_config_dir, "node-config.json"),
        node="sbx1",
        check_gpus=False,
    )


def test_doctor_passes_a_safe_install_and_names_what_it_checked(
    staged: tuple[Policy, Path, Path],
) -> None:
    policy, python, _ = staged
    install(policy, python)
    [finding] = [f for f in run_doctor(doctor_options(policy)).findings if f.check == "trust"]
    assert finding.ok, finding.message
    assert f"the interpreter {python}" in finding.message
