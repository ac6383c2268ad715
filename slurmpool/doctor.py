"""``slurmpool doctor``: check one node against its compiled config, say what is wrong and the fix.

Checks, in order (each yields :class:`Finding` objects):

* ``node-config``: the compiled node config loads and names this node;
* ``gpu-backend``: the GPU backend answers (NVML, or the simulator);
* ``gpu-models`` / ``mig-mode``: the GPUs are the policy's models, in the
  policy's MIG modes (no pending mode change);
* ``hooks``: the four wrappers are installed and executable, slurm.conf
  includes slurmpool's fragment;
* ``state-dir``: exists, a directory, root-owned, install's mode, writable;
* ``trust``: what the root hooks run, import and write (the interpreter, the
  import path install resolved, the hooks, state, run and config dirs) is
  root's alone, the whole way there (:mod:`slurmpool.trust`);
* ``monitord``: on a node that publishes what it can carve (MIG pooled in compute
  slices), monitord is enabled in systemd or runs: only its repair gives slurmctld the
  node's counts back after a slurmd or slurmctld restart or a reconfigure;
* ``isolation``: per GPU mode of the node, what keeps a job from what other
  jobs hold (:mod:`slurmpool.isolation`); informative, never a failure;
* ``slurm-version``: the node runs the Slurm release the config was generated
  for (``slurmd -V``);
* ``slurm-node``: ``scontrol show node <name>`` shows the GRES the generated
  fragment gives the node, and the node takes jobs;
* ``slurmd-gres``: ``slurmd -G`` parses the generated gres.conf into the same
  GRES for this node.

The Slurm checks need a :class:`~slurmpool.slurm.runner.Runner`; pass
``runner=None`` to skip them (a staged root with no Slurm).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurmpool.configgen.files import GRES_CONF, SLURM_FRAGMENT
from slurmpool.configgen.nodeconfig import (
    SYSTEMD_DIR,
    NodeClassConfig,
    NodeConfig,
    NodeConfigError,
    load_node_config,
)
from slurmpool.fit import FIT_GRES
from slurmpool.hostlist import HostList, HostlistError
from slurmpool.install import (
    HOOKS,
    INCLUDE_MARKER,
    MANIFEST_NAME,
    STATE_DIR_MODE,
    UNIT_NAME,
    InstallError,
    InstallTarget,
    read_manifest,
    root_paths,
    under,
)
from slurmpool.isolation import NodeFences, node_isolation
from slurmpool.modes import GpuMode
from slurmpool.slurm.conf import scan_conf, settings, strip_comment
from slurmpool.slurm.includes import MissingInclude, gather, resolve, walk
from slurmpool.slurm.parse import (
    GresConfEntry,
    gres_totals,
    parse_gres,
    parse_nodes,
    parse_slurmd_gres,
)
from slurmpool.slurm.runner import Runner, SlurmCommandError
from slurmpool.slurm.version import SlurmVersionError, detect_version, parse_version


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    ok: bool
    message: str
    fix: str | None = None

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        text = f"[{mark}] {self.check}: {self.message}"
        if self.fix and not self.ok:
            text += f"\n       fix: {self.fix}"
        return text


@dataclass(frozen=True)
class DoctorReport:
    node: str
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "ok": self.ok, "findings": [asdict(f) for f in self.findings]}

    def text(self) -> str:
        lines = [f.line() for f in self.findings]
        n = len(self.problems)
        lines.append(f"{self.node}: " + ("all checks passed" if n == 0 else f"{n} problem(s)"))
        return "\n".join(lines)


@dataclass(frozen=True)
class DoctorOptions:
    node_config: str  # path as the node sees it
    node: str  # SLURMD_NODENAME of this node
    root: Path = Path("/")
    slurm_conf: str | None = None  # default: <slurm_config_dir>/slurm.conf
    backend_spec: str | None = None  # default: the node config's gpu_backend
    runner: Runner | None = None  # None: skip the Slurm checks
    check_gpus: bool = True
    systemd_dir: str = SYSTEMD_DIR  # where install put the monitord unit
    extra: dict[str, str] = field(default_factory=dict)


def run_doctor(opts: DoctorOptions) -> DoctorReport:
    findings: list[Finding] = []
    try:
        config = load_node_config(under(opts.root, opts.node_config))
    except NodeConfigError as e:
        findings.append(
            Finding("node-config", False, str(e), "run `slurmpool install --policy POLICY`")
        )
        return DoctorReport(opts.node, tuple(findings))
    cls = config.node_class(opts.node)
    if cls is None:
        findings.append(
            Finding(
                "node-config",
                False,
                f"node {opts.node!r} is in no node group of {opts.node_config} "
                f"(groups: {', '.join(c.hostlist for c in config.classes)})",
                "add the node to a node group's `nodes` in the policy, or pass --node NAME",
            )
        )
        return DoctorReport(opts.node, tuple(findings))
    findings.append(
        Finding("node-config", True, f"{opts.node} is in group {cls.name} ({len(cls.gpus)} GPUs)")
    )
    if opts.check_gpus:
        findings.extend(check_gpus(config, cls, opts.backend_spec))
    findings.extend(check_hooks(config, opts))
    findings.extend(check_state_dir(opts.root, config.paths["state_dir"]))
    findings.extend(check_trust(config, opts))
    findings.extend(check_site_hooks(config, opts))
    findings.extend(check_monitord(config, cls, opts))
    findings.extend(check_isolation(config, cls, opts))
    if opts.runner is not None:
        conf = opts.slurm_conf or os.path.join(config.paths["slurm_config_dir"], "slurm.conf")
        runner = opts.runner.with_conf(conf)
        findings.extend(check_slurm_version(config, runner))
        findings.extend(check_slurm_node(config, opts, runner))
        findings.extend(check_slurmd_gres(config, opts, runner))
    return DoctorReport(opts.node, tuple(findings))


# --- monitord --------------------------------------------------------------


def check_monitord(
    config: NodeConfig, cls: NodeClassConfig, opts: DoctorOptions
) -> Iterator[Finding]:
    """monitord is enabled or running on a node that publishes its fit counts."""
    if not cls.publishes_fit:
        return
    from slurmpool.monitor.pidfile import running

    # `systemctl enable` links the unit into the .wants directory of its target.
    enabled = sorted(under(opts.root, opts.systemd_dir).glob(f"*.wants/{UNIT_NAME}"))
    pid = None
    if opts.root == Path("/"):  # a staged root runs nothing
        pid = running(config.path("run_dir"), config.path("proc_root"))
    if enabled or pid is not None:
        said = [f"enabled ({enabled[0].parent.name})" if enabled else "not enabled in systemd"]
        said.append(f"running (pid {pid})" if pid is not None else "not running now")
        yield Finding("monitord", True, ", ".join(said))
        return
    yield Finding(
        "monitord",
        False,
        "monitord is neither enabled nor running: after a slurmd restart, a slurmctld "
        "restart or `scontrol reconfigure`, slurmctld counts this node's vgpufit as an "
        "empty node's until a job starts or ends here, and sends it jobs it cannot carve",
        f"systemctl enable --now {UNIT_NAME}",
    )


# --- isolation ------------------------------------------------------------


def node_fences(config: NodeConfig, opts: DoctorOptions) -> NodeFences:
    """What this node runs that fences devices: slurm.conf's TaskPlugin, cgroup.conf,
    the cgroup hierarchy Slurm uses, and the devices controller the prolog writes to."""
    from slurmpool.pooling import fence

    etc = config.paths["slurm_config_dir"]
    conf = opts.slurm_conf or os.path.join(etc, "slurm.conf")
    slurm = _settings_of(under(opts.root, conf))
    cgroup_conf = _settings_of(under(opts.root, os.path.join(etc, "cgroup.conf")))
    plugin = cgroup_conf.get("cgroupplugin", "autodetect").lower()
    if plugin in ("cgroup/v1", "cgroup/v2"):
        version = plugin[-2:]
    else:  # autodetect: v2 where /sys/fs/cgroup is the unified hierarchy itself
        unified = under(opts.root, "/sys/fs/cgroup/cgroup.controllers").exists()
        version = "v2" if unified else "v1"
    template = str(under(opts.root, config.path("job_cgroup_root")))
    return NodeFences(
        task_cgroup="task/cgroup"
        in [p.strip() for p in slurm.get("taskplugin", "").lower().split(",")],
        constrain_devices=cgroup_conf.get("constraindevices", "no").lower() == "yes",
        cgroup=version,
        mig_fence=fence.controller_mounted(template, opts.node),
    )


def _settings_of(path: Path) -> dict[str, str]:
    try:
        return settings(path.read_text(errors="replace"))
    except OSError:
        return {}


def check_isolation(
    config: NodeConfig, cls: NodeClassConfig, opts: DoctorOptions
) -> Iterator[Finding]:
    fences = node_fences(config, opts)
    mps = any(g.mps for g in cls.gpus if g.mode is GpuMode.SHARED)
    for iso in node_isolation([g.mode for g in cls.gpus], fences, mps):
        yield Finding("isolation", True, iso.line())


# --- GPUs -----------------------------------------------------------------


def check_gpus(config: NodeConfig, cls: NodeClassConfig, spec: str | None) -> Iterator[Finding]:
    from slurmpool.gpu.backend import GpuBackendError
    from slurmpool.gpu.select import open_backend

    spec = spec or config.gpu_backend
    try:
        backend = open_backend(spec, mig_minors_path=config.paths.get("mig_minors"))
        gpus = {g.index: g for g in backend.gpus()}
    except GpuBackendError as e:
        yield Finding(
            "gpu-backend",
            False,
            f"{spec}: {e}",
            "check the NVIDIA driver (`nvidia-smi`) and nvidia-ml-py"
            if spec == "nvml"
            else "create the simulated node (`slurmpool sim init`) or fix gpu_backend",
        )
        return
    yield Finding("gpu-backend", True, f"{spec}: {len(gpus)} GPU(s)")
    bad_models = []
    if len(gpus) != len(cls.gpus):
        bad_models.append(
            f"the policy gives group {cls.name} {len(cls.gpus)} GPUs, the node has {len(gpus)}"
        )
    bad_modes = []
    for want in cls.gpus:
        have = gpus.get(want.index)
        if have is None:
            bad_models.append(f"GPU {want.index}: missing (policy: {want.model})")
            continue
        if have.model != want.model:
            bad_models.append(f"GPU {want.index}: {have.model or have.name} (policy: {want.model})")
        want_mig = want.mode.mig_enabled
        if have.mig_current != want_mig or have.mig_pending != want_mig:
            state = "on" if have.mig_current else "off"
            pending = "" if have.mig_pending == have.mig_current else ", change pending a GPU reset"
            bad_modes.append(
                f"GPU {want.index}: MIG {state}{pending}; mode {want.mode} needs MIG "
                f"{'on' if want_mig else 'off'}"
            )
    if bad_models:
        yield Finding(
            "gpu-models",
            False,
            "; ".join(bad_models),
            "make the policy's models match `slurmpool discover`, regenerate and reinstall",
        )
    else:
        yield Finding("gpu-models", True, ", ".join(f"{g.index}:{g.model}" for g in cls.gpus))
    if bad_modes:
        yield Finding(
            "mig-mode",
            False,
            "; ".join(bad_modes),
            "`nvidia-smi -i N -mig 1` (or 0) on an idle GPU, then reset it (`nvidia-smi -r -i N`)",
        )
    else:
        yield Finding("mig-mode", True, "every GPU is in its policy MIG mode")


# --- files ----------------------------------------------------------------


def check_hooks(config: NodeConfig, opts: DoctorOptions) -> Iterator[Finding]:
    hooks_dir = config.paths["hooks_dir"]
    problems = []
    node_hooks = [h for h in HOOKS if h.on == "node"]  # EpilogSlurmctld's is the controller's
    for h in node_hooks:
        path = os.path.join(hooks_dir, h.name)
        real = under(opts.root, path)
        if not real.is_file():
            problems.append(f"{path} missing")
        elif not os.access(real, os.X_OK):
            problems.append(f"{path} not executable")
        elif "slurmpool.hooks" not in real.read_text(errors="replace"):
            problems.append(f"{path} is not a slurmpool wrapper")
    if problems:
        yield Finding(
            "hooks", False, "; ".join(problems), "run `slurmpool install --policy POLICY`"
        )
    else:
        yield Finding("hooks", True, f"{len(node_hooks)} wrappers in {hooks_dir}")
    conf = opts.slurm_conf or os.path.join(config.paths["slurm_config_dir"], "slurm.conf")
    fragment = os.path.join(config.paths["slurm_config_dir"], SLURM_FRAGMENT)
    try:
        text = under(opts.root, conf).read_text()
    except OSError as e:
        yield Finding("slurm-conf", False, f"cannot read {conf}: {e.strerror}", "pass --slurm-conf")
        return
    includes = [
        line
        for line in scan_conf(text)
        if line.is_key("include")
        and line.value
        and resolve(line.value.split()[0], conf, None) == fragment
    ]
    if not includes:
        yield Finding(
            "slurm-conf",
            False,
            f"{conf} does not include {fragment}",
            f"run `slurmpool install`, or add `Include {fragment} {INCLUDE_MARKER}`",
        )
    else:
        yield Finding("slurm-conf", True, f"{conf} includes {fragment}")


def check_state_dir(root: Path, state_dir: str, euid: int | None = None) -> Iterator[Finding]:
    euid = os.geteuid() if euid is None else euid
    real = under(root, state_dir)
    fix = (
        f"install -d -m {STATE_DIR_MODE:04o} -o root -g root {state_dir}"
        "  (or rerun `slurmpool install`)"
    )
    try:
        st = real.stat()
    except FileNotFoundError:
        yield Finding("state-dir", False, f"{state_dir} does not exist", fix)
        return
    problems = []
    if not stat.S_ISDIR(st.st_mode):
        problems.append("not a directory")
    else:
        if st.st_uid != 0:
            problems.append(f"owned by uid {st.st_uid}, expected root")
        if stat.S_IMODE(st.st_mode) != STATE_DIR_MODE:
            mode = stat.S_IMODE(st.st_mode)
            problems.append(f"mode {mode:04o}, expected {STATE_DIR_MODE:04o}")
        try:
            with tempfile.NamedTemporaryFile(dir=real, prefix=".doctor-"):
                pass
        except OSError as e:
            problems.append(f"not writable: {e.strerror}")
    if problems and euid != 0 and problems == [f"owned by uid {st.st_uid}, expected root"]:
        problems = []  # a staged tree checked as an ordinary user
    if problems:
        yield Finding("state-dir", False, f"{state_dir}: " + "; ".join(problems), fix)
    else:
        yield Finding("state-dir", True, f"{state_dir}: root-owned, {STATE_DIR_MODE:04o}, writable")


def check_site_hooks(config: NodeConfig, opts: DoctorOptions) -> Iterator[Finding]:
    """The site's own hooks this node's wrappers run against those slurm.conf names now:
    a node installed apart from the controller (install --node) keeps the ones it read
    then, and the controller's slurm.conf may have changed since."""
    from slurmpool.install import InstallTarget, site_hooks_in

    state_dir = config.paths["state_dir"]
    try:
        manifest = read_manifest(opts.root, state_dir)
    except (InstallError, OSError):
        return  # `trust` says why
    if manifest is None:
        return
    etc = config.paths["slurm_config_dir"]
    conf = opts.slurm_conf or os.path.join(etc, "slurm.conf")
    target = InstallTarget(conf, etc, config.paths["hooks_dir"], state_dir)
    try:
        now = site_hooks_in(opts.root, target)
    except (InstallError, OSError):
        return  # `slurm-conf` says why
    node_keys = [h.slurm_key for h in HOOKS if h.on == "node"]
    differ = [
        f"{key}: the wrapper runs {','.join(manifest.site_hooks.get(key, [])) or 'none'}, "
        f"{conf} names {','.join(now.get(key, [])) or 'none'}"
        for key in node_keys
        if manifest.site_hooks.get(key, []) != now.get(key, [])
    ]
    if differ:
        yield Finding(
            "site-hooks",
            False,
            "this node and slurm.conf disagree on the site's own hooks: " + "; ".join(differ),
            "run `slurmpool install --node --policy POLICY` on this node again",
        )
    else:
        yield Finding("site-hooks", True, "the wrappers run the site's hooks slurm.conf names")


