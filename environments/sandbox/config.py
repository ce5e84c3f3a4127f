"""Sandbox configuration: what a sandbox may see, write, and consume.

Everything here is plain data so that a task worker can build it from its own config and a test
can shrink the limits to make faults fast to trigger.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox: rlimits of each process, and the sandbox's totals.

    The totals (memory, cpus, disk) need a root worker (cgroups, tmpfs mounts); without root
    only the per-process rlimits hold.

    Attributes:
      memory_bytes: RLIMIT_AS of every process: address space, so it also counts memory that is
        mapped but never touched. None: unlimited.
      processes: RLIMIT_NPROC: processes and threads of the sandbox together, including the ~2
        bwrap helper processes. Effective because each sandbox runs as its own unprivileged host
        uid (see `uids.py`). None: unlimited.
      cpu_seconds: RLIMIT_CPU of every process (SIGXCPU at the limit, SIGKILL a second later).
      file_size_bytes: RLIMIT_FSIZE: the largest file a process may write (SIGXFSZ beyond).
      open_files: RLIMIT_NOFILE (soft = hard); capped at what the worker may set (see
        `process.reachable_open_files`). A container's is `container_open_files()`.
      shm_bytes: size of the sandbox's /dev/shm (a tmpfs, i.e. memory outside RLIMIT_AS).
      timeout_s: default wall-clock limit of one command (exec or session run).
      output_bytes: stdout and stderr are each truncated to this many bytes.
      sandbox_memory_bytes: memory of all the sandbox's processes together, and the tmpfs pages
        they write (a memory cgroup, see `cgroup.py`). None: unlimited.
      cpus: CPU quota of the sandbox, in CPUs (a CFS quota): one session cannot take more than
        this of the machine however many processes it runs. None: unlimited.
      disk_bytes: byte quota of everything the sandbox writes (its private layer is a tmpfs of
        this size, see `layer.py`). None: unbounded (the scratch directory's file system).
    """

    memory_bytes: int | None = 2 * 1024**3
    processes: int | None = 256
    cpu_seconds: int | None = 120
    file_size_bytes: int | None = 512 * 1024**2
    open_files: int | None = 1024
    shm_bytes: int = 64 * 1024**2
    timeout_s: float = 60.0
    output_bytes: int = 64 * 1024
    sandbox_memory_bytes: int | None = 2 * 1024**3
    cpus: float | None = 1.0
    disk_bytes: int | None = 1024**3


DOCKER_OPEN_FILES = 1_048_576   # Docker's default RLIMIT_NOFILE of a container, soft and hard


def container_open_files() -> int:
    """A container's RLIMIT_NOFILE: Docker's default, capped at the kernel's `fs.nr_open`.

    Scripts depend on it: bash's `exec 5>f` and `echo x 5>f` need fd numbers past a small limit
    (bash keeps its own fds at 255 and up), and programs size tables by it.
    """
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return min(DOCKER_OPEN_FILES, int(f.read()))
    except (OSError, ValueError):
        return DOCKER_OPEN_FILES


def default_worker_memory_bytes() -> int:
    """Half of the host's memory: the default bound of one worker's sandboxes together."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


DEFAULT_WRITABLE = ("/root", "/home", "/tmp", "/var/tmp")


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """How to build a sandbox.

    Attributes:
      image: a root-filesystem directory (see `images/build_rootfs.sh`), mounted read-only as `/`.
        None: the host's /usr (and the /bin, /lib*, /sbin links) read-only plus a minimal /etc.
      backend: "bwrap", "apptainer" or "auto" (apptainer when its binary is on PATH).
      network: False gives the sandbox its own empty network namespace (loopback only, which is
        not the host's loopback). True shares the host's network, loopback included.
      writable: the only writable paths inside; each is an empty directory of the private layer.
      writable_root: instead, a copy-on-write `/` over the image (an overlay whose upper layer
        is the private layer, discarded with it); needs an image directory and a root worker.
      workdir: initial working directory (and HOME); should be under one of `writable`.
      scratch_dir: host directory that holds the private layers; None: $TMPDIR/agentrl_sandbox.
      uid_range: (first, count) of host uids handed out one per sandbox when running as root.
      inside_uid: uid seen inside the sandbox (0 = "root" without any capability).
      env: environment of the sandboxed processes (the host's is never inherited).
      ro_binds: extra (host_path, sandbox_path) read-only binds, e.g. task data.
      hostname: hostname inside.
      limits: resource limits.
      worker_memory_bytes: bound of the memory of all the sandboxes of this worker process
        together (their common parent cgroup; the last config to start a sandbox sets it).
      uid_block: the sandbox has users of its own, as a container: inside uids and gids
        0..65535 map to a block of host ids leased to it alone (`uid_block.py`), and its root
        holds the namespaced capabilities a container's root has (`bwrap.USERS_CAPS`), so
        `useradd`, `chown`, `su` work. Needs a host-root worker, the bwrap backend and
        `inside_uid` 0. False: one uid, no capabilities.
    """

    image: str | None = None
    backend: str = "auto"
    network: bool = False
    writable: tuple[str, ...] = DEFAULT_WRITABLE
    workdir: str = "/root"
    scratch_dir: str | None = None
    uid_range: tuple[int, int] = (3_000_000, 65_536)
    inside_uid: int = 0
    env: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
    )
    ro_binds: tuple[tuple[str, str], ...] = ()
    hostname: str = "sandbox"
    limits: Limits = Limits()
    writable_root: bool = False
    worker_memory_bytes: int | None = dataclasses.field(default_factory=default_worker_memory_bytes)
    uid_block: bool = False

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "bwrap", "apptainer"):
            raise ValueError(f"unknown sandbox backend {self.backend!r}")
        for path in (*self.writable, self.workdir, *(dst for _, dst in self.ro_binds)):
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"sandbox paths must be absolute and normalised: {path!r}")
        if self.writable_root and self.image is None:
            raise ValueError("a writable root needs an image to copy on write")
        if self.uid_block and self.inside_uid != 0:
            raise ValueError("a sandbox with users of its own runs as its root (inside_uid 0)")

    def resolved_backend(self) -> str:
        """The backend to use: "auto" picks apptainer only when its binary is installed."""
        if self.backend != "auto":
            return self.backend
        return "apptainer" if shutil.which("apptainer") else "bwrap"

    def resolved_scratch_dir(self) -> str:
        return self.scratch_dir or os.path.join(tempfile.gettempdir(), "agentrl_sandbox")
