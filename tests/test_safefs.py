"""What the root hooks make cannot be redirected: each kind of squatter at each kind of
path (a link to a file or directory elsewhere, a FIFO with and without a reader, a hard
link, another user's directory) is removed or refused, and nothing elsewhere changes."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import needs
import pytest

from slurmpool.safefs import clear_squatter, create_new, open_append, open_read_write, own_dir

NOBODY = 65534


@pytest.fixture(autouse=True)
def _never_hangs() -> Iterator[None]:
    """A call that blocks (opening a FIFO for writing, say) fails the test, not the run."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("blocked: a FIFO was opened as a file")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file elsewhere that a squatter points at; it must never change."""
    path = tmp_path / "elsewhere" / "victim"
    path.parent.mkdir()
    path.write_text("precious\n")
    path.chmod(0o644)
    return path


def squatters(victim: Path) -> dict[str, Callable[[Path], None]]:
    return {
        "link to a file": lambda p: p.symlink_to(victim),
        "link to a directory": lambda p: p.symlink_to(victim.parent),
        "dangling link": lambda p: p.symlink_to(victim.parent / "new"),
        "FIFO": lambda p: os.mkfifo(p),
        "hard link": lambda p: os.link(victim, p),
    }


def planted(directory: Path, name: str, victim: Path, kind: str) -> Path:
    """``directory/name`` with a squatter of ``kind`` in it."""
    path = directory / name
    squatters(victim)[kind](path)
    return path


KINDS = ["link to a file", "link to a directory", "dangling link", "FIFO", "hard link"]


def unchanged(victim: Path) -> None:
    assert victim.read_text() == "precious\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert sorted(os.listdir(victim.parent)) == ["victim"]
    assert stat.S_IMODE(victim.parent.stat().st_mode) == 0o755


def own_regular_file(path: Path) -> None:
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()


@pytest.mark.parametrize("kind", KINDS)
def test_append_replaces_a_squatter_and_writes_only_the_log(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    log = planted(tmp_path, "hooks.log", victim, kind)
    fd = open_append(str(log), 0o600)
    with os.fdopen(fd, "a") as f:
        f.write("line\n")
    own_regular_file(log)
    assert log.read_text() == "line\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    unchanged(victim)


def test_append_to_a_fifo_someone_reads_does_not_feed_it(tmp_path: Path, victim: Path) -> None:
    log = tmp_path / "hooks.log"
    os.mkfifo(log)
    reader = os.open(log, os.O_RDONLY | os.O_NONBLOCK)  # the planter, listening
    try:
        with os.fdopen(open_append(str(log), 0o600), "a") as f:
            f.write("secret\n")
        try:
            came = os.read(reader, 100)
        except BlockingIOError:  # a writer is still there, silent
            came = b""
        assert came == b""  # nothing came through the FIFO
    finally:
        os.close(reader)
    own_regular_file(log)


def test_append_keeps_appending_to_its_own_file(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    for line in ("one\n", "two\n"):
        with os.fdopen(open_append(str(log), 0o600), "a") as f:
            f.write(line)
    assert log.read_text() == "one\ntwo\n"


@pytest.mark.parametrize("kind", KINDS)
def test_read_write_replaces_a_squatter_and_reads_back_only_its_own(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    state = planted(tmp_path, "fit-sent", victim, kind)
    fd = open_read_write(str(state), 0o600)
    try:
        assert os.read(fd, 100) == b""  # nothing of the victim's comes back
        os.write(fd, b"mine")
    finally:
        os.close(fd)
    own_regular_file(state)
    assert state.read_text() == "mine"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    unchanged(victim)
    fd = open_read_write(str(state), 0o600)  # its own file: opened as it is
    try:
        assert os.read(fd, 100) == b"mine"
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_file_is_made_in_place_of_a_squatter(tmp_path: Path, victim: Path, kind: str) -> None:
    tmp = planted(tmp_path, ".42.env.tmp", victim, kind)
    with os.fdopen(create_new(str(tmp), 0o600), "w") as f:
        f.write("export A=1\n")
    own_regular_file(tmp)
    assert tmp.read_text() == "export A=1\n"
    unchanged(victim)


@pytest.mark.parametrize("kind", KINDS)
def test_a_directory_is_made_in_place_of_a_squatter(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    (tmp_path / "run").mkdir()
    jobs = planted(tmp_path / "run", "jobs", victim, kind)
    own_dir(str(jobs), 0o711, parents=1)
    st = os.lstat(jobs)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o711
    assert os.listdir(jobs) == []
    unchanged(victim)


def test_a_parent_that_is_a_link_is_replaced_and_its_mode_left_alone(
    tmp_path: Path, victim: Path
) -> None:
    (tmp_path / "run").symlink_to(victim.parent)
    own_dir(str(tmp_path / "run" / "mps" / "gpu0"), 0o755, parents=2)
    assert not (tmp_path / "run").is_symlink() and (tmp_path / "run" / "mps" / "gpu0").is_dir()
    unchanged(victim)
    (tmp_path / "run").chmod(0o700)
    own_dir(str(tmp_path / "run" / "jobs"), 0o711, parents=1)
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o700


def test_another_users_directory_is_refused_not_removed(tmp_path: Path) -> None:
    needs.root("gives a directory to another user")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "theirs").write_text("x")
    os.chown(jobs, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match=f"{jobs} is a directory of uid {NOBODY}"):
        own_dir(str(jobs), 0o711)
    assert (jobs / "theirs").read_text() == "x"


def test_a_wrong_mode_is_set_right(tmp_path: Path) -> None:
    d = tmp_path / "ended"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    own_dir(str(d), 0o700)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


@pytest.mark.parametrize("kind", KINDS)
def test_what_sqlite_opens_by_name_is_cleared_of_squatters(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    wal = planted(tmp_path, "n1.sqlite-wal", victim, kind)
    clear_squatter(str(wal))
    assert not os.path.lexists(wal)
    mine = tmp_path / "n1.sqlite"
    mine.write_text("db")
    clear_squatter(str(mine))
    assert mine.read_text() == "db"
    unchanged(victim)


def test_a_log_this_user_may_not_open_is_left_alone(shared_dir: Path) -> None:
    """The task prolog runs as the job's user: the root-owned log is not hers to open,
    and not hers to replace either."""
    needs.root("opens the log as another user")
    state = shared_dir / "state"
    state.mkdir()
    state.chmod(0o777)  # even where she could remove it
    log = state / "hooks.log"
    log.write_text("root's\n")
    log.chmod(0o600)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child reports by its exit status)
        try:
            os.setuid(NOBODY)
            open_append(str(log), 0o600)
        except PermissionError:
            os._exit(0)
        except BaseException:
            os._exit(2)
        os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    assert log.read_text() == "root's\n"