def check_trust(config: NodeConfig, opts: DoctorOptions) -> Iterator[Finding]:
    """Whether others can change what the root hooks run, import or write."""
    from slurmpool.trust import check

    state_dir = config.paths["state_dir"]
    manifest_path = os.path.join(state_dir, MANIFEST_NAME)
    reinstall = "rerun `slurmpool install --policy POLICY`"
    try:
        manifest = read_manifest(opts.root, state_dir)
    except PermissionError:
        yield Finding("trust", False, f"cannot read {manifest_path}", "run doctor as root")
        return
    except (InstallError, OSError) as e:
        yield Finding("trust", False, str(e), reinstall)
        return
    if manifest is None or manifest.hook_import_path is None:
        yield Finding(
            "trust", False, f"{manifest_path} does not say what the hooks import", reinstall
        )
        return

    def node_path(key: str) -> str:
        return str(under(opts.root, config.paths[key]))

    target = InstallTarget(
        slurm_conf=manifest.slurm_conf,
        config_dir=node_path("slurm_config_dir"),
        hooks_dir=node_path("hooks_dir"),
        state_dir=node_path("state_dir"),
        run_dir=node_path("run_dir"),
        mps_control=node_path("mps_control"),
        python=manifest.hook_import_path.python,
        timeout_bin=manifest.hook_timeout_bin or "/usr/bin/timeout",
    )
    problems = check(root_paths(target, manifest.hook_import_path))
    for u in problems:
        yield Finding("trust", False, u.text(), u.fix())
    if not problems:
        n = len(manifest.hook_import_path.entries)
        yield Finding(
            "trust",
            True,
            f"root's alone: the interpreter {target.python}, its {n} import directories, "
            "slurmpool, the hooks, state, run and config dirs",
        )


