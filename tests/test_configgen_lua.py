"""The generated job_submit.lua under a real Lua 5.1, with a fake ``slurm`` table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import needs
import pytest
from slurm_node import NODE_SLURM

from slurmpool.configgen.render import generate
from slurmpool.policy.loader import load_policy
from slurmpool.slurm.version import InstalledSlurm, parse_version
from slurmpool.templates import lua_string

ROOT = Path(__file__).resolve().parents[1]
LUA = needs.program("lua5.1")

HARNESS = r"""
local logs, infos = {}, {}
slurm = {
  SUCCESS = 0, ERROR = -1,
  log_user = function(fmt, ...) logs[#logs + 1] = string.format(fmt, ...) end,
  log_info = function(fmt, ...) infos[#infos + 1] = string.format(fmt, ...) end,
  log_error = function(fmt, ...) infos[#infos + 1] = "error: " .. string.format(fmt, ...) end,
  log_debug = function(fmt, ...) end,
}
local loaded = dofile(SCRIPT)
assert(loaded == slurm.SUCCESS)
local ESC = { ["\t"] = "\\t", ["\n"] = "\\n", ["\\"] = "\\\\" }
local function show(v)
  if v == nil then return "<nil>" end
  return (string.gsub(tostring(v), "[\t\n\\]", ESC))
end
for _, case in ipairs(CASES) do
  logs, infos = {}, {}
  local rc
  local uid = case.uid or 1000
  if case.job_rec then
    rc = slurm_job_modify(case.job, case.job_rec, {}, uid)
  else
    rc = slurm_job_submit(case.job, {}, uid)
  end
  io.write(case.id, "\t", rc, "\t", show(case.job.tres_per_node), "\t", show(case.job.extra),
           "\t", show(case.job.name), "\t", show(table.concat(logs, " | ")),
           "\t", show(table.concat(infos, " | ")), "\n")
end
"""


def lua_table(fields: dict[str, str]) -> str:
    return "{" + ", ".join(f"[{lua_string(k)}] = {lua_string(v)}" for k, v in fields.items()) + "}"


# A case: id, the job's fields, slurmctld's record of it (a modify) or None (a submit),
# and optionally the uid submitting or modifying it (1000 unless given).
Case = (
    tuple[str, dict[str, str], dict[str, str] | None]
    | tuple[str, dict[str, str], dict[str, str] | None, int]
)


def run_cases(
    script: Path, cases: list[Case], tmp: Path
) -> dict[str, tuple[int, str, str, str, str, str]]:
    entries = []
    for cid, job, rec, *uid in cases:
        rec_src = f", job_rec = {lua_table(rec)}" if rec is not None else ""
        uid_src = f", uid = {uid[0]}" if uid else ""
        entries.append(f"{{id = {lua_string(cid)}, job = {lua_table(job)}{rec_src}{uid_src}}}")
    driver = tmp / "driver.lua"
    driver.write_text(
        f"SCRIPT = {lua_string(str(script))}\nCASES = {{\n"
        + ",\n".join(entries)
        + "\n}\n"
        + HARNESS
    )
    assert LUA is not None
    proc = subprocess.run([LUA, str(driver)], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        cid, rc, tres, extra, name, logs, infos = line.split("\t")
        out[cid] = (int(rc), tres, extra, name, logs, infos)
    return out


HOSTILE = 'x"); os.exit(3) --[[ ]] \n\\ %s %d'
FORGED_LINE = "x\n   TresPerNode=gres:vgpu:7"


@pytest.fixture(scope="module")
def mixed_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    tmp = tmp_path_factory.mktemp("lua")
    files = generate(load_policy(ROOT / "examples" / "mixed-cluster.yaml")).files
    script = tmp / "job_submit.lua"
    script.write_text(files["job_submit.lua"])
    fitted = "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1"
    cases: list[Case] = [
        ("zero", {"tres_per_node": "gres:vgpu:0"}, None),
        ("negative", {"tres_per_node": "gres:vgpu:-1"}, None),
        ("ninety-nine", {"tres_per_node": "gres:vgpu:99"}, None),
        ("too-many-gpus", {"tres_per_node": "gres:vgpu:42"}, None),
        ("typed", {"tres_per_node": "gres:vgpu:big:2"}, None),
        ("no-pool", {"tres_per_node": "gres:vgpu:1", "partition": "train"}, None),
        ("not-ours", {"tres_per_node": "gres:vgpu:1", "partition": "debug"}, None),
        ("round-5", {"tres_per_node": "gres:vgpu:5"}, None),
        ("round-6-new-form", {"tres_per_node": "gres/vgpu:6", "partition": "serve"}, None),
        ("exact-3", {"tres_per_node": "gres:vgpu:3"}, None),
        ("two-gpus", {"tres_per_node": "gres:vgpu:14", "partition": "all"}, None),
        ("five-gpus", {"tres_per_node": "gres/vgpu:35"}, None),
        ("implicit-1", {"tres_per_node": "gres:vgpu"}, None),
        ("with-gpu", {"tres_per_node": "gres:gpu:a100:1,gres:vgpu:5"}, None),
        ("whole-gpu-job", {"tres_per_node": "gres:gpu:h100:2", "partition": "train"}, None),
        ("plain-job", {"name": "hello"}, None),
        ("vgpu-lookalike", {"tres_per_node": "gres:vgpux:2"}, None),
        ("hostile", {"tres_per_node": "gres:vgpu:5", "name": HOSTILE, "comment": HOSTILE}, None),
        ("hostile-partition", {"tres_per_node": "gres:vgpu:1", "partition": HOSTILE}, None),
        ("user-extra", {"tres_per_node": "gres:vgpu:2", "extra": "mine"}, None),
        ("forged-extra", {"tres_per_node": "gres:vgpu:1", "extra": "slurmpool:vgpu=14"}, None),
        ("per-task", {"tres_per_task": "gres/vgpu:1"}, None),
        ("multi-partition", {"tres_per_node": "gres:vgpu:4", "partition": "serve,all"}, None),
        ("multi-with-nopool", {"tres_per_node": "gres:vgpu:4", "partition": "serve,train"}, None),
        ("modify-no-pool", {"tres_per_node": "gres:vgpu:2"}, {"partition": "train"}),
        ("modify-ok", {"tres_per_node": "gres:vgpu:6"}, {"partition": "serve"}),
        # Forged tokens, whatever the spelling, on every job, on submit and on modify.
        (
            "forged-leading-space",
            {"tres_per_node": "gres:vgpu:1", "extra": " slurmpool:vgpu=7"},
            None,
        ),
        (
            "forged-case-spacing",
            {"tres_per_node": "gres:vgpu:2", "extra": "SlurmPool : VGPU = 7 site=x"},
            None,
        ),
        (
            "forged-tab-inside",
            {"tres_per_node": "gres:vgpu:1", "extra": "a\tslurmpool\t:vgpu=7,b"},
            None,
        ),
        ("forged-cpu-only", {"name": "x", "extra": "slurmpool:vgpu=7"}, None),
        ("forged-twice-cpu-only", {"extra": "slurmpool:vgpu=7 SLURMPOOL:vgpu=7 keep"}, None),
        ("modify-extra-only", {"extra": "mine slurmpool:vgpu=7"}, {"partition": "serve"}),
        ("modify-extra-cpu-job", {"extra": " SLURMPOOL:VGPU=14"}, {"partition": "train"}),
        # Lines posing as slurmctld's record in user fields: accepted as they are, logged.
        ("forged-line-name", {"tres_per_node": "gres:vgpu:1", "name": FORGED_LINE}, None),
        ("forged-line-comment", {"comment": FORGED_LINE}, None),
        ("forged-line-rename", {"name": FORGED_LINE}, {"partition": "serve"}),
        # vgpufit is slurmpool's: a user cannot ask for it, drop it or change it.
        (
            "fit-forged",
            {"tres_per_node": "gres:vgpu:1,gres:vgpufit:s7:1,gres:vgpufit:next:1"},
            None,
        ),
        ("fit-alone", {"tres_per_node": "gres/vgpufit:s7:1,gres/vgpufit:next:1"}, None),
        ("fit-per-task", {"tres_per_task": "gres/vgpufit:s1:1,gres/vgpufit:next:1"}, None),
        ("fit-new-form", {"tres_per_node": "gres/vgpu=4"}, None),
        ("pinned", {"tres_per_node": "gres:vgpu:4", "req_nodes": "srv01"}, None),
        (
            "fit-operator",
            {"tres_per_node": "gres:vgpu:4,gres:vgpufit:s7:1,gres:vgpufit:next:1"},
            None,
            0,
        ),
        (
            "modify-gres",
            {"tres_per_node": "gres:vgpu:4"},
            {"partition": "serve", "tres_per_node": fitted},
        ),
        (
            "modify-forges-fit",
            {"tres_per_node": "gres:vgpu:4,gres:vgpufit:s7:1,gres:vgpufit:next:1"},
            {
                "partition": "serve",
                "tres_per_node": "gres:vgpu:4,gres:vgpufit:s4:1,gres:vgpufit:next:1",
            },
        ),
        ("modify-time-only", {}, {"partition": "serve", "tres_per_node": fitted}),
        ("move-keeps-fit", {"partition": "all"}, {"partition": "serve", "tres_per_node": fitted}),
        (
            "move-adds-fit",
            {"partition": "all"},
            {"partition": "serve", "tres_per_node": "gres:vgpu:7"},
        ),
        (
            "move-keeps-user-extra",
            {"partition": "all"},
            {"partition": "serve", "tres_per_node": fitted, "extra": "mine"},
        ),
        (
            "move-to-no-pool",
            {"partition": "train"},
            {"partition": "serve", "tres_per_node": fitted},
        ),
        (
            "operator-modify",
            {"tres_per_node": "gres:vgpu:7,gres:vgpufit:s1:1,gres:vgpufit:next:1"},
            {"partition": "serve", "tres_per_node": fitted},
            0,
        ),
    ]
    return run_cases(script, cases, tmp)


ERROR, SUCCESS = -1, 0


@pytest.mark.parametrize(
    ("cid", "fragment"),
    [
        ("zero", "asks for nothing"),
        ("negative", "whole number >= 1"),
        ("ninety-nine", "whole multiple of it (7, 14, ...)"),
        ("too-many-gpus", "pool at most 5 (vgpu:35)"),
        ("typed", "vgpu has no types"),
        ("no-pool", "partition train has no pooled GPUs; vgpu jobs can use: all, serve"),
        ("not-ours", "partition debug is not a slurmpool partition"),
        ("per-task", "use --gres=vgpu:N"),
        ("multi-with-nopool", "partition train has no pooled GPUs"),
        ("modify-no-pool", "partition train has no pooled GPUs"),
        ("hostile-partition", "is not a slurmpool partition"),
        ("fit-forged", "vgpufit is set by slurmpool from --gres=vgpu:N; ask for vgpu alone"),
        ("fit-alone", "vgpufit is set by slurmpool"),
        ("fit-per-task", "vgpufit is set by slurmpool"),
        ("modify-forges-fit", "vgpufit is set by slurmpool"),
        ("move-to-no-pool", "partition train has no pooled GPUs"),
    ],
)
def test_rejections(mixed_results: dict[str, tuple], cid: str, fragment: str) -> None:
    rc, _tres, _extra, _name, logs, _infos = mixed_results[cid]
    assert rc == ERROR
    assert fragment in logs


@pytest.mark.parametrize(
    ("cid", "tres", "extra"),
    [
        ("round-5", "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1", "slurmpool:vgpu=7"),
        (
            "round-6-new-form",
            "gres/vgpu:7,gres/vgpufit:s7:1,gres/vgpufit:next:1",
            "slurmpool:vgpu=7",
        ),
        ("exact-3", "gres:vgpu:3,gres:vgpufit:s3:1,gres:vgpufit:next:1", "slurmpool:vgpu=3"),
        ("two-gpus", "gres:vgpu:14,gres:vgpufit:s7:2,gres:vgpufit:next:1", "slurmpool:vgpu=14"),
        ("five-gpus", "gres/vgpu:35,gres/vgpufit:s7:5,gres/vgpufit:next:1", "slurmpool:vgpu=35"),
        ("implicit-1", "gres:vgpu,gres:vgpufit:s1:1,gres:vgpufit:next:1", "slurmpool:vgpu=1"),
        (
            "with-gpu",
            "gres:gpu:a100:1,gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1",
            "slurmpool:vgpu=7",
        ),
        ("user-extra", "gres:vgpu:2,gres:vgpufit:s2:1,gres:vgpufit:next:1", "mine"),
        ("forged-extra", "gres:vgpu:1,gres:vgpufit:s1:1,gres:vgpufit:next:1", "slurmpool:vgpu=1"),
        (
            "multi-partition",
            "gres:vgpu:4,gres:vgpufit:s4:1,gres:vgpufit:next:1",
            "slurmpool:vgpu=4",
        ),
        ("modify-ok", "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1", "slurmpool:vgpu=7"),
        (
            "forged-leading-space",
            "gres:vgpu:1,gres:vgpufit:s1:1,gres:vgpufit:next:1",
            "slurmpool:vgpu=1",
        ),
        ("forged-case-spacing", "gres:vgpu:2,gres:vgpufit:s2:1,gres:vgpufit:next:1", "site=x"),
        ("forged-tab-inside", "gres:vgpu:1,gres:vgpufit:s1:1,gres:vgpufit:next:1", "a\\t,b"),
        ("forged-cpu-only", "<nil>", ""),
        ("forged-twice-cpu-only", "<nil>", "keep"),
        ("modify-extra-only", "<nil>", "mine"),
        ("modify-extra-cpu-job", "<nil>", ""),
        ("fit-new-form", "gres/vgpu=4,gres/vgpufit:s4:1,gres/vgpufit:next:1", "slurmpool:vgpu=4"),
        ("pinned", "gres:vgpu:4,gres:vgpufit:next:1", "slurmpool:vgpu=4"),
        ("modify-gres", "gres:vgpu:4,gres:vgpufit:s4:1,gres:vgpufit:next:1", "slurmpool:vgpu=4"),
        ("modify-time-only", "<nil>", "<nil>"),
        ("move-keeps-fit", "<nil>", "slurmpool:vgpu=7"),
        ("move-adds-fit", "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1", "slurmpool:vgpu=7"),
        ("move-keeps-user-extra", "<nil>", "<nil>"),
    ],
)
def test_accepted(mixed_results: dict[str, tuple], cid: str, tres: str, extra: str) -> None:
    rc, got_tres, got_extra, _name, _logs, _infos = mixed_results[cid]
    assert (rc, got_tres, got_extra) == (SUCCESS, tres, extra)


@pytest.mark.parametrize(
    ("cid", "tres"),
    [
        ("fit-operator", "gres:vgpu:4,gres:vgpufit:s7:1,gres:vgpufit:next:1"),
        ("operator-modify", "gres:vgpu:7,gres:vgpufit:s1:1,gres:vgpufit:next:1"),
    ],
)
def test_operator_sets_fit_and_is_logged(
    mixed_results: dict[str, tuple], cid: str, tres: str
) -> None:
    rc, got_tres, _extra, _name, logs, infos = mixed_results[cid]
    assert (rc, got_tres, logs) == (SUCCESS, tres, "")
    assert f"operator uid 0 set vgpufit on a job: {tres}" in infos


def test_rounding_is_told_to_the_user(mixed_results: dict[str, tuple]) -> None:
    assert "vgpu:5 rounded up to vgpu:7 (7g MIG instance)" in mixed_results["round-5"][4]
    assert mixed_results["exact-3"][4] == ""


@pytest.mark.parametrize("cid", ["whole-gpu-job", "plain-job", "vgpu-lookalike"])
def test_other_jobs_untouched(mixed_results: dict[str, tuple], cid: str) -> None:
    rc, _tres, extra, _name, logs, _infos = mixed_results[cid]
    assert (rc, extra, logs) == (SUCCESS, "<nil>", "")


def test_hostile_strings_are_data(mixed_results: dict[str, tuple]) -> None:
    rc, tres, _extra, name, _logs, _infos = mixed_results["hostile"]
    assert (rc, tres) == (SUCCESS, "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1")
    escaped = HOSTILE.replace("\\", "\\\\").replace("\n", "\\n")
    assert name == escaped  # unchanged, and nothing it says ran


def test_old_slurm_never_touches_extra(tmp_path: Path) -> None:
    policy = load_policy(ROOT / "examples" / "sandbox.yaml", variables={"root": "/r"})
    script = tmp_path / "job_submit.lua"
    script.write_text(generate(policy, installed=NODE_SLURM).files["job_submit.lua"])
    res = run_cases(script, [("a", {"tres_per_node": "gres:vgpu:6"}, None)], tmp_path)
    assert res["a"][:3] == (SUCCESS, "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1", "<nil>")


@pytest.mark.parametrize(
    ("cid", "field", "how"),
    [
        ("forged-line-name", "name", "submitted"),
        ("forged-line-comment", "comment", "submitted"),
        ("forged-line-rename", "name", "modified"),
    ],
)
def test_lines_posing_as_slurm_keys_are_logged_and_change_nothing(
    mixed_results: dict[str, tuple], cid: str, field: str, how: str
) -> None:
    rc, tres, _extra, _name, logs, infos = mixed_results[cid]
    assert rc == 0 and logs == ""
    assert f"forgery-attempt: uid 1000 {how} a job whose {field} holds a line" in infos
    assert tres == (
        "gres:vgpu:1,gres:vgpufit:s1:1,gres:vgpufit:next:1"
        if cid == "forged-line-name"
        else "<nil>"
    )
    clean = mixed_results["exact-3"][5]
    assert "forgery-attempt" not in clean


@pytest.fixture(scope="module")
def shared_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """examples/shared-pool.yaml: viz = L40S in 4 shares, desktop = A10 in 2."""
    tmp = tmp_path_factory.mktemp("lua-shared")
    slurm = InstalledSlurm(parse_version("24.11.5"), "slurmd -V")  # with Extra
    files = generate(load_policy(ROOT / "examples" / "shared-pool.yaml"), installed=slurm).files
    script = tmp / "job_submit.lua"
    script.write_text(files["job_submit.lua"])
    cases: list[Case] = [
        ("one-share", {"tres_per_node": "gres:vgpu:1"}, None),
        ("new-form", {"tres_per_node": "gres/vgpu:3", "partition": "viz"}, None),
        ("whole-gpu-as-shares", {"tres_per_node": "gres:vgpu:4"}, None),
        ("two-gpus", {"tres_per_node": "gres:vgpu:8"}, None),
        ("desktop-two", {"tres_per_node": "gres:vgpu:4", "partition": "desktop"}, None),
        ("with-gpu", {"tres_per_node": "gres:gpu:a10:1,gres:vgpu:1", "partition": "desktop"}, None),
        ("shard-direct", {"tres_per_node": "gres:shard:2"}, None),
        ("shard-new-form", {"tres_per_node": "gres/shard:1,gres/vgpu:1"}, None),
        ("shard-per-task", {"tres_per_task": "gres/shard:1"}, None),
        ("multi-sizes", {"tres_per_node": "gres:vgpu:1", "partition": "viz,desktop"}, None),
        ("modify-to-shard", {"tres_per_node": "gres:shard:4"}, {"partition": "viz"}),
        ("modify-vgpu", {"tres_per_node": "gres:vgpu:2"}, {"partition": "viz"}),
    ]
    return run_cases(script, cases, tmp)


@pytest.mark.parametrize(
    ("cid", "tres", "extra"),
    [
        ("one-share", "gres:shard:1", "slurmpool:vgpu=1"),
        ("new-form", "gres/shard:3", "slurmpool:vgpu=3"),
        ("whole-gpu-as-shares", "gres:shard:4", "slurmpool:vgpu=4"),
        ("with-gpu", "gres:gpu:a10:1,gres:shard:1", "slurmpool:vgpu=1"),
        ("modify-vgpu", "gres:shard:2", "slurmpool:vgpu=2"),
        ("multi-sizes", "gres:shard:1", "slurmpool:vgpu=1"),
    ],
)
def test_shared_requests_become_shards(
    shared_results: dict[str, tuple], cid: str, tres: str, extra: str
) -> None:
    rc, got_tres, got_extra, _name, logs, _infos = shared_results[cid]
    assert (rc, got_tres, got_extra, logs) == (SUCCESS, tres, extra, "")


@pytest.mark.parametrize(
    ("cid", "fragment"),
    [
        (
            "two-gpus",
            "a job's shares come from one GPU (4 shares); ask for at most vgpu:4, "
            "or for whole GPUs with --gres=gpu:2",
        ),
        ("desktop-two", "ask for at most vgpu:2, or for whole GPUs with --gres=gpu:2"),
        ("shard-direct", "ask for a share of a GPU as --gres=vgpu:N, not as shard"),
        ("shard-new-form", "not as shard"),
        ("shard-per-task", "not as shard"),
        ("modify-to-shard", "not as shard"),
    ],
)
def test_shared_rejections(shared_results: dict[str, tuple], cid: str, fragment: str) -> None:
    rc, _tres, _extra, _name, logs, _infos = shared_results[cid]
    assert rc == ERROR
    assert fragment in logs


ACCOUNT_RULE = """
function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.account == nil or job_desc.account == "" then
    slurm.log_user("please give --account")
    return slurm.ERROR
  end
  if job_desc.name == "wants-gpu" then
    job_desc.tres_per_node = "gres:vgpu:5"
  end
  return slurm.SUCCESS
end
-- Globals that slurmpool's own code would use, were they shared.
POOLS, check_job, split_commas = {}, nil, nil
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  error("the site's modify broke")
end
return slurm.SUCCESS
"""


def site_script(tmp: Path, site_lua: str | None) -> Path:
    """The sandbox's job_submit.lua with the site's own at the path it runs it from."""
    policy = load_policy(ROOT / "examples" / "sandbox.yaml", variables={"root": str(tmp)})
    etc = Path(policy.paths.slurm_config_dir)
    etc.mkdir(parents=True, exist_ok=True)
    if site_lua is not None:
        (etc / "job_submit.site.lua").write_text(site_lua)
    script = etc / "job_submit.lua"
    script.write_text(generate(policy, installed=NODE_SLURM).files["job_submit.lua"])
    return script


def test_the_sites_own_lua_runs_first_and_slurmpool_has_the_last_word(tmp_path: Path) -> None:
    cases: list[Case] = [
        ("no-account", {"tres_per_node": "gres:vgpu:1"}, None),
        ("account", {"tres_per_node": "gres:vgpu:6", "account": "physics"}, None),
        ("site-adds-vgpu", {"name": "wants-gpu", "account": "physics"}, None),
        ("modify", {"tres_per_node": "gres:vgpu:2"}, {"partition": "pool"}),
    ]
    res = run_cases(site_script(tmp_path, ACCOUNT_RULE), cases, tmp_path)
    assert res["no-account"][0] == ERROR and res["no-account"][4] == "please give --account"
    fitted = "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1"
    assert res["account"][:2] == (SUCCESS, fitted)
    # What the site's code asks for is rounded as any request is, and the user told.
    assert res["site-adds-vgpu"][:2] == (SUCCESS, fitted)
    assert "vgpu:5 rounded up to vgpu:7" in res["site-adds-vgpu"][4]
    rc, tres, _extra, _name, _logs, infos = res["modify"]
    assert (rc, tres) == (ERROR, "gres:vgpu:2")
    assert "error: slurmpool: the site's slurm_job_modify failed" in infos


def test_a_site_lua_that_cannot_load_closes_submission(tmp_path: Path) -> None:
    script = site_script(tmp_path, "function slurm_job_submit(\n")
    res = run_cases(script, [("any", {"name": "plain"}, None)], tmp_path)
    rc, _tres, _extra, _name, logs, _infos = res["any"]
    assert rc == ERROR and logs.startswith("job submission is closed")
