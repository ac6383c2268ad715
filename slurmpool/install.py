"""Installing slurmpool into a node's Slurm, and taking it out again exactly.

``plan_install`` computes every file change as data (path, old bytes, new
bytes, mode); ``apply`` writes them atomically; ``Plan.diff`` is what
``--dry-run`` prints.  A plan that changes nothing is empty, so a second
install says "nothing to do".

What install writes, all under ``root`` (``/`` on a real node):

* hook wrappers ``<hooks_dir>/prolog|task-prolog|epilog|epilog-slurmctld``,
  shell scripts that run the site's original hook and slurmpool's hook in a
  fixed order (:data:`HOOKS`) and propagate failures;
* the generated files (``slurmpool.conf``, ``gres.conf``, ``cgroup.conf``,
  ``job_submit.lua``, ``node-config.json``) into the Slurm config directory;
* the state directory (root-owned, 0711: others may traverse it to reach
  their own job's export file, not list it) with the install manifest;
* the ``slurmpool-monitord.service`` unit (installed, not enabled);
* ``slurm.conf``: one ``Include <config_dir>/slurmpool.conf`` line appended,
  and each site line slurmpool takes over (``Prolog=``, ``Epilog=``,
  ``TaskProlog=``, ``EpilogSlurmctld=``, and any other key the fragment
  sets) commented out behind the :data:`DISABLED_PREFIX` marker.

The manifest records the original bytes and mode of every file install
touched; ``plan_uninstall`` restores them byte for byte and removes what
install created.  If an admin edited ``slurm.conf`` after install, uninstall
reverses only slurmpool's own edits (marker lines and the Include line) and
keeps the rest.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import hashlib
import json
import os
import stat
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from slurmpool.configgen.files import (
    CGROUP_CONF,
    GRES_CONF,
    JOB_SUBMIT_LUA,
    SITE_JOB_SUBMIT_LUA,
    SLURM_FILES,
    SLURM_FRAGMENT,
)
from slurmpool.configgen.nodeconfig import NODE_CONFIG_NAME, SYSTEMD_DIR
from slurmpool.configgen.plan import anchor_name
from slurmpool.hookpath import (
    HookImportPath,
    HookPathError,
    front_entries,
    resolve_import_path,
)
from slurmpool.slurm.cgroupconf import edit_cgroup_conf
from slurmpool.slurm.conf import scan_conf, strip_comment
from slurmpool.slurm.conflists import is_list_key, items, merge
from slurmpool.slurm.gresconf import PooledGroup, edit_gres_conf
from slurmpool.slurm.includes import MissingInclude, gather, walk
from slurmpool.slurm.marks import DISABLED_PREFIX, marked_lines, unmark
from slurmpool.slurm.siteneeds import (
    TASK_CGROUP_CHOICES,
    Needs,
    Setting,
    SiteSetting,
    TaskCgroup,
    settings_of,
)
from slurmpool.slurm.siteneeds import check as check_site
from slurmpool.slurm.sitenodes import edit_nodes, policy_definitions
from slurmpool.trust import RootPath, Untrusted, directories_on_the_way
from slurmpool.trust import check as check_trust

if TYPE_CHECKING:
    from slurmpool.policy.model import Policy
    from slurmpool.slurm.version import SlurmVersion

MANIFEST_NAME = "install-manifest.json"
MANIFEST_SCHEMA = 1
INCLUDE_MARKER = "#slurmpool-include"
UNIT_NAME = "slurmpool-monitord.service"
HOOK_LOG_NAME = "hooks.log"
# Traversable, not listable: the TaskProlog (the job's user) reads jobs/<id>.env.
STATE_DIR_MODE = 0o700
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Order = Literal["site-first", "slurmpool-first", "both"]
# What install writes on a machine: the shared Slurm configuration (controller), what
# one node needs (node), or both on one machine.
Role = Literal["controller", "node", "both"]
ROLES: tuple[Role, ...] = ("controller", "node", "both")
UNIT_WANTED_BY = "multi-user.target.wants"  # the monitord unit's WantedBy, enabled


@dataclass(frozen=True, slots=True)
class HookSpec:
    name: str  # file name in hooks_dir and argument of `python -m slurmpool.hooks`
    slurm_key: str  # slurm.conf key
    order: Order
    order_text: str
    on: Literal["controller", "node"] = "node"  # the daemon that runs it: slurmctld, slurmd


HOOKS: tuple[HookSpec, ...] = (
    HookSpec(
        "prolog",
        "Prolog",
        "site-first",
        "the site's Prolog first, then slurmpool's; if the site's fails, its status is "
        "returned and slurmpool's is not run.",
    ),
    HookSpec(
        "task-prolog",
        "TaskProlog",
        "both",
        "the site's TaskProlog, then slurmpool's; both always run and their outputs are "
        "concatenated (slurmpool's exports come last and win); the first failure is returned.",
    ),
    HookSpec(
        "epilog",
        "Epilog",
        "slurmpool-first",
        "slurmpool's Epilog first (releases GPUs), then the site's, which always runs; "
        "slurmpool's failure is returned, else the site's status.",
    ),
    HookSpec(
        "epilog-slurmctld",
        "EpilogSlurmctld",
        "slurmpool-first",
        "slurmpool's EpilogSlurmctld first, then the site's, which always runs; "
        "slurmpool's failure is returned, else the site's status.",
        on="controller",
    ),
)
HOOK_KEYS = {h.slurm_key.lower(): h for h in HOOKS}


class InstallError(RuntimeError):
    """Install or uninstall cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class InstallTarget:
    """Where things go on the node (absolute paths as the node sees them)."""

    slurm_conf: str
    config_dir: str
    hooks_dir: str
    state_dir: str
    systemd_dir: str = SYSTEMD_DIR
    python: str = sys.executable
    python_path: str | None = None  # PYTHONPATH for the hooks (slurmpool not installed in python)
    timeout_bin: str = "/usr/bin/timeout"
    path: str = DEFAULT_PATH
    hook_timeouts: Mapping[str, int] = field(default_factory=dict)  # hook name -> seconds
    run_dir: str | None = None  # the policy's paths.run_dir, where the hooks write
    mps_control: str | None = None  # the policy's paths.mps_control, which the prolog runs
    cgroup_plugin: str = "autodetect"  # the policy's cgroup_plugin
    policy_source: str = "the policy"  # the policy file, for messages
    node_groups: tuple[PooledGroup, ...] = ()  # whose GPUs slurmpool's gres.conf describes

    @property
    def node_config(self) -> str:
        return os.path.join(self.config_dir, NODE_CONFIG_NAME)

    @property
    def manifest(self) -> str:
        return os.path.join(self.state_dir, MANIFEST_NAME)

    @property
    def fragment(self) -> str:
        return os.path.join(self.config_dir, SLURM_FRAGMENT)

    @property
    def include_line(self) -> str:
        """The line install appends to slurm.conf.  Relative where slurmpool.conf is
        next to slurm.conf: on a configless site slurmctld ships an included file to
        the nodes only when it is named so (tests/data/probe-configless.sh: an
        absolute name leaves every configless slurmd without it, and it stops)."""
        same_dir = os.path.dirname(self.fragment) == os.path.dirname(self.slurm_conf)
        name = SLURM_FRAGMENT if same_dir else self.fragment
        return f"Include {name} {INCLUDE_MARKER}"


