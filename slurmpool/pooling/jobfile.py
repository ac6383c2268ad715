"""The per-job export file: written by the prolog, printed by the TaskProlog.

The TaskProlog runs as the job's user and must be cheap, so it neither opens
the state store nor touches the GPU: the prolog writes the job's ``export``
lines to ``<run_dir>/jobs/<job id>.env`` (``run_dir`` from the node config,
default ``/run/slurmpool``), owned by the job's user, mode 0400, and the
epilog removes it.  The ``jobs`` dir is root's, mode 0711: the user can reach
their own file, nobody but root can list it.  The state dir stays root-only.
"""

from __future__ import annotations

import os
import re

from slurmpool.safefs import create_new, own_dir, remove_in

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

JOBS_DIR = "jobs"
_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Values are UUIDs, numbers and limits: nothing a shell or Slurm would interpret.
_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:=,/+-]*$")
_JOB_RE = re.compile(r"^[0-9]+(_[0-9]+)?$")


class JobFileError(ValueError):
    """An export line or job id is not one slurmpool writes."""


def jobs_dir(run_dir: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(run_dir), JOBS_DIR)


def is_job_id(name: str) -> bool:
    """Whether ``name`` is a Slurm job id (digits, an array task digits_digits)."""
    return _JOB_RE.match(name) is not None


def checked_job_id(job_id: str) -> str:
    """``job_id`` when it is a Slurm job id (digits, an array task digits_digits), so it
    can name a file; else :class:`JobFileError`."""
    if not is_job_id(job_id):
        raise JobFileError(f"job id {job_id!r} is not a Slurm job id")
    return job_id


def job_file(run_dir: str | os.PathLike[str], job_id: str) -> str:
    return os.path.join(jobs_dir(run_dir), f"{checked_job_id(job_id)}.env")


def _ensure_jobs_dir(run_dir: str | os.PathLike[str]) -> str:
    """``<run_dir>/jobs``, created if missing (``run_dir`` 0755, ``jobs`` 0711, root's)."""
    return own_dir(jobs_dir(run_dir), 0o711, parents=1)


def export_line(name: str, value: str) -> str:
    if not _NAME_RE.match(name) or not _VALUE_RE.match(value):
        raise JobFileError(f"refusing to export {name}={value!r}: unexpected characters")
    return f"export {name}={value}"


def write(run_dir: str | os.PathLike[str], job_id: str, uid: int, lines: Sequence[str]) -> str:
    """Write the job's export lines atomically, readable by ``uid`` only."""
    path = job_file(run_dir, job_id)
    d = _ensure_jobs_dir(run_dir)
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp")
    fd = create_new(tmp, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        os.chown(tmp, uid, -1)
        os.chmod(tmp, 0o400)
        os.replace(tmp, path)
    except BaseException:
        try:  # noqa: SIM105 (contextlib stays off the hook path)
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def read(run_dir: str | os.PathLike[str], job_id: str) -> str | None:
    """The file's text, or None when the job has none.

    Raises :class:`JobFileError` when the file cannot be reached (a run dir
    others cannot traverse): the job would silently run without its GPU.
    """
    path = job_file(run_dir, job_id)
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JobFileError(
            f"cannot read {path}: {e.strerror} (the run dir must be traversable and its "
            "jobs dir mode 0711 so the job's user can reach its own file)"
        ) from None


def remove(run_dir: str | os.PathLike[str], job_id: str) -> bool:
    return remove_in(jobs_dir(run_dir), os.path.basename(job_file(run_dir, job_id)))
