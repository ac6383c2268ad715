"""Stand-in ``sacct``/``sacctmgr``/``squeue`` programs for the accounting tests (real
executables).

They keep AdminComments in ``<dir>/db.json`` and behave like Slurm 22.05
where slurmpool depends on it (SLURM_FACTS.md): ``sacctmgr modify job``
lowercases the value and turns double quotes into backticks, changes
nothing (exit 1, "Nothing modified") for a job without a record, and with
``<dir>/down`` present both print the errors of a dead slurmdbd and exit 1.
Each job record has a state and an End (``COMPLETED`` and a time unless the
test says otherwise); ``sacct`` prints the fields its ``-o`` names (empty for
one the record lacks), or a row the test set whole (:meth:`FakeDbd.add_raw`).
``squeue`` stands for slurmctld, which a dead slurmdbd does not stop: it prints
the line set with :meth:`FakeDbd.set_live` and fails like 22.05 for a job
slurmctld does not know.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

_COMMON = """
import json, os, sys
d = {dir!r}
db = os.path.join(d, "db.json")
def load():
    try:
        return json.load(open(db))
    except FileNotFoundError:
        return {{}}
if os.path.exists(os.path.join(d, "down")):
    sys.stderr.write("{prog}: error: slurm_persist_conn_open_without_init: failed to open "
                     "persistent connection to host:127.0.0.1:6819: Connection refused\\n")
    sys.exit(1)
with open(os.path.join(d, "calls.log"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
"""

_SACCT = (
    _COMMON
    + """
a = sys.argv[1:]
job = a[a.index("-j") + 1]
jobs = load()
if job in jobs:
    r = jobs[job]
    if "raw" in r:
        print(job + "|" + r["raw"])
    else:
        names = a[a.index("-o") + 1].split(",")
        r = {{"JobIDRaw": job, "State": r["state"], "End": r["end"], "AdminComment": r["comment"]}}
        print("|".join(r.get(n, "") for n in names))
"""
)

_SACCTMGR = (
    _COMMON
    + """
a = sys.argv[1:]
job = next(x.split("=", 1)[1] for x in a if x.startswith("jobid="))
value = next(x.split("=", 1)[1] for x in a if x.startswith("AdminComment="))
jobs = load()
if job not in jobs:
    print(" Nothing modified")
    sys.stderr.write("sacctmgr: accounting_storage/slurmdbd: acct_storage_p_modify_job: "
                     "Request didn't affect anything or your user doesn't have privilege "
                     "to perform this action\\n")
    sys.exit(1)
jobs[job]["comment"] = value.lower().replace('"', "`")
json.dump(jobs, open(db, "w"))
print(" Modified jobs...")
"""
)


_SQUEUE = """
import json, os, sys
a = sys.argv[1:]
job = a[a.index("-j") + 1]
try:
    live = json.load(open(os.path.join({dir!r}, "ctld.json")))
except FileNotFoundError:
    live = {{}}
if job not in live:
    sys.stderr.write("slurm_load_jobs error: Invalid job id specified\\n")
    sys.exit(1)
print(live[job])
"""


class FakeDbd:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.bin = directory / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        for prog, body in (("sacct", _SACCT), ("sacctmgr", _SACCTMGR), ("squeue", _SQUEUE)):
            path = self.bin / prog
            path.write_text(f"#!{sys.executable}\n" + body.format(dir=str(directory), prog=prog))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def add_job(
        self,
        job_id: str,
        comment: str = "",
        state: str = "COMPLETED",
        end: str = "2026-12-05T10:00:00",
    ) -> None:
        """Give ``job_id`` a record (or replace its record), as slurmctld's would land."""
        records = self._records()
        records[job_id] = {"comment": comment, "state": state, "end": end}
        (self.dir / "db.json").write_text(json.dumps(records))

    def add_raw(self, job_id: str, row: str) -> None:
        """``sacct`` prints ``job_id|row`` for this job, whatever fields it is asked for."""
        records = self._records()
        records[job_id] = {"raw": row}
        (self.dir / "db.json").write_text(json.dumps(records))

    def set_comment(self, job_id: str, comment: str) -> None:
        """Another writer (another node, a late record) sets the AdminComment."""
        records = self._records()
        records[job_id]["comment"] = comment
        (self.dir / "db.json").write_text(json.dumps(records))

    def _records(self) -> dict[str, dict[str, str]]:
        try:
            return dict(json.loads((self.dir / "db.json").read_text()))
        except FileNotFoundError:
            return {}

    def jobs(self) -> dict[str, str]:
        """Job id -> AdminComment."""
        return {job: r.get("comment", r.get("raw", "")) for job, r in self._records().items()}

    def set_live(self, job_id: str, squeue_line: str | None) -> None:
        """What slurmctld says of ``job_id`` (one ``squeue -O`` output line; None: it
        does not know the job)."""
        path = self.dir / "ctld.json"
        live = json.loads(path.read_text()) if path.exists() else {}
        if squeue_line is None:
            live.pop(job_id, None)
        else:
            live[job_id] = squeue_line
        path.write_text(json.dumps(live))

    def set_state(self, job_id: str, state: str, nodes: str = "") -> None:
        """slurmctld holds ``job_id`` in ``state`` (as ``squeue`` prints it)."""
        alloc = "" if state == "PENDING" else "cpu=1,gres/vgpu=2"
        self.set_live(job_id, f"{job_id}|{state}|alice|acct|batch|{nodes}|0:05|{alloc}|")

    def set_down(self, down: bool) -> None:
        flag = self.dir / "down"
        if down:
            flag.touch()
        elif flag.exists():
            os.unlink(flag)

    def calls(self) -> list[str]:
        try:
            return (self.dir / "calls.log").read_text().splitlines()
        except FileNotFoundError:
            return []
