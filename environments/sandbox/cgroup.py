"""Whole-sandbox memory, CPU and process limits: one cgroup (v1 memory, cpu, pids) per sandbox.

rlimits bound each process, not the sandbox: 256 processes of 2 GB address space each are far
more than a machine has. A memory cgroup bounds the sandbox's processes together, tmpfs pages
they write included (the private layer's quota is memory too), a CFS quota bounds its CPU, and
a pids limit its processes and threads whatever uids they run as (RLIMIT_NPROC counts one uid,
and a sandbox with users of its own, `uid_block.py`, runs many).

Layout, under the worker's own cgroup of each controller (so that whatever limits the worker
already runs under still hold):

    <worker cgroup>/agentrl_jax-<worker pid>/                 memory.limit_in_bytes = worker total
    <worker cgroup>/agentrl_jax-<worker pid>/<sandbox id>/    memory, CPU, pids of one sandbox

A sandbox's processes are put in its cgroup before bwrap starts: the outer process is a tiny
`sh` that writes its own pid into the cgroups' `cgroup.procs` (owned by the sandbox's uid for
that) and then execs prlimit and bwrap, so everything started inside inherits the cgroups. The
sandbox cannot see or change them: it has no /sys/fs/cgroup.

Needs root and cgroup v1 controllers mounted at /sys/fs/cgroup/<controller> (`available()`).

Freezing (`freezer=True`, where the v1 freezer is mounted: `freezer_available()`). A sandbox's
processes are in its freezer cgroup `<sandbox id>`, a grader's beside them in `<sandbox
id>.grader`: `freeze()` stops every process of the sandbox at once, forks in flight included,
so that a grader can look at them (`ps`, their files) while none of them can act, and
`kill(group)` ends every process of a group (a frozen v1 task dies only once thawed, so it is
killed frozen, then thawed).
"""

from __future__ import annotations

import atexit
import errno
import functools
import os
import signal
import threading
import time

CGROUP_ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "cpu", "pids")
FREEZER = "freezer"
AGENT, GRADER = "agent", "grader"   # the freezer groups of one sandbox
CFS_PERIOD_US = 100_000
_ATTACH = ('while [ "$1" != -- ]; do printf "%s\\n" "$$" > "$1" || exit 125; shift; done; '
           'shift; exec "$@"')
_lock = threading.Lock()


def available() -> bool:
    """Whether this process can make v1 memory, cpu and pids cgroups (root, mounted)."""
    return os.geteuid() == 0 and all(
        os.path.isfile(os.path.join(CGROUP_ROOT, c, "cgroup.procs")) for c in CONTROLLERS)


def freezer_available() -> bool:
    """Whether this process can also make v1 freezer cgroups."""
    return available() and os.path.isfile(os.path.join(CGROUP_ROOT, FREEZER, "cgroup.procs"))


