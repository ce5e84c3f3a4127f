"""One isolated environment: a leased host uid, a private layer, cgroups, and a backend to run in.

`Sandbox.exec` builds one per command; a `ShellSession` keeps one for its whole life. As root,
the layer is a tmpfs of `limits.disk_bytes` (with `writable_root`, a copy-on-write root over the
image) and the sandbox's processes share one cgroup (`limits.sandbox_memory_bytes`,
`limits.cpus`, `limits.processes`); without root, only the per-process rlimits hold. With
`uid_block` the lease is of a block of host ids and the sandbox gets a user namespace mapping
them (`uid_block.py`), held here for its life.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Mapping, Sequence

from environments.sandbox import cgroup, mounts, offline_packages, seccomp, uid_block
from environments.sandbox.apptainer import apptainer_argv
from environments.sandbox.bwrap import bwrap_argv, pristine_system_problem
from environments.sandbox.config import SandboxConfig
from environments.sandbox.layer import PrivateLayer
from environments.sandbox.process import (
    SandboxProcess,
    prlimit_argv,
    reachable_open_files,
    spawn,
)
from environments.sandbox.result import hit_process_limit, mentions_eagain
from environments.sandbox.uids import UidLease, acquire_uid, count_processes

_SCAN_INTERVAL_S = 0.25
_LEFT_RUNNING_SHARE = 0.5  # of the process limit, still held after a command that saw EAGAIN


class SandboxError(RuntimeError):
    """The sandbox cannot be built: missing tool, unusable image, no free uid, bwrap failure."""


class SandboxInstance:
    """One isolated environment. Construct, `start()` processes in it, then `close()`."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.backend = config.resolved_backend()
        tool = shutil.which(self.backend)
        prlimit = shutil.which("prlimit")
        if tool is None or prlimit is None:
            raise SandboxError(f"sandbox backend needs `{self.backend}` and `prlimit` on PATH "
                               "(Debian: bubblewrap, util-linux)")
        self._tool, self._prlimit = tool, prlimit
        if self.backend == "apptainer" and config.image is None:
            raise SandboxError("the apptainer backend needs an image (a .sif or a directory)")
        can_mount = os.geteuid() == 0 and mounts.host_root()
        root_mounts = can_mount and self.backend == "bwrap"   # the writable root's, if asked
        if config.writable_root and self.backend == "bwrap":
            if not can_mount:
                raise SandboxError("a writable root needs a worker that is host root "
                                   "(idmapped and overlay mounts, one host uid per sandbox)")
            if not os.path.isdir(config.image):
                raise SandboxError(f"a writable root needs a directory image: {config.image!r}")
        if config.uid_block and not (root_mounts and cgroup.available()):
            raise SandboxError("a sandbox with users of its own needs the bwrap backend, a "
                               "worker that is host root (it maps a block of host ids) and "
                               "cgroup controllers (a pids limit for all its users)")
        self._lease: UidLease | None = None
        self._userns: int | None = None
        if os.geteuid() == 0:
            if config.image is not None:
                _check_world_readable(config.image)
            try:
                self._lease = (acquire_uid(uid_block.BLOCK_BASE, uid_block.BLOCKS,
                                           stride=uid_block.BLOCK_SIZE) if config.uid_block
                               else acquire_uid(*config.uid_range))
            except RuntimeError as e:
                raise SandboxError(str(e)) from e
        self.cgroup: cgroup.SandboxCgroup | None = None
        try:
            if config.uid_block:
                self._userns = uid_block.make_userns(self.uid)
            self.layer = PrivateLayer(
                config.resolved_scratch_dir(), config.writable, owner=self.uid,
                inside_uid=config.inside_uid, hostname=config.hostname,
                size_bytes=config.limits.disk_bytes if can_mount else None,
                image=config.image if config.writable_root and root_mounts else None,
                owner_block=config.uid_block)
        except OSError as e:
            self._release_uid()
            raise SandboxError(f"cannot build the sandbox's private layer: {e}") from e
        except BaseException:
            self._release_uid()
            raise
        limits = config.limits
        wants_cgroup = (limits.sandbox_memory_bytes is not None or limits.cpus is not None
                        or config.uid_block)
        if self.uid is not None and wants_cgroup and cgroup.available():
            try:
                self.cgroup = cgroup.SandboxCgroup(
                    os.path.basename(self.layer.path), self.uid, limits.sandbox_memory_bytes,
                    limits.cpus, config.worker_memory_bytes,
                    processes=limits.processes if config.uid_block else None,
                    freezer=config.uid_block and self.backend == "bwrap"
                    and cgroup.freezer_available())
            except BaseException as e:
                self.close()
                if isinstance(e, OSError):
                    raise SandboxError(f"cannot create the sandbox's cgroups: {e}") from e
                raise

    @property
    def uid(self) -> int | None:
        """The host uid the sandbox runs as (None: the worker's own, when not root)."""
        return None if self._lease is None else self._lease.uid

    @property
    def can_freeze(self) -> bool:
        """Whether a grader can run beside the sandbox's frozen processes (`freeze`, `beside`).

        Needs the freezer groups and the sandbox's own user namespace (`uid_block`), which
        owns its PID namespace.
        """
        return self.cgroup is not None and bool(self.cgroup.freezers) and self._userns is not None

    def freeze(self) -> None:
        """Stops every process of the sandbox where they are (see `cgroup.py`)."""
        assert self.cgroup is not None and self.can_freeze, "check can_freeze first"
        self.cgroup.freeze()

    def frozen(self) -> bool:
        return self.cgroup is not None and self.cgroup.frozen()

    def kill_group(self, group: str) -> None:
        """SIGKILLs every process of freezer group `group` (cgroup.AGENT or GRADER), thawed."""
        if self.cgroup is not None and self.cgroup.freezers:
            self.cgroup.kill(group)

    async def start(self, command: Sequence[str], stdin_pipe: bool = False,
                    pristine_system: bool = False, env: Mapping[str, str] | None = None,
                    beside: SandboxProcess | None = None) -> SandboxProcess:
        """Starts `command` inside. Raises SandboxError when the outer process cannot start.

        `pristine_system`: the system's code from the untouched image (see `bwrap.py`); start
        it only while nothing else of the sandbox runs (or all of it is frozen). `env`
        replaces `config.env`. `beside`: a running sandbox process (the shell) whose PID
        namespace the command joins, as a grader (its own freezer group, see `can_freeze`).
        """
        limits = prlimit_argv(reachable_open_files(self.config.limits), self._prlimit)
        if pristine_system:
            await self._lay_installed_packages()
            problem = pristine_system_problem(self.config, self.layer)
            if problem is not None:
                raise SandboxError(f"no pristine system over this root: {problem}")
        pidns = None
        if beside is not None:
            if not self.can_freeze or self.backend != "bwrap":
                raise SandboxError("a command beside the sandbox's processes needs can_freeze")
            pidns = beside.open_pid_namespace()
            if pidns is None:
                raise SandboxError("the sandbox's PID 1 is gone")
        try:
            return await self._spawn(command, limits, stdin_pipe, pristine_system, env, pidns)
        finally:
            if pidns is not None:
                os.close(pidns)

    async def _lay_installed_packages(self) -> None:
        """Over a writable root, a pristine-system process also gets the trusted copies of
        the packages the sandbox installed from its image's offline repository
        (`offline_packages.py`); in a thread, so that other sandboxes are not held up."""
        if not (self.config.writable_root and self.layer.pristine is not None):
            return
        try:
            debs = await asyncio.to_thread(offline_packages.added_debs, self.config.image,
                                           self.layer.root)
            await asyncio.to_thread(self.layer.grading_system, debs)
        except (OSError, ValueError) as e:
            raise SandboxError("cannot lay the packages the sandbox installed over its "
                               f"pristine system: {e}") from e

    async def _spawn(self, command: Sequence[str], limits: list[str], stdin_pipe: bool,
                     pristine_system: bool, env: Mapping[str, str] | None,
                     pidns: int | None) -> SandboxProcess:
        # Every bwrap sandbox gets the filter that refuses nested user namespaces (seccomp.py).
        filter_fd = seccomp.program_fd() if self.backend == "bwrap" else None
        try:
            if self.backend == "bwrap":
                inner = bwrap_argv(self.config, self.layer, command, info_fd="{info_fd}",
                                   bwrap=self._tool, pristine_system=pristine_system, env=env,
                                   userns_fd=self._userns, pidns_fd=pidns, seccomp_fd=filter_fd)
            else:
                inner = apptainer_argv(self.config, self.layer, command, apptainer=self._tool,
                                       pristine_system=pristine_system, env=env)
            outer_env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8",
                         "HOME": self.layer.path}
            group = cgroup.AGENT if pidns is None else cgroup.GRADER
            attach = self.cgroup.attach_argv(group) if self.cgroup is not None else []
            fds = tuple(fd for fd in (self._userns, pidns, filter_fd) if fd is not None)
            try:
                return await spawn([*attach, *limits, *inner], uid=self.uid,
                                   cwd=self.layer.path, stdin_pipe=stdin_pipe,
                                   info_fd_flag=self.backend == "bwrap", env=outer_env,
                                   pass_fds=fds)
            except OSError as e:
                raise SandboxError(f"cannot start {self.backend}: {e}") from e
        finally:
            if filter_fd is not None:
                os.close(filter_fd)

    def process_count(self) -> int | None:
        """The processes the sandbox holds now (None: no uid or no process limit to count
        against)."""
        if self.uid is None or not self.config.limits.processes:
            return None
        # A sandbox with users: all its uids' processes, in its pids cgroup (threads count too).
        return (self.cgroup.process_count() if self.config.uid_block and self.cgroup
                else count_processes(self.uid))

    def at_process_limit(self) -> bool:
        """Whether the sandbox's uid holds (nearly) all the processes it may (None uid: unknown)."""
        count = self.process_count()
        # -2: fork errors make the count dip
        return count is not None and count >= self.config.limits.processes - 2

    def close(self) -> None:
        """Deletes the private layer and the cgroups, returns the uid. Kill the processes first."""
        try:
            self.layer.remove()
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()
            self._release_uid()

    def _release_uid(self) -> None:
        if self._userns is not None:
            os.close(self._userns)
            self._userns = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None