def target_for_policy(
    policy: Policy,
    *,
    slurm_conf: str | None = None,
    systemd_dir: str = SYSTEMD_DIR,
    python: str = sys.executable,
    python_path: str | None = None,
    timeout_bin: str = "/usr/bin/timeout",
) -> InstallTarget:
    """The install target a policy describes (``slurm.conf`` defaults to its config dir)."""
    config_dir = policy.paths.slurm_config_dir.rstrip("/") or "/"
    return InstallTarget(
        slurm_conf=slurm_conf or os.path.join(config_dir, "slurm.conf"),
        config_dir=config_dir,
        hooks_dir=policy.paths.hooks_dir,
        state_dir=policy.paths.state_dir,
        systemd_dir=systemd_dir,
        python=python,
        python_path=python_path,
        timeout_bin=timeout_bin,
        run_dir=policy.paths.run_dir,
        mps_control=policy.paths.mps_control,
        cgroup_plugin=policy.cgroup_plugin,
        policy_source=policy.source,
        node_groups=tuple(
            PooledGroup(
                g.name,
                g.nodes,
                any(gpu.mode.mig_enabled for gpu in g.gpus),
                anchor_name(g) if g.publishes_fit else None,
            )
            for g in policy.node_groups
        ),
        hook_timeouts={
            "prolog": policy.hooks.prolog_timeout_s,
            "task-prolog": policy.hooks.task_prolog_timeout_s,
            "epilog": policy.hooks.epilog_timeout_s,
            "epilog-slurmctld": policy.hooks.epilog_slurmctld_timeout_s,
        },
    )


def why_others_cannot_run(path: str) -> str | None:
    """Why a user who is neither root nor the owner could not execute ``path``, naming
    the directory or file in the way; None when any user can.

    The kernel walks the literal path first (``/root/venv/bin/python`` needs search
    permission on ``/root`` even though the venv's python links to ``/usr/bin``), then
    each link it follows: every directory on the way must be searchable, the final
    file executable.
    """
    literal = Path(path)
    if not literal.is_absolute():
        return f"{path} is not an absolute path"
    try:
        real = literal.resolve(strict=True)
        way = directories_on_the_way(literal)
    except OSError as e:
        return f"{path} cannot be resolved ({e.strerror or e})"
    for d in way:
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"directory {d} (mode {stat.S_IMODE(mode):04o}) is not searchable by other users"
    mode = real.stat().st_mode
    if not mode & stat.S_IXOTH:
        return f"{real} (mode {stat.S_IMODE(mode):04o}) is not executable by other users"
    return None


def check_interpreter(python: str) -> None:
    """Refuse an interpreter job users cannot run, saying what is in the way and the fix."""
    why = why_others_cannot_run(python)
    if why is not None:
        raise InstallError(
            f"job users cannot run the hooks' interpreter {python}: {why}. The TaskProlog "
            "runs as each job's user, so every job would fail (TaskProlog status 126). Fix: "
            "install slurmpool into a venv every user can reach (sudo scripts/setup-host "
            "makes /opt/slurmpool) and pass --python /opt/slurmpool/bin/python, or make "
            "that directory searchable by others (chmod o+x)"
        )


def others_can_run(path: str) -> bool:
    """True when any user can execute ``path`` (see :func:`why_others_cannot_run`)."""
    return why_others_cannot_run(path) is None


def root_paths(target: InstallTarget, import_path: HookImportPath) -> list[RootPath]:
    """Everything the root hooks run, import, read or write on a node of ``target``."""
    paths = import_path.root_paths()
    paths.append(RootPath("the timeout program", target.timeout_bin))
    if target.mps_control is not None:
        paths.append(RootPath("the MPS control program", target.mps_control, may_be_missing=True))
    for role, path in (
        ("the hooks dir", target.hooks_dir),
        ("the Slurm config dir", target.config_dir),
        ("the state dir (it holds the hook log)", target.state_dir),
        ("the run dir", target.run_dir),
    ):
        if path is not None:
            paths.append(RootPath(role, path, may_be_missing=True))
    return paths


def refuse_untrusted(problems: Sequence[Untrusted]) -> None:
    """Refuse to install hooks that root would run where others can change things."""
    if problems:
        raise InstallError(
            "the hooks run as root on every job start, but others can change what they "
            "would run, import or write:\n"
            + "\n".join(f"  - {u.text()}\n    fix: {u.fix()}" for u in problems)
        )


# --- plans ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str  # as the node sees it (without root)
    old: bytes | None  # None: does not exist
    new: bytes | None  # None: delete
    mode: int = 0o644
    owner: tuple[int, int] | None = None  # (uid, gid) to keep; None: whoever writes it

    @property
    def action(self) -> str:
        if self.old is None:
            return "create"
        if self.new is None:
            return "delete"
        return "modify"


@dataclass(frozen=True, slots=True)
class DirChange:
    path: str
    action: Literal["create", "remove", "fix-mode"]
    mode: int = 0o755
    owner_root: bool = False


@dataclass(frozen=True, slots=True)
class LinkChange:
    path: str  # the symlink, as the node sees it
    target: str  # what it points to
    action: Literal["create", "remove"] = "create"