# --- Slurm ----------------------------------------------------------------


def expected_node_gres(conf_text: str, node: str) -> str | None:
    """The ``Gres=`` the configuration ``conf_text`` gives ``node`` (None if no line
    defines it)."""
    for line in scan_conf(conf_text):
        if not line.is_key("NodeName") or line.value is None:
            continue
        try:
            if node not in HostList(line.value):
                continue
        except HostlistError:
            continue
        for token in strip_comment(line.text).split():
            if token.lower().startswith("gres="):
                return token.split("=", 1)[1]
        return ""
    return None


def _without_fit_counts(totals: dict[str, int]) -> dict[str, int]:
    return {k: n for k, n in totals.items() if k.split(":")[0] != FIT_GRES}


def check_slurm_version(config: NodeConfig, runner: Runner) -> Iterator[Finding]:
    """The config is for the Slurm release this node runs: what it uses (Extra in
    job_submit.lua, the prolog's ``scontrol --json``) depends on it."""
    try:
        have = detect_version(runner, "slurmd")
    except (SlurmCommandError, SlurmVersionError) as e:
        yield Finding(
            "slurm-version",
            False,
            f"cannot read this node's Slurm version: {e}",
            "install slurmd on the node, or put it on PATH",
        )
        return
    by = f" ({config.slurm_detected_by})" if config.slurm_detected_by else ""
    try:
        want = parse_version(config.slurm_version)
    except SlurmVersionError as e:
        yield Finding("slurm-version", False, f"node config: {e}", "rerun install")
        return
    if (want.major, want.minor) != (have.major, have.minor):
        yield Finding(
            "slurm-version",
            False,
            f"the installed config was generated for Slurm {want.release}{by}, "
            f"this node runs {have}",
            "run `slurmpool install --policy POLICY` on this node again (it detects the "
            f"installed Slurm), with no slurm_version in the policy or {have.release} there",
        )
    else:
        yield Finding("slurm-version", True, f"Slurm {have}, as the config was generated for{by}")