def own_cgroup(controller: str) -> str:
    """This process's cgroup directory for `controller` (from /proc/self/cgroup)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return os.path.join(CGROUP_ROOT, controller, path.lstrip("/"))
    raise OSError(f"no {controller} cgroup for this process")


@functools.cache
def _worker_group(controller: str) -> str:
    path = os.path.join(own_cgroup(controller), f"agentrl_jax-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    atexit.register(_remove_quietly, path)
    return path


def remove_stale_groups() -> list[str]:
    """Removes the cgroups of workers that died (their `agentrl_jax-<pid>` parents)."""
    removed = []
    for controller in (*CONTROLLERS, *((FREEZER,) if freezer_available() else ())):
        parent = own_cgroup(controller)
        for name in os.listdir(parent):
            if not name.startswith("agentrl_jax-") or not name[12:].isdigit():
                continue
            if os.path.exists(f"/proc/{name[12:]}"):
                continue
            group = os.path.join(parent, name)
            for child in os.listdir(group):
                if os.path.isdir(os.path.join(group, child)):
                    _remove_quietly(os.path.join(group, child))
            _remove_quietly(group)
            if not os.path.exists(group):
                removed.append(group)
    return removed


def _set_worker_memory(limit_bytes: int | None) -> None:
    _write(os.path.join(_worker_group("memory"), "memory.limit_in_bytes"),
           -1 if limit_bytes is None else limit_bytes)


class SandboxCgroup:
    """The cgroups of one sandbox. Construct (creates them), `attach_argv()`, then `remove()`.

    Args:
      name: unique among this worker's live sandboxes (the private layer's id).
      owner: host uid of the sandbox, which must be able to put itself in.
      memory_bytes: limit of the sandbox's memory (RAM and tmpfs pages); None: none.
      cpus: CPU quota in CPUs (0.5: half of one core); None: none.
      worker_memory_bytes: total limit of all this worker's sandboxes; None: none.
      processes: limit of the sandbox's processes and threads together; None: none.
      freezer: also the freezer groups AGENT and GRADER (see the module docstring).
    """

    def __init__(self, name: str, owner: int, memory_bytes: int | None, cpus: float | None,
                 worker_memory_bytes: int | None, processes: int | None = None,
                 freezer: bool = False):
        with _lock:
            self.paths = {c: os.path.join(_worker_group(c), name) for c in CONTROLLERS}
            self.freezers = ({AGENT: os.path.join(_worker_group(FREEZER), name),
                              GRADER: os.path.join(_worker_group(FREEZER), name + ".grader")}
                             if freezer else {})
            _set_worker_memory(worker_memory_bytes)
        try:
            for path in (*self.paths.values(), *self.freezers.values()):
                os.mkdir(path)
                for name_ in ("cgroup.procs", "tasks"):
                    os.chown(os.path.join(path, name_), owner, owner)
            if memory_bytes is not None:
                memory = self.paths["memory"]
                _write(os.path.join(memory, "memory.limit_in_bytes"), memory_bytes)
                _write_if_present(os.path.join(memory, "memory.memsw.limit_in_bytes"),
                                  memory_bytes)  # no swap around the limit, where swap exists
            if cpus is not None:
                cpu = self.paths["cpu"]
                _write(os.path.join(cpu, "cpu.cfs_period_us"), CFS_PERIOD_US)
                _write(os.path.join(cpu, "cpu.cfs_quota_us"), max(1000, int(cpus * CFS_PERIOD_US)))
            if processes is not None:
                _write(os.path.join(self.paths["pids"], "pids.max"), processes)
        except BaseException:
            self.remove()
            raise

    def attach_argv(self, group: str = AGENT) -> list[str]:
        """The prefix that runs the rest of an argv inside this sandbox's cgroups.

        `group`: the freezer group (AGENT or GRADER) when the sandbox has them.
        """
        paths = [*self.paths.values(), *([self.freezers[group]] if self.freezers else [])]
        procs = [os.path.join(p, "cgroup.procs") for p in paths]
        return ["/bin/sh", "-c", _ATTACH, "agentrl-cgroup", *procs, "--"]

    def memory_usage(self) -> tuple[int, int]:
        """(current, peak) memory of the sandbox in bytes."""
        memory = self.paths["memory"]
        return tuple(_read_int(os.path.join(memory, f))          # type: ignore[return-value]
                     for f in ("memory.usage_in_bytes", "memory.max_usage_in_bytes"))

    def process_count(self) -> int:
        """Processes and threads in the sandbox now (what its pids limit counts)."""
        return _read_int(os.path.join(self.paths["pids"], "pids.current"))

    def pids(self) -> list[int]:
        with open(os.path.join(self.paths["memory"], "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]

    def freeze(self) -> None:
        """Stops every process of the AGENT group; returns once all are frozen."""
        self._set_state(AGENT, "FROZEN")

    def kill(self, group: str) -> None:
        """SIGKILLs every process of a freezer group and leaves it thawed (and soon empty)."""
        self._set_state(group, "FROZEN")
        with open(os.path.join(self.freezers[group], "cgroup.procs")) as f:
            for line in f:
                try:
                    os.kill(int(line), signal.SIGKILL)   # frozen: the pid cannot be reused
                except (ProcessLookupError, ValueError):
                    pass
        self._set_state(group, "THAWED")

    def frozen(self) -> bool:
        return bool(self.freezers) and _read(self.freezers[AGENT], "freezer.state") == "FROZEN"

    def _set_state(self, group: str, state: str) -> None:
        path = self.freezers[group]
        for _ in range(1000):
            with open(os.path.join(path, "freezer.state"), "w") as f:
                f.write(state)
            if _read(path, "freezer.state") == state:
                return
            time.sleep(0.002)   # FREEZING: a task in the middle of a fork, say
        raise OSError(f"the freezer cgroup {path} does not reach {state}")

    def remove(self) -> None:
        """Removes the cgroups. Kill the sandbox first: a cgroup with processes stays.

        Right after the kill the kernel may still count exiting processes (EBUSY) for a moment:
        retried for up to a second.
        """
        for path in (*self.paths.values(), *self.freezers.values()):
            _remove_quietly(path)


def _write(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(f"{value}\n")


def _write_if_present(path: str, value: int) -> None:
    if os.path.exists(path):
        try:
            _write(path, value)
        except OSError:
            pass   # memsw accounting compiled in but disabled: there is no swap to limit


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as f:
        return f.read().strip()


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read())


def _remove_quietly(path: str, tries: int = 50) -> None:
    """rmdir, retried while the kernel still counts exiting processes in it (EBUSY)."""
    for _ in range(tries):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return   # e.g. child groups left: removed by `remove_stale_groups` later
            time.sleep(0.02)