class ProcessLimitWatch:
    """Decides, while a command runs, whether its sandbox ran out of processes.

    Shells say so plainly ("fork: retry: Resource temporarily unavailable"); other programs only
    print EAGAIN (Python: "BlockingIOError: [Errno 11] Resource temporarily unavailable"), which
    a non-blocking socket also raises. So a bare EAGAIN counts only when the sandbox's uid is
    indeed at its process limit, checked at most every quarter second (it scans /proc).
    """

    def __init__(self, instance: SandboxInstance):
        self._instance = instance
        self._next_scan = 0.0

    def __call__(self, stderr: bytes) -> bool:
        if hit_process_limit(stderr):
            return True
        if not mentions_eagain(stderr) or time.monotonic() < self._next_scan:
            return False
        self._next_scan = time.monotonic() + _SCAN_INTERVAL_S
        return self._instance.at_process_limit()

    def left_running(self, stderr: bytes) -> bool:
        """Whether a command that has just ended was a fork bomb that outlives it.

        A Python bomb's parent dies of its first failed fork (an uncaught BlockingIOError)
        while its children fork on; the command then ends with the sandbox not quite full.
        An EAGAIN in its stderr and half the process budget still running behind it say so.
        """
        if not mentions_eagain(stderr):
            return False
        count = self._instance.process_count()
        return hit_process_limit(stderr) or (
            count is not None
            and count >= _LEFT_RUNNING_SHARE * self._instance.config.limits.processes)


def _check_world_readable(path: str) -> None:
    """The image is opened by an unprivileged uid: it and every ancestor must be reachable."""
    path = os.path.realpath(path)
    if not os.path.exists(path):
        raise SandboxError(f"sandbox image {path!r} does not exist")
    parts = path.split("/")
    for i in range(2, len(parts) + (not os.path.isfile(path))):
        ancestor = "/".join(parts[:i])  # the directories down to the image (a dir, or a .sif's)
        if not os.stat(ancestor).st_mode & 0o001:
            raise SandboxError(f"sandbox image {path!r} is not reachable by unprivileged users: "
                               f"{ancestor!r} lacks o+x (keep images under e.g. /var/cache)")
    if os.path.isfile(path) and not os.stat(path).st_mode & 0o004:
        raise SandboxError(f"sandbox image {path!r} is not readable by unprivileged users")