@dataclass(frozen=True)
class Plan:
    root: Path
    dirs: tuple[DirChange, ...] = ()
    files: tuple[FileChange, ...] = ()
    notes: tuple[str, ...] = ()
    changes: tuple[LineChange, ...] = ()  # the site's lines install changes, and why
    links: tuple[LinkChange, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.dirs and not self.files and not self.links

    def real(self, path: str) -> Path:
        return under(self.root, path)

    def summary(self) -> list[str]:
        lines = [f"{d.action} directory {d.path} (mode {d.mode:04o})" for d in self.dirs]
        lines += [f"{f.action} {f.path}" for f in self.files]
        lines += [f"{link.action} link {link.path} -> {link.target}" for link in self.links]
        return lines

    def diff(self) -> str:
        """A unified diff of every file change (``--dry-run`` output)."""
        out: list[str] = []
        for d in self.dirs:
            out.append(f"# {d.action} directory {d.path} (mode {d.mode:04o})\n")
        for f in self.files:
            old = _text_lines(f.old)
            new = _text_lines(f.new)
            a = "/dev/null" if f.old is None else f"a{f.path}"
            b = "/dev/null" if f.new is None else f"b{f.path}"
            out.extend(difflib.unified_diff(old, new, a, b))
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
        for link in self.links:
            out.append(f"# {link.action} link {link.path} -> {link.target}\n")
        return "".join(out)


def _text_lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    return data.decode(errors="replace").splitlines(keepends=True)


def under(root: Path, path: str) -> Path:
    """``path`` (absolute, as the node sees it) inside the staging ``root``."""
    if not os.path.isabs(path):
        raise InstallError(f"{path!r} is not an absolute path")
    return root / path.lstrip("/")


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _owner(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_uid, st.st_gid)


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


# --- slurm.conf editing ---------------------------------------------------


def pristine_conf(text: str, target: InstallTarget) -> str:
    """``slurm.conf`` text with slurmpool's edits reversed (the site's own lines)."""
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        if body.strip() == target.include_line or (
            INCLUDE_MARKER in body
            and strip_comment(body) in (f"Include {target.fragment}", f"Include {SLURM_FRAGMENT}")
        ):
            continue  # this install's line, or an earlier version's
        out.append(line)
    return unmark("".join(out))


@dataclass(frozen=True, slots=True)
class LineChange:
    """One line of a site file that install changes, and why (``--dry-run`` prints it)."""

    path: str
    line: int | None  # 1-based; None: the whole file
    before: str | None  # None: a line added
    reason: str

    def explain(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.reason}"
        if self.before is None:
            return f"{self.path} line {self.line} (new): {self.reason}"
        return f"{self.path} line {self.line} ({self.before.strip()!r}): {self.reason}"


@dataclass(frozen=True)
class ConfEdit:
    text: str
    site_hooks: dict[str, list[str]]  # slurm key -> the site's hook programs
    disabled: list[str]  # site lines commented out
    notes: list[str]
    fragment: str  # slurmpool's fragment: list settings joined with the site's, takeovers
    changes: list[LineChange]
    refusals: list[str]  # site lines that contradict the pool (then nothing else is set)
    included: dict[str, str] = field(default_factory=dict)  # the site's included files


def edit_conf(
    pristine: str,
    fragment: str,
    target: InstallTarget,
    needs: Needs | None = None,
    included: Mapping[str, str] | None = None,
) -> ConfEdit:
    """Set aside the site lines slurmpool takes over and append the Include line.

    ``pristine``: the site's slurm.conf; ``included``: the files it pulls in with
    ``Include`` (path -> text, :mod:`slurmpool.slurm.includes`), read with it in
    Slurm's order.  A list setting both set (``GresTypes``, ``PrologFlags``...,
    :mod:`slurmpool.slurm.conflists`) keeps the site's items: the fragment's line gets
    the site's list with slurmpool's items added.  What slurmpool needs of the site's
    own settings (:mod:`slurmpool.slurm.siteneeds`, ``needs``) is checked, and the
    site's definitions of the policy's nodes and partitions edited
    (:mod:`slurmpool.slurm.sitenodes`): a contradiction is one of ``refusals``, naming
    the line.  Each line set aside is commented out with :data:`DISABLED_PREFIX`
    (uninstall puts it back)."""
    conf = target.slurm_conf
    texts = {conf: pristine, **(included or {})}

    site = _site_settings(target, pristine, included or {})
    verdict = check_site(site, needs or Needs(None, target.hook_timeouts), conf)
    refusals = list(verdict.refusals)
    takeovers = {s.key.lower(): s for s in verdict.settings}
    fragment_lines = [
        line
        for line in scan_conf(fragment)
        if line.key is not None and line.key.lower() not in _NOT_TAKEN
    ]
    ours = {line.key.lower(): line.value or "" for line in fragment_lines if line.key}
    joined: dict[str, str] = {}
    reasons: dict[str, str] = {}  # lower key -> why the site's line is set aside
    for key, spec in HOOK_KEYS.items():
        wrapper = os.path.join(target.hooks_dir, spec.name)
        reasons[key] = f"runs inside slurmpool's wrapper {wrapper}: {spec.order_text}"
    for key, value in ours.items():
        mine = site.get(key)
        if mine is None or key in HOOK_KEYS:
            continue
        if is_list_key(key):
            merged = merge(key, mine.value, value)
            if merged.conflicts:
                refusals.append(
                    f"{mine.where(conf)}: {'; '.join(merged.conflicts)}; change the site's "
                    "line to slurmpool's value, or tell slurmpool's policy otherwise"
                )
            joined[key] = merged.value
            reasons[key] = (
                f"the site's {mine.value} is kept: {target.fragment} sets "
                f"{mine.key}={merged.value} (slurmpool adds {', '.join(merged.added) or 'nothing'})"
            )
        elif mine.value.strip().lower() != value.strip().lower():
            refusals.append(
                f"{mine.where(conf)}: slurmpool needs {mine.key}={value}; set it so, or "
                "tell slurmpool's policy otherwise"
            )
        else:
            reasons[key] = f"{target.fragment} sets the same {mine.key}={value}"
    for key, setting in takeovers.items():
        reasons[key] = f"{target.fragment} sets {setting.key}={setting.value}: {setting.reason}"

    site_hooks = site_hooks_of(site)
    disabled: list[str] = []
    changes: list[LineChange] = []
    nodes, partitions = policy_definitions(
        fragment, [(g.name, g.nodes, g.anchor) for g in target.node_groups]
    )
    edited: dict[str, str] = {}
    remaining = fragment  # the fragment less the nodes and partitions the site defines
    for path, text in texts.items():
        mine_changes: list[LineChange] = []
        scanned = {line.index: line for line in scan_conf(text)}
        out = []
        for i, line in enumerate(text.splitlines(keepends=True)):
            info = scanned.get(i)
            name = info.key.lower() if info is not None and info.key is not None else None
            if name is None or name not in reasons:
                out.append(line)
                continue
            last = site[name].file == path and site[name].line == i + 1
            # An earlier line of a key set again later: Slurm reads the last; aside too.
            why = reasons[name] if last or name in HOOK_KEYS else "a later line sets it"
            disabled.append(line.rstrip("\n"))
            mine_changes.append(LineChange(path, i + 1, line, f"set aside: {why}"))
            out.append(DISABLED_PREFIX + line)
        defined = edit_nodes(
            "".join(out), remaining, nodes, partitions, path=path, policy=target.policy_source
        )
        refusals += defined.refusals
        remaining = defined.fragment
        changes += [_shifted(c, defined.inserted) for c in mine_changes]
        changes += [LineChange(path, c.line, c.before, c.reason) for c in defined.changes]
        edited[path] = defined.text
    if refusals:
        return ConfEdit(pristine, {}, [], [], fragment, [], refusals)
    changes.sort(key=lambda c: (c.path != conf, c.path, c.line or 0))
    text = edited.pop(conf)
    if text and not text.endswith("\n"):
        text += "\n"
    text += target.include_line + "\n"
    changes.insert(
        sum(1 for c in changes if c.path == conf),
        LineChange(
            conf,
            text.count("\n"),
            None,
            f"{target.include_line!r} pulls in {target.fragment}: slurmpool's settings, "
            "GRES, nodes and partitions",
        ),
    )
    notes = list(verdict.notes)
    fragment = _with_settings(remaining, joined, list(takeovers.values()))
    return ConfEdit(text, site_hooks, disabled, notes, fragment, changes, [], edited)


def site_hooks_of(site: Mapping[str, SiteSetting]) -> dict[str, list[str]]:
    """The site's own hook programs by slurm.conf key (the last line's, as Slurm reads)."""
    out: dict[str, list[str]] = {}
    for key, spec in HOOK_KEYS.items():
        if key in site:
            out[spec.slurm_key] = [p.strip() for p in site[key].value.split(",") if p.strip()]
    return out


def site_hooks_in(root: Path, target: InstallTarget) -> dict[str, list[str]]:
    """The site's own hooks as ``target.slurm_conf`` (and what it includes) name them
    now, slurmpool's edits undone: what a node's wrappers should run."""
    data = _read(under(root, target.slurm_conf))
    if data is None:
        raise InstallError(f"{target.slurm_conf}: no slurm.conf there")
    pristine = pristine_conf(data.decode(errors="replace"), target)
    return site_hooks_of(_site_settings(target, pristine, _site_includes(root, target, pristine)))


def _site_settings(
    target: InstallTarget, pristine: str, included: Mapping[str, str]
) -> dict[str, SiteSetting]:
    """The site's settings in slurm.conf and what it includes, as Slurm reads them."""
    texts = {target.slurm_conf: pristine, **included}
    return settings_of(walk(target.slurm_conf, texts, _ours(target)))


def _shifted(change: LineChange, inserted: Sequence[int]) -> LineChange:
    """``change`` (of a site line) numbered as in the text with lines ``inserted``."""
    if change.line is None:
        return change
    before = sum(1 for i in inserted if i < change.line - 1)
    return dataclasses.replace(change, line=change.line + before)


# Fragment lines that are not settings the site could also set.
_NOT_TAKEN = ("nodename", "partitionname", "include")


def _with_settings(fragment: str, joined: Mapping[str, str], added: Sequence[Setting]) -> str:
    """``fragment`` with the value of each list setting in ``joined`` replaced, and the
    settings ``added`` after its last setting line (before its nodes)."""
    if not joined and not added:
        return fragment
    scanned = {line.index: line for line in scan_conf(fragment)}
    out = []
    for i, line in enumerate(fragment.splitlines(keepends=True)):
        info = scanned.get(i)
        if info is not None and info.key is not None and info.key.lower() in joined:
            end = "\n" if line.endswith("\n") else ""
            line = f"{info.key}={joined[info.key.lower()]}{end}"
        out.append(line)
    if added:
        last = max(
            i for i, info in scanned.items() if info.key and info.key.lower() not in _NOT_TAKEN
        )
        extra = [f"# {s.reason}\n{s.key}={s.value}\n" for s in added]
        out[last + 1 : last + 1] = extra
    return "".join(out)


# --- rendering ------------------------------------------------------------

# A wrapper shares its hook's budget between the site's hooks and slurmpool's; each
# step is guaranteed this many seconds (at most the whole budget).
STEP_FLOOR_S = 10


def render_wrapper(
    spec: HookSpec, site_hooks: Sequence[str], target: InstallTarget, import_path: HookImportPath
) -> str:
    from slurmpool.templates import environment

    timeout_s = int(target.hook_timeouts.get(spec.name, 30))
    return (
        environment()
        .get_template("hook-wrapper.sh.j2")
        .render(
            hook=spec.name,
            slurm_key=spec.slurm_key,
            order=spec.order,
            order_text=spec.order_text,
            site_hooks=list(site_hooks),
            path=target.path,
            slurm_conf=target.slurm_conf,
            timeout=target.timeout_bin,
            timeout_s=timeout_s,
            floor_s=min(STEP_FLOOR_S, timeout_s),
            python=target.python,
            import_front=list(import_path.front),
            import_back=list(import_path.back),
            node_config=target.node_config,
            log_file=os.path.join(target.state_dir, HOOK_LOG_NAME),
        )
    )


def render_unit(target: InstallTarget) -> str:
    from slurmpool.templates import environment

    return (
        environment()
        .get_template("slurmpool-monitord.service.j2")
        .render(python=target.python, node_config=target.node_config, slurm_conf=target.slurm_conf)
    )


# --- manifest -------------------------------------------------------------


@dataclass
class Manifest:
    slurm_conf: str
    files: dict[str, tuple[bytes | None, int | None]]  # path -> (original bytes, original mode)
    dirs_created: list[str]
    site_hooks: dict[str, list[str]]
    disabled_lines: list[str]
    installed_conf_sha256: str
    # What the wrappers run as root, for doctor (absent from manifests of older installs).
    hook_import_path: HookImportPath | None = None
    hook_timeout_bin: str | None = None
    task_cgroup: TaskCgroup = "require"  # the install's --task-cgroup, which the next keeps
    # Site files slurmpool added lines to (cgroup.conf) -> the installed text's sha256.
    merged_sha256: dict[str, str] = field(default_factory=dict)
    # A site file moved for slurmpool's to run it (job_submit.site.lua) -> where it was.
    moved: dict[str, str] = field(default_factory=dict)
    links_created: list[str] = field(default_factory=list)  # symlinks install made
    # The site's files edited in place -> the lines install marked there (set aside,
    # added, its blocks and Include), which uninstall takes back only as written.
    marked: dict[str, list[str]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {
            "schema": MANIFEST_SCHEMA,
            "slurm_conf": self.slurm_conf,
            "installed_conf_sha256": self.installed_conf_sha256,
            "site_hooks": self.site_hooks,
            "disabled_lines": self.disabled_lines,
            "dirs_created": self.dirs_created,
            "files": {
                path: {
                    "original": None if old is None else base64.b64encode(old).decode(),
                    "mode": mode,
                }
                for path, (old, mode) in sorted(self.files.items())
            },
        }
        if self.hook_import_path is not None:
            data["hook_import_path"] = self.hook_import_path.to_json()
        if self.hook_timeout_bin is not None:
            data["hook_timeout_bin"] = self.hook_timeout_bin
        if self.task_cgroup != "require":
            data["task_cgroup"] = self.task_cgroup
        if self.merged_sha256:
            data["merged_sha256"] = dict(sorted(self.merged_sha256.items()))
        if self.moved:
            data["moved"] = dict(sorted(self.moved.items()))
        if self.links_created:
            data["links_created"] = self.links_created
        if self.marked:
            data["marked"] = dict(sorted(self.marked.items()))
        return (json.dumps(data, indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> Manifest:
        try:
            d = json.loads(data)
            if d.get("schema") != MANIFEST_SCHEMA:
                raise InstallError(
                    f"{source}: manifest schema {d.get('schema')!r}, expected {MANIFEST_SCHEMA}"
                )
            return cls(
                slurm_conf=str(d["slurm_conf"]),
                files={
                    str(p): (
                        None if v["original"] is None else base64.b64decode(v["original"]),
                        None if v["mode"] is None else int(v["mode"]),
                    )
                    for p, v in d["files"].items()
                },
                dirs_created=[str(x) for x in d["dirs_created"]],
                site_hooks={str(k): [str(x) for x in v] for k, v in d["site_hooks"].items()},
                disabled_lines=[str(x) for x in d["disabled_lines"]],
                installed_conf_sha256=str(d["installed_conf_sha256"]),
                hook_import_path=None
                if d.get("hook_import_path") is None
                else HookImportPath.from_json(d["hook_import_path"]),
                hook_timeout_bin=d.get("hook_timeout_bin"),
                task_cgroup=_task_cgroup(d.get("task_cgroup", "require")),
                merged_sha256={str(k): str(v) for k, v in d.get("merged_sha256", {}).items()},
                moved={str(k): str(v) for k, v in d.get("moved", {}).items()},
                links_created=[str(x) for x in d.get("links_created", [])],
                marked={str(k): [str(x) for x in v] for k, v in d.get("marked", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InstallError(f"{source}: malformed install manifest: {err!r}") from None


def _task_cgroup(value: object) -> TaskCgroup:
    for choice in TASK_CGROUP_CHOICES:
        if value == choice:
            return choice
    raise ValueError(f"task_cgroup {value!r}, expected one of {', '.join(TASK_CGROUP_CHOICES)}")


def read_manifest(root: Path, state_dir: str) -> Manifest | None:
    path = under(root, os.path.join(state_dir, MANIFEST_NAME))
    data = _read(path)
    if data is None:
        return None
    return Manifest.from_bytes(data, str(path))


# --- install --------------------------------------------------------------


@dataclass(frozen=True)
class SiteOptions:
    """What install should know or may do about the site's own Slurm settings."""

    # The Slurm the site runs, whose defaults hold where slurm.conf is silent (None:
    # unknown; a slurm.conf without SelectType is then refused).
    slurm: SlurmVersion | None = None
    # Whether install may add task/cgroup to TaskPlugin (siteneeds.TaskCgroup); None:
    # what the previous install was told, else "require".
    task_cgroup: TaskCgroup | None = None


def plan_install(
    target: InstallTarget,
    generated: Mapping[str, str],
    root: str | os.PathLike[str] = "/",
    options: SiteOptions | None = None,
    role: Role = "both",
) -> Plan:
    """Every change needed so the machine matches ``target`` with ``generated`` files.

    ``role``: ``controller`` writes the Slurm configuration every daemon shares (the
    slurm.conf merge, slurmpool.conf, gres.conf, cgroup.conf, job_submit.lua) and the
    EpilogSlurmctld wrapper; ``node`` what one node needs (its hook wrappers, the node
    config, the state dir, the monitord unit, enabled) and reads slurm.conf only for
    the site's own hooks; ``both``, one machine that is both."""
    options = options or SiteOptions()
    root_p = Path(root)
    conf_path = under(root_p, target.slurm_conf)
    current_conf = _read(conf_path)
    if current_conf is None:
        what = (
            "install --node reads the site's slurm.conf (the shared file, or the copy "
            "slurmd keeps on a configless site) for the site's own hooks"
            if role == "node"
            else "install edits the site's slurm.conf"
        )
        raise InstallError(
            f"{conf_path}: no slurm.conf there; {what}: pass it with --slurm-conf "
            "(or --root for a staged tree)"
        )
    missing = [n for n in (*SLURM_FILES, NODE_CONFIG_NAME) if n not in generated]
    if missing:
        raise InstallError(f"generated config lacks {', '.join(missing)}")
    old_manifest = read_manifest(root_p, target.state_dir)
    pristine = pristine_conf(current_conf.decode(), target)
    task_cgroup = options.task_cgroup or (old_manifest.task_cgroup if old_manifest else "require")
    needs = Needs(options.slurm, target.hook_timeouts, task_cgroup)
    included = _site_includes(root_p, target, pristine)
    shared = (
        _plan_shared(root_p, target, generated, old_manifest, pristine, included, needs)
        if role != "node"
        else None
    )
    if shared is not None:
        site_hooks = shared.edit.site_hooks
    else:
        site_hooks = site_hooks_of(_site_settings(target, pristine, included))
    wrappers = {os.path.join(target.hooks_dir, h.name) for h in HOOKS}
    for key, programs in site_hooks.items():
        clash = [p for p in programs if p in wrappers]
        if clash:
            raise InstallError(
                f"the site's {key}={','.join(programs)} is where slurmpool puts its wrapper "
                f"({clash[0]}); move the site's hook or set another paths.hooks_dir in the policy"
            )

    staged = root_p.resolve() != Path("/")
    if not staged:
        check_interpreter(target.python)
    notes = list(shared.edit.notes) if shared is not None else []
    resolved: HookImportPath | None = None
    try:
        resolved = resolve_import_path(target.python, target.python_path)
    except HookPathError as e:
        if not staged:
            raise InstallError(str(e)) from None
        notes.append(
            f"staged root: {e}. The wrappers search only --python-path and the "
            "interpreter's own path; run `slurmpool install` on the node itself"
        )
    if resolved is not None and not staged:
        refuse_untrusted(check_trust(root_paths(target, resolved)))
    import_path = resolved or HookImportPath(
        target.python, front_entries(target.python_path), (), (), {}
    )

    desired: dict[str, tuple[bytes, int]] = dict(shared.desired) if shared is not None else {}
    desired[target.node_config] = (generated[NODE_CONFIG_NAME].encode(), 0o644)
    for spec in HOOKS:
        if role == "both" or spec.on == role:
            text = render_wrapper(spec, site_hooks.get(spec.slurm_key, []), target, import_path)
            desired[os.path.join(target.hooks_dir, spec.name)] = (text.encode(), 0o755)
    links: dict[str, str] = {}
    wanted_dirs = [target.config_dir, target.hooks_dir]
    if role != "controller":
        unit = os.path.join(target.systemd_dir, UNIT_NAME)
        desired[unit] = (render_unit(target).encode(), 0o644)
        # `systemctl enable`, as the unit's WantedBy says: what a stateless image needs.
        wants = os.path.join(target.systemd_dir, UNIT_WANTED_BY)
        links[os.path.join(wants, UNIT_NAME)] = unit
        wanted_dirs += [target.systemd_dir, wants]

    # Directories: what is missing gets created (and recorded for uninstall).
    dirs: list[DirChange] = []
    created: list[str] = list(old_manifest.dirs_created) if old_manifest else []
    for d in _missing_dirs(root_p, wanted_dirs):
        dirs.append(DirChange(d, "create", 0o755))
        created.append(d)
    state_real = under(root_p, target.state_dir)
    if not state_real.exists():
        for d in _missing_dirs(root_p, [os.path.dirname(target.state_dir)]):
            dirs.append(DirChange(d, "create", 0o755))
            created.append(d)
        dirs.append(DirChange(target.state_dir, "create", STATE_DIR_MODE, owner_root=True))
        created.append(target.state_dir)
    else:
        st = state_real.stat()
        if stat.S_IMODE(st.st_mode) != STATE_DIR_MODE or (os.geteuid() == 0 and st.st_uid != 0):
            dirs.append(DirChange(target.state_dir, "fix-mode", STATE_DIR_MODE, owner_root=True))

    files: list[FileChange] = []
    originals: dict[str, tuple[bytes | None, int | None]] = (
        dict(old_manifest.files) if old_manifest else {}
    )
    # The site's Slurm files keep their owner: slurmctld may read them as SlurmUser.
    site_owned = shared.owners if shared is not None else {}
    for path, (new, mode) in desired.items():
        real = under(root_p, path)
        old = _read(real)
        old_mode = _mode(real)
        if path not in originals:
            originals[path] = (old, old_mode)
        owner = (_owner(real) or site_owned.get(path)) if path in site_owned else None
        if old != new or (old_mode is not None and old_mode != mode):
            files.append(FileChange(path, old, new, mode, owner))
    link_changes = []
    for path, points_to in links.items():
        real = under(root_p, path)
        if real.is_symlink() and os.readlink(real) == points_to:
            continue
        if real.exists() or real.is_symlink():
            raise InstallError(
                f"{path} is there already and is not slurmpool's link to {points_to}"
            )
        link_changes.append(LinkChange(path, points_to))

    old_links = list(old_manifest.links_created) if old_manifest else []
    manifest = Manifest(
        slurm_conf=target.slurm_conf,
        files=originals,
        dirs_created=_dedupe(created),
        site_hooks=site_hooks,  # what the wrappers run now; doctor compares slurm.conf
        disabled_lines=shared.edit.disabled
        if shared is not None
        else (old_manifest.disabled_lines if old_manifest else []),
        installed_conf_sha256=hashlib.sha256(shared.edit.text.encode()).hexdigest()
        if shared is not None
        else (old_manifest.installed_conf_sha256 if old_manifest else ""),
        hook_import_path=resolved,
        hook_timeout_bin=target.timeout_bin,
        task_cgroup=task_cgroup,
        merged_sha256={
            **(old_manifest.merged_sha256 if old_manifest else {}),
            **(shared.merged if shared is not None else {}),
        },
        moved={
            **(old_manifest.moved if old_manifest else {}),
            **(shared.moved if shared is not None else {}),
        },
        links_created=_dedupe([*old_links, *links]),
        marked={
            **(old_manifest.marked if old_manifest else {}),
            **(shared.marked if shared is not None else {}),
        },
    )
    manifest_bytes = manifest.to_bytes()
    manifest_real = under(root_p, target.manifest)
    old_manifest_bytes = _read(manifest_real)
    if old_manifest_bytes != manifest_bytes:
        files.append(FileChange(target.manifest, old_manifest_bytes, manifest_bytes, 0o600))
    if staged:
        notes.append(
            f"staged root: not checked that job users can run {target.python} on the node, "
            "nor that what the hooks run, import and write is root's alone "
            "(`slurmpool doctor` on the node checks both)"
        )
    changes = shared.changes if shared is not None else []
    return Plan(
        root_p, tuple(dirs), tuple(files), tuple(notes), tuple(changes), tuple(link_changes)
    )


@dataclass(frozen=True)
class SharedPlan:
    """What install --controller writes: the Slurm configuration every daemon shares."""

    edit: ConfEdit
    desired: dict[str, tuple[bytes, int]]  # path -> (bytes, mode)
    merged: dict[str, str]  # site files with slurmpool's lines joined -> their sha256
    moved: dict[str, str]  # the site's job_submit.lua, where slurmpool's runs it -> where it was
    changes: list[LineChange]
    owners: dict[str, tuple[int, int] | None]  # the site's files -> the owner they keep
    marked: dict[str, list[str]]  # the site's files edited in place -> slurmpool's lines


def _plan_shared(
    root: Path,
    target: InstallTarget,
    generated: Mapping[str, str],
    old_manifest: Manifest | None,
    pristine: str,
    included: Mapping[str, str],
    needs: Needs,
) -> SharedPlan:
    edit = edit_conf(pristine, generated[SLURM_FRAGMENT], target, needs, included)
    site_edits = _edit_site_files(root, target, generated, old_manifest, needs.task_cgroup)
    refusals = edit.refusals + [r for e in site_edits.values() for r in e.refusals]
    if refusals:
        raise InstallError(
            "the site's Slurm configuration cannot take slurmpool as it is:\n"
            + "\n".join(f"  - {r}" for r in refusals)
        )
    desired: dict[str, tuple[bytes, int]] = {}
    for name in SLURM_FILES:
        text = edit.fragment if name == SLURM_FRAGMENT else generated[name]
        desired[os.path.join(target.config_dir, name)] = (text.encode(), 0o644)
    merged: dict[str, str] = {}
    texts = {path: e.text for path, e in site_edits.items()} | edit.included
    for path, text in texts.items():
        data = text.encode(errors="surrogateescape")
        desired[path] = (data, _mode(under(root, path)) or 0o644)
        merged[path] = hashlib.sha256(data).hexdigest()
    moved = _move_site_lua(root, target, old_manifest, pristine, included)
    for copy, (data, mode) in moved.items():
        desired[copy] = (data, mode)
    desired[target.slurm_conf] = (
        edit.text.encode(),
        _mode(under(root, target.slurm_conf)) or 0o644,
    )

    changes = list(edit.changes)
    for site_edit in site_edits.values():
        changes += site_edit.changes
    for name in SLURM_FILES:
        path = os.path.join(target.config_dir, name)
        site_file = (
            old_manifest.files[path][0]
            if old_manifest is not None and path in old_manifest.files
            else _read(under(root, path))
        )
        if name == JOB_SUBMIT_LUA and moved:
            copy = next(iter(moved))
            changes.append(
                LineChange(
                    path,
                    None,
                    None,
                    f"the site's file moves to {copy}, which slurmpool's job_submit.lua runs "
                    "first, in an environment of its own; edit it there, then touch "
                    f"{path} (slurmctld reloads it when it changes)",
                )
            )
        elif path not in merged and name != SLURM_FRAGMENT and site_file is not None:
            changes.append(
                LineChange(
                    path,
                    None,
                    None,
                    f"the site's file ({_lines(len(_text_lines(site_file)))}) is replaced by "
                    "slurmpool's generated one; uninstall puts it back",
                )
            )
    where = os.path.join(target.config_dir, JOB_SUBMIT_LUA)
    owners = {path: _owner(under(root, path)) for path in desired}
    for copy in moved:  # a new file, owned as the site's job_submit.lua was
        owners[copy] = owners[copy] or _owner(under(root, where))
    marked = {
        path: _marked(desired[path][0].decode(errors="surrogateescape"))
        for path in [target.slurm_conf, *merged]
    }
    return SharedPlan(
        edit, desired, merged, {copy: where for copy in moved}, changes, owners, marked
    )


def _marked(text: str) -> list[str]:
    """slurmpool's lines in a site file: those marks.unmark takes back, and the Include."""
    include = [line for line in text.splitlines() if line.endswith(INCLUDE_MARKER)]
    return marked_lines(text) + include


def _site_includes(root: Path, target: InstallTarget, pristine: str) -> dict[str, str]:
    """Every file the site's slurm.conf includes, near or far (path -> the site's text,
    without slurmpool's marks); a file named that is not there is refused."""

    def read(path: str) -> str | None:
        data = _read(under(root, path))
        return None if data is None else unmark(data.decode(errors="surrogateescape"))

    try:
        return gather(target.slurm_conf, pristine, read, _ours(target))
    except MissingInclude as e:
        raise InstallError(f"{e}; slurmpool edits the site's files as Slurm reads them") from None


def _move_site_lua(
    root: Path,
    target: InstallTarget,
    old_manifest: Manifest | None,
    pristine: str,
    included: Mapping[str, str],
) -> dict[str, tuple[bytes, int]]:
    """The site's own job_submit.lua, where it has one, at the path slurmpool's runs it
    from (``{copy: (bytes, mode)}``; empty where the site has none).  A copy an admin
    edited since is kept as it is."""
    path = os.path.join(target.config_dir, JOB_SUBMIT_LUA)
    copy = os.path.join(target.config_dir, SITE_JOB_SUBMIT_LUA)
    if old_manifest is not None and path in old_manifest.files:
        original, mode = old_manifest.files[path]
    else:
        original, mode = _read(under(root, path)), _mode(under(root, path))
    if original is None:
        return {}
    ours = old_manifest is not None and copy in old_manifest.moved
    current = _read(under(root, copy))
    if current is not None and not ours:
        raise InstallError(
            f"{copy} is there already, and install moves the site's {path} there; "
            "move it away first"
        )
    submit = _site_settings(target, pristine, included).get("jobsubmitplugins")
    if submit is None or "lua" not in (p.lower() for p in items(submit.value)):
        raise InstallError(
            f"{path} is there, but the site's JobSubmitPlugins has no lua, so Slurm does not "
            "run it; slurmpool's job_submit.lua would run it first: move it away, or add lua "
            "to the site's JobSubmitPlugins"
        )
    return {copy: (current if current is not None else original, mode or 0o644)}


def _ours(target: InstallTarget) -> Callable[[str], bool]:
    return lambda path: path == target.fragment


@dataclass(frozen=True)
class SiteFileEdit:
    """A site file of its own (cgroup.conf, gres.conf) with slurmpool's lines joined."""

    text: str
    changes: list[LineChange]
    refusals: list[str]


def _edit_site_files(
    root: Path,
    target: InstallTarget,
    generated: Mapping[str, str],
    old_manifest: Manifest | None,
    task_cgroup: TaskCgroup,
) -> dict[str, SiteFileEdit]:
    """cgroup.conf and gres.conf where the site has its own (as it was before any
    install), joined with slurmpool's (:mod:`~slurmpool.slurm.cgroupconf`,
    :mod:`~slurmpool.slurm.gresconf`)."""
    out: dict[str, SiteFileEdit] = {}
    for name in (CGROUP_CONF, GRES_CONF):
        path = os.path.join(target.config_dir, name)
        original = (
            old_manifest.files[path][0]
            if old_manifest is not None and path in old_manifest.files
            else _read(under(root, path))
        )
        if original is None:
            continue
        site = original.decode(errors="surrogateescape")
        if name == CGROUP_CONF:
            cgroup = edit_cgroup_conf(
                site,
                path=path,
                fence=task_cgroup != "skip",
                plugin=target.cgroup_plugin,
                policy=target.policy_source,
            )
            changes = [LineChange(path, a.line, None, a.reason) for a in cgroup.added]
            out[path] = SiteFileEdit(cgroup.text, changes, list(cgroup.refusals))
        else:
            gres = edit_gres_conf(site, generated[GRES_CONF], target.node_groups, path=path)
            changes = [LineChange(path, c.line, c.before, c.reason) for c in gres.changes]
            out[path] = SiteFileEdit(gres.text, changes, list(gres.refusals))
    return out


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _missing_dirs(root: Path, paths: Sequence[str]) -> list[str]:
    """Directories to create, parents first, for every path in ``paths``."""
    out: list[str] = []
    for p in paths:
        chain = []
        cur = p
        while cur not in ("/", "") and not under(root, cur).exists():
            chain.append(cur)
            cur = os.path.dirname(cur)
        for c in reversed(chain):
            if c not in out:
                out.append(c)
    return out


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for i in items:
        if i not in seen:
            seen.append(i)
    return seen


# --- uninstall ------------------------------------------------------------


def plan_uninstall(state_dir: str, root: str | os.PathLike[str] = "/") -> Plan:
    """Changes that put back every file install touched, from the manifest."""
    root_p = Path(root)
    manifest = read_manifest(root_p, state_dir)
    if manifest is None:
        return Plan(root_p, notes=(f"no install manifest in {state_dir}: nothing installed",))
    notes: list[str] = []
    files: list[FileChange] = []
    changed: list[str] = []  # slurmpool's lines an admin changed since install
    back = {where: copy for copy, where in manifest.moved.items()}
    for path, (original, mode) in sorted(manifest.files.items()):
        real = under(root_p, path)
        current = _read(real)
        if path in back and original is not None:
            # The site's file back from where slurmpool ran it, with any edits made there.
            edited_copy = _read(under(root_p, back[path]))
            if edited_copy is not None and edited_copy != original:
                notes.append(f"{path} gets back the site's file as edited in {back[path]}")
                original = edited_copy
        edited = (
            path == manifest.slurm_conf
            and current is not None
            and original is not None
            and hashlib.sha256(current).hexdigest() != manifest.installed_conf_sha256
        )
        merged_edited = (
            path in manifest.merged_sha256
            and current is not None
            and hashlib.sha256(current).hexdigest() != manifest.merged_sha256[path]
        )
        if (edited or merged_edited) and current is not None:
            # Edited since install: undo only slurmpool's own lines, if they are as written.
            now = Counter(_marked(current.decode(errors="surrogateescape")))
            gone = Counter(manifest.marked.get(path, [])) - now
            changed += [f"{path}: {line!r}" for line in gone.elements()]
            if edited:
                target = _target_from_manifest(manifest, state_dir)
                restored = pristine_conf(current.decode(), target).encode()
            else:
                restored = unmark(current.decode(errors="surrogateescape")).encode(
                    errors="surrogateescape"
                )
            notes.append(
                f"{path} changed since install; removed slurmpool's lines and kept the rest"
            )
            if restored != current:
                files.append(FileChange(path, current, restored, mode or 0o644, _owner(real)))
            continue
        if original is None:
            if current is not None:
                files.append(FileChange(path, current, None))
        elif current != original or _mode(real) != mode:
            files.append(
                FileChange(
                    path, current, original, mode if mode is not None else 0o644, _owner(real)
                )
            )
    if changed:
        raise InstallError(
            "uninstall takes back only the lines install wrote, and these were changed or "
            "removed since; put each back as it was, then uninstall again:\n"
            + "\n".join(f"  - {c}" for c in changed)
        )
    manifest_path = os.path.join(state_dir, MANIFEST_NAME)
    files.append(FileChange(manifest_path, _read(under(root_p, manifest_path)), None))
    links = []
    for path in manifest.links_created:
        real = under(root_p, path)
        if real.is_symlink():
            links.append(LinkChange(path, os.readlink(real), "remove"))
    dirs = [DirChange(d, "remove") for d in reversed(manifest.dirs_created)]
    return Plan(root_p, tuple(dirs), tuple(files), tuple(notes), links=tuple(links))


def _target_from_manifest(manifest: Manifest, state_dir: str) -> InstallTarget:
    fragment = next((p for p in manifest.files if p.endswith("/" + SLURM_FRAGMENT)), None)
    config_dir = os.path.dirname(fragment) if fragment else os.path.dirname(manifest.slurm_conf)
    return InstallTarget(
        slurm_conf=manifest.slurm_conf, config_dir=config_dir, hooks_dir="/", state_dir=state_dir
    )


# --- apply ----------------------------------------------------------------


def _write_atomic(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    tmp = path.with_name(f".{path.name}.slurmpool-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if owner is not None and os.geteuid() == 0:
            os.chown(tmp, *owner)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def apply(plan: Plan) -> list[str]:
    """Carry the plan out; return what was done (one line per change)."""
    done: list[str] = []
    removals = [d for d in plan.dirs if d.action == "remove"]
    for d in plan.dirs:
        real = plan.real(d.path)
        if d.action == "create":
            real.mkdir(mode=d.mode, exist_ok=True)
            os.chmod(real, d.mode)
        elif d.action == "fix-mode":
            os.chmod(real, d.mode)
        else:
            continue
        if d.owner_root and os.geteuid() == 0:
            os.chown(real, 0, 0)
        done.append(f"{d.action} directory {d.path}")
    for f in plan.files:
        real = plan.real(f.path)
        if f.new is None:
            real.unlink(missing_ok=True)
        else:
            _write_atomic(real, f.new, f.mode, f.owner)
        done.append(f"{f.action} {f.path}")
    for link in plan.links:
        real = plan.real(link.path)
        if link.action == "create":
            os.symlink(link.target, real)
        else:
            real.unlink(missing_ok=True)
        done.append(f"{link.action} link {link.path}")
    for d in removals:
        real = plan.real(d.path)
        try:
            real.rmdir()
            done.append(f"remove directory {d.path}")
        except FileNotFoundError:
            pass
        except OSError:
            done.append(f"kept directory {d.path} (not empty)")
    return done