def configured_node_gres(root: Path, conf: str, node: str) -> str | None:
    """The ``Gres=`` that ``conf`` and the files it includes give ``node``: slurmpool's
    fragment, or the site's own ``NodeName=`` line that install edited (None: no line
    defines the node).  Raises OSError, or MissingInclude for a file not there."""

    def read(path: str) -> str | None:
        try:
            return under(root, path).read_text(errors="replace")
        except FileNotFoundError:
            return None

    text = under(root, conf).read_text(errors="replace")
    texts = {conf: text, **gather(conf, text, read)}
    return expected_node_gres("\n".join(line.text for _, line in walk(conf, texts)), node)


def check_slurm_node(config: NodeConfig, opts: DoctorOptions, runner: Runner) -> Iterator[Finding]:
    conf = opts.slurm_conf or os.path.join(config.paths["slurm_config_dir"], "slurm.conf")
    try:
        want_text = configured_node_gres(opts.root, conf, opts.node)
    except OSError as e:
        yield Finding("slurm-node", False, f"cannot read {conf}: {e.strerror}", "pass --slurm-conf")
        return
    except MissingInclude as e:
        yield Finding("slurm-node", False, str(e), "restore the file, or rerun install")
        return
    if want_text is None:
        yield Finding(
            "slurm-node",
            False,
            f"neither {conf} nor a file it includes defines node {opts.node}",
            "run `slurmpool install --controller` with a policy that has the node",
        )
        return
    try:
        out = runner.run("scontrol", "show", "node", opts.node, timeout=15)
    except SlurmCommandError as e:
        yield Finding(
            "slurm-node",
            False,
            f"scontrol show node {opts.node}: {e}",
            "is slurmctld up and does slurm.conf define the node? (`scontrol ping`)",
        )
        return
    nodes = parse_nodes(out.stdout)
    if not nodes:
        yield Finding(
            "slurm-node", False, f"slurmctld does not know {opts.node}", "scontrol reconfigure"
        )
        return
    node = nodes[0]
    # The fit counts change as the node's hooks publish what it can carve: they are the
    # hooks' to set, and slurmctld lists none while all are 0 (tests/data/probe-fit-zero.sh).
    want = _without_fit_counts(gres_totals(parse_gres(want_text)))
    have = _without_fit_counts(gres_totals(list(node.gres)))
    if want != have:
        yield Finding(
            "slurm-node",
            False,
            f"slurmctld has Gres={','.join(str(g) for g in node.gres) or '(none)'} for "
            f"{opts.node}, the configuration says Gres={want_text}",
            "restart slurmctld and slurmd after install (`scontrol reconfigure` does not "
            "change GRES of registered nodes)",
        )
    else:
        yield Finding("slurm-node", True, f"Gres={want_text} as configured")
    if not node.available:
        state = "+".join((node.state, *node.flags))
        yield Finding(
            "slurm-node-state",
            False,
            f"{opts.node} is {state}" + (f": {node.reason}" if node.reason else ""),
            f"fix the cause, then `scontrol update nodename={opts.node} state=resume`",
        )


