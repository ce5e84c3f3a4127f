"""Starting a sandboxed process with its limits, and killing all of it.

The process tree on the host is

    worker (root) -> prlimit -> bwrap (sandbox uid) -> bwrap init = PID 1 of the sandbox -> command

`prlimit` sets the rlimits and then execs bwrap, so every process of the sandbox inherits them;
that avoids a Python `preexec_fn`, which is unsafe in a threaded worker. The uid switch is done by
`subprocess` itself (`user=`/`group=`) before exec.

Killing: PID 1 of a PID namespace takes every other process in it down when it dies, and the
kernel only reports PID 1 dead once they are all gone. So `kill()` sends SIGKILL to the sandbox's
PID 1 (through a pidfd, immune to pid reuse) and waits for the outer bwrap to exit, which it does
right after reaping PID 1. When it returns, nothing of the sandbox runs any more and its uid's
process count is back to zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import resource
import signal
from collections.abc import Sequence

from environments.sandbox.config import Limits

_KILL_GRACE_S = 5.0


def prlimit_argv(limits: Limits, prlimit: str = "prlimit") -> list[str]:
    """`prlimit` options for `limits` (soft = hard, except CPU: SIGXCPU a second before SIGKILL)."""
    argv = [prlimit, "--core=0"]
    if limits.memory_bytes is not None:
        argv.append(f"--as={limits.memory_bytes}")
    if limits.processes is not None:
        argv.append(f"--nproc={limits.processes}")
    if limits.cpu_seconds is not None:
        argv.append(f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}")
    if limits.file_size_bytes is not None:
        argv.append(f"--fsize={limits.file_size_bytes}")
    if limits.open_files is not None:
        argv.append(f"--nofile={limits.open_files}")
    return [*argv, "--"]


def reachable_open_files(limits: Limits) -> Limits:
    """`limits` with `open_files` no higher than this worker can hand its sandboxes.

    prlimit runs as the sandbox's unprivileged uid, so it cannot raise the hard RLIMIT_NOFILE
    above the worker's own: a root worker first raises its own hard limit (its soft limit, what
    it uses itself, stays); any other worker caps the sandbox's at its hard limit.
    """
    wanted = limits.open_files
    if wanted is None:
        return limits
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted and os.geteuid() == 0:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, wanted))
            hard = wanted
        except (OSError, ValueError):
            pass   # above fs.nr_open, or root of a nested user namespace: cap below
    if hard != resource.RLIM_INFINITY and hard < wanted:
        return dataclasses.replace(limits, open_files=hard)
    return limits


class SandboxProcess:
    """One running sandbox (outer process plus, for bwrap, a pidfd on the sandbox's PID 1)."""

    def __init__(self, proc: asyncio.subprocess.Process, init_pidfd: int | None,
                 setup_failed: bool = False):
        self.proc = proc
        self._init_pidfd = init_pidfd
        # bwrap exited (or PID 1 was gone) before reporting the sandbox's PID 1: the sandbox
        # never ran, and stderr holds bwrap's reason.
        self.setup_failed = setup_failed

    @property
    def stdin(self) -> asyncio.StreamWriter | None:
        return self.proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        return self.proc.stdout

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        return self.proc.stderr

    async def wait(self) -> int:
        """Waits for the sandbox to end; returns its status in shell convention (128 + signal)."""
        code = await self.proc.wait()
        self._close_pidfd()
        return 128 - code if code < 0 else code

    async def kill(self) -> None:
        """Kills every process of the sandbox and returns once they are all gone."""
        if self.proc.returncode is None:
            if self._init_pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            else:
                # Without a pid namespace handle (apptainer): the whole process group. Apptainer's
                # --containall PID namespace then dies with its init, which is in that group.
                _killpg(self.proc.pid)
            try:
                await asyncio.wait_for(self.proc.wait(), _KILL_GRACE_S)
            except TimeoutError:
                _killpg(self.proc.pid)
                await self.proc.wait()
        self._close_pidfd()

    def open_pid_namespace(self) -> int | None:
        """An fd (close-on-exec) of the PID namespace of the sandbox's PID 1; None if it is gone.

        The pid is read from the pidfd, and the pidfd checked alive after the namespace is
        opened: the namespace is that process's, not a later one's with a reused pid.
        """
        if self._init_pidfd is None or self.proc.returncode is not None:
            return None
        with open(f"/proc/self/fdinfo/{self._init_pidfd}") as f:
            pid = next((int(line.split()[1]) for line in f if line.startswith("Pid:")), -1)
        if pid <= 0:
            return None
        try:
            fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            signal.pidfd_send_signal(self._init_pidfd, 0)
        except ProcessLookupError:
            os.close(fd)
            return None
        return fd

    def _close_pidfd(self) -> None:
        if self._init_pidfd is not None:
            os.close(self._init_pidfd)
            self._init_pidfd = None


async def spawn(argv: Sequence[str], *, uid: int | None, cwd: str, stdin_pipe: bool,
                info_fd_flag: bool, env: dict[str, str] | None = None,
                pass_fds: Sequence[int] = ()) -> SandboxProcess:
    """Starts `argv` (prlimit + backend argv) as `uid`, stdout/stderr piped.

    Args:
      argv: the full command line; if `info_fd_flag`, it must contain the placeholder "{info_fd}"
        where bwrap's --info-fd number goes.
      uid: host uid (and gid) to run as; None: the current one.
      cwd: host working directory of the outer process (must be accessible to `uid`).
      stdin_pipe: give the sandbox a stdin pipe (else /dev/null).
      info_fd_flag: read bwrap's --info-fd for the sandbox's PID 1.
      env: host-side environment of the outer process (backends clear it for the inside).
      pass_fds: more fds the command inherits at the same numbers (a user namespace's).
    Raises:
      OSError: the outer process could not start (e.g. bwrap missing).
    """
    info_r = info_w = None
    if info_fd_flag:
        info_r, info_w = os.pipe()
        argv = [str(info_w) if a == "{info_fd}" else a for a in argv]
    ids = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env if env is not None else {"PATH": os.environ.get("PATH", os.defpath)},
            start_new_session=True,
            pass_fds=(*pass_fds, *(() if info_w is None else (info_w,))),
            **ids,
        )
    finally:
        if info_w is not None:
            os.close(info_w)
    if info_r is None:
        return SandboxProcess(proc, None)
    started, pidfd = await _read_init_pidfd(info_r, proc.pid)
    return SandboxProcess(proc, pidfd, setup_failed=not started)


async def _read_init_pidfd(fd: int, parent: int) -> tuple[bool, int | None]:
    """Reads bwrap's JSON info (EOF once the sandbox is set up) and opens a pidfd on PID 1.

    Returns (whether bwrap reported a PID 1, the pidfd or None if PID 1 already exited).
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    try:
        data = await reader.read()
    finally:
        transport.close()
    try:
        pid = int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return False, None  # bwrap failed before setting the sandbox up
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True, None  # PID 1 already exited: the command was that quick
    # The pidfd pins the process; make sure it is still ours (not a reused pid) before keeping it.
    if _parent_pid(pid) != parent:
        os.close(pidfd)
        return True, None
    return True, pidfd


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # "pid (comm) state ppid ...": comm may contain spaces, so split after the last ')'.
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
