"""The one place slurmpool runs external commands.

Every Slurm command (and the few system tools the sandbox and install need)
goes through :class:`Runner`: the program is resolved once to an absolute
path from an explicit search path, it runs with an explicit environment and
a timeout, and any failure raises :class:`SlurmCommandError` carrying the
argv, the exit status and stderr.  Only the standard library is imported so
the job hooks can use it.
"""

from __future__ import annotations

import os
import subprocess

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from typing import IO

DEFAULT_SEARCH_PATH: tuple[str, ...] = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/opt/slurm/sbin",
    "/opt/slurm/bin",
)

DEFAULT_TIMEOUT_S = 30.0
# Characters of a streamed command's stderr kept for its error.
STDERR_KEPT = 64 * 1024


class SlurmCommandError(RuntimeError):
    """A command failed: it exited non-zero, timed out or was not found."""

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int | None,
        stderr: str,
        stdout: str = "",
        reason: str = "",
    ) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        what = reason or f"exited with status {returncode}"
        detail = stderr.strip() or stdout.strip()
        message = f"{' '.join(self.argv)}: {what}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class SlurmCommandTimeout(SlurmCommandError):
    """The command ran past its timeout and was killed."""


class SlurmCommandNotFound(SlurmCommandError):
    """The program is not installed in any directory of the search path."""


@record(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner:
    """Runs programs by name with absolute paths, a fixed environment and a timeout.

    ``env`` is the complete environment of every child (nothing is inherited
    implicitly); ``slurm_conf``, when given, is exported as ``SLURM_CONF``.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        search_path: Sequence[str] = DEFAULT_SEARCH_PATH,
        timeout: float = DEFAULT_TIMEOUT_S,
        slurm_conf: str | None = None,
    ) -> None:
        self.env: Mapping[str, str] = {} if env is None else env
        self.search_path = search_path
        self.timeout = timeout
        self.slurm_conf = slurm_conf
        self._paths: dict[str, str] = {}  # program name -> absolute path, resolved once

    def __repr__(self) -> str:
        return (
            f"Runner(search_path={list(self.search_path)!r}, timeout={self.timeout:g}, "
            f"slurm_conf={self.slurm_conf!r})"
        )

    def child_env(self) -> dict[str, str]:
        env = dict(self.env)
        env.setdefault("PATH", os.pathsep.join(self.search_path))
        env.setdefault("LC_ALL", "C")
        if self.slurm_conf is not None:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def which(self, name: str) -> str:
        """Absolute path of ``name`` (resolved once); raise SlurmCommandNotFound."""
        if os.path.isabs(name):
            return name
        cached = self._paths.get(name)
        if cached is not None:
            return cached
        for directory in self.search_path:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                self._paths[name] = candidate
                return candidate
        raise SlurmCommandNotFound(
            [name],
            None,
            "",
            reason=f"not found in {os.pathsep.join(self.search_path)}",
        )

    def has(self, name: str) -> bool:
        try:
            self.which(name)
        except SlurmCommandNotFound:
            return False
        return True

    def argv(self, name: str, *args: str, as_user: str | None = None) -> list[str]:
        argv = [self.which(name), *args]
        if as_user is not None:
            argv = [self.which("runuser"), "-u", as_user, "--", *argv]
        return argv

    def run(
        self,
        name: str,
        *args: str,
        timeout: float | None = None,
        check: bool = True,
        input: str | None = None,
        as_user: str | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run ``name args...`` and return its output.

        With ``check`` (the default) a non-zero exit raises SlurmCommandError.
        ``as_user`` runs the command through ``runuser -u USER --``.
        """
        argv = self.argv(name, *args, as_user=as_user)
        limit = self.timeout if timeout is None else timeout
        try:
            proc = subprocess.run(
                argv,
                input=input,
                capture_output=True,
                text=True,
                errors="replace",
                env=self.child_env(),
                timeout=limit,
                cwd=cwd,
                check=False,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise SlurmCommandTimeout(
                argv,
                None,
                _text(e.stderr),
                _text(e.stdout),
                reason=f"timed out after {limit:g} s",
            ) from None
        except OSError as e:
            raise SlurmCommandError(argv, None, "", reason=f"could not start: {e}") from None
        result = CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise SlurmCommandError(argv, proc.returncode, proc.stderr, proc.stdout)
        return result

    def stream(self, name: str, *args: str, timeout: float | None = None) -> Iterator[str]:
        """Lines of ``name args...`` as they arrive (for output too large to hold).

        Both pipes are drained as the child writes: stdout by the caller,
        stderr by a thread that keeps its last :data:`STDERR_KEPT` characters
        for the error, so a child writing a lot to stderr never stalls.  The
        child is killed at ``timeout`` seconds from its start (the Runner's
        timeout by default), and when the caller stops reading early.  Raises
        :class:`SlurmCommandTimeout` or :class:`SlurmCommandError` (with
        stderr) after the lines the child printed.
        """
        import threading

        argv = self.argv(name, *args)
        limit = self.timeout if timeout is None else timeout
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.child_env(),
                text=True,
                errors="replace",
                bufsize=1 << 20,
            )
        except OSError as e:
            raise SlurmCommandError(argv, None, "", reason=f"could not start: {e}") from None
        assert proc.stdout is not None and proc.stderr is not None
        stderr = _Tail(proc.stderr, STDERR_KEPT)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(limit, expire)
        timer.daemon = True
        timer.start()
        try:
            yield from proc.stdout
            rc = proc.wait()
            timer.cancel()
            err = stderr.text()
            if expired.is_set():
                raise SlurmCommandTimeout(argv, None, err, reason=f"timed out after {limit:g} s")
            if rc != 0:
                raise SlurmCommandError(argv, rc, err)
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stderr.join()
            proc.stdout.close()
            proc.stderr.close()

    def with_conf(self, slurm_conf: str | None) -> Runner:
        """A runner sharing this one's settings with another SLURM_CONF."""
        other = Runner(
            env=self.env,
            search_path=self.search_path,
            timeout=self.timeout,
            slurm_conf=slurm_conf,
        )
        other._paths.update(self._paths)
        return other


class _Tail:
    """Reads a text stream to its end in a thread, keeping the last ``keep`` characters."""

    def __init__(self, stream: IO[str], keep: int) -> None:
        import threading

        self._stream = stream
        self._keep = keep
        self._chunks: list[str] = []
        self._size = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self._stream.read(1 << 16), ""):
            self._chunks.append(chunk)
            self._size += len(chunk)
            while self._size - len(self._chunks[0]) >= self._keep:
                self._size -= len(self._chunks.pop(0))

    def join(self, timeout: float = 10.0) -> None:
        # Bounded: a grandchild that inherited the pipe may hold it open.
        self._thread.join(timeout)

    def text(self) -> str:
        """What was kept, once the stream has ended."""
        self.join()
        return "".join(self._chunks)[-self._keep :]


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data