_BRACKET_RE = re.compile(r"^(.*?)\[([0-9,\-]+)\](.*)$")


def expand_files(spec: str) -> list[str]:
    """gres.conf ``File=`` list: ``/dev/nvidia[0-1],/dev/x`` -> every path."""
    out: list[str] = []
    depth = 0
    part = ""
    parts = []
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    for p in parts:
        m = _BRACKET_RE.match(p)
        if m is None:
            out.append(p)
            continue
        head, body, tail = m.groups()
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{i:0{width}d}{tail}")
    return [p for p in out if p]


def _gres_conf_entries(text: str, node: str) -> dict[tuple[str, str | None], tuple[int, set[str]]]:
    """(name, type) -> (count, files) of the gres.conf lines that apply to ``node``."""
    out: dict[tuple[str, str | None], tuple[int, set[str]]] = {}
    for raw in text.splitlines():
        body = strip_comment(raw)
        if not body:
            continue
        fields = {}
        for token in body.split():
            k, sep, v = token.partition("=")
            if sep:
                fields[k.lower()] = v
        if "name" not in fields:
            continue
        if "nodename" in fields:
            try:
                if node not in HostList(fields["nodename"]):
                    continue
            except HostlistError:
                continue
        files: set[str] = set()
        spec = fields.get("file") or fields.get("multiplefiles")
        if spec:
            files.update(expand_files(spec))
        # File= is one GRES per file; MultipleFiles= is ONE GRES using all its files.
        if fields.get("count", "").isdigit():
            count = int(fields["count"])
        elif "file" in fields:
            count = len(files)
        else:
            count = 1
        key = (fields["name"], fields.get("type"))
        old_count, old_files = out.get(key, (0, set()))
        out[key] = (old_count + count, old_files | files)
    return out


def slurmd_gres_totals(
    entries: Iterable[GresConfEntry],
) -> dict[tuple[str, str | None], tuple[int, set[str]]]:
    """(name, type) -> (count, files) of what ``slurmd -G`` parsed.  Shards are
    configured untyped and take their GPU's type in slurmd (counted untyped here),
    which also lists an empty ``shard`` for every other gpu type: left out."""
    have: dict[tuple[str, str | None], tuple[int, set[str]]] = {}
    for entry in entries:
        if entry.count == 0 and entry.name == "shard":
            continue
        key = (entry.name, None if entry.name == "shard" else entry.type)
        count, files = have.get(key, (0, set()))
        have[key] = (count + entry.count, files | ({entry.file} if entry.file else set()))
    return have


def check_slurmd_gres(config: NodeConfig, opts: DoctorOptions, runner: Runner) -> Iterator[Finding]:
    gres_conf = os.path.join(config.paths["slurm_config_dir"], GRES_CONF)
    try:
        want = _gres_conf_entries(under(opts.root, gres_conf).read_text(), opts.node)
    except OSError as e:
        yield Finding(
            "slurmd-gres", False, f"cannot read {gres_conf}: {e.strerror}", "rerun install"
        )
        return
    try:
        res = runner.run("slurmd", "-G", "-N", opts.node, timeout=20, check=False)
    except SlurmCommandError as e:
        yield Finding("slurmd-gres", False, f"slurmd -G: {e}", "install slurmd on this node")
        return
    output = res.stdout + res.stderr
    entries = parse_slurmd_gres(output)
    if res.returncode != 0 or "fatal:" in output or ("error:" in output and not entries):
        tail = " | ".join(output.strip().splitlines()[-3:])
        yield Finding(
            "slurmd-gres",
            False,
            f"slurmd -G -N {opts.node} rejects the config: {tail}",
            "check the device files gres.conf names exist on this node (character devices)",
        )
        return
    have = slurmd_gres_totals(entries)
    if have != want:

        def fmt(d: dict[tuple[str, str | None], tuple[int, set[str]]]) -> str:
            return ", ".join(
                f"{n}{':' + t if t else ''}={c}" + (f"[{','.join(sorted(f))}]" if f else "")
                for (n, t), (c, f) in sorted(d.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
            )

        yield Finding(
            "slurmd-gres",
            False,
            f"slurmd parsed {fmt(have) or 'nothing'}; the generated gres.conf says {fmt(want)}",
            "reinstall the generated gres.conf next to slurm.conf and restart slurmd",
        )
    else:
        yield Finding("slurmd-gres", True, f"slurmd -G agrees with {gres_conf}")
