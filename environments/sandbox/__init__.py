"""Process isolation for task workers: bwrap (default) and Apptainer sandboxes.

See `sandbox.py` for the API (and `worker_wrap.py` for running a whole task worker sandboxed,
`wrap_worker_command`) and `../../../shared/design/ARCHITECTURE.md` (Sandboxes) for the
design. No JAX here: environments know nothing of the model side.

Security model:
  * each sandbox runs as its own unprivileged host uid (leased, see `uids.py`) inside new user,
    PID, mount, IPC, UTS and (unless asked) network namespaces, with no capabilities and no
    nested user namespaces; it sees only its own processes and a loopback that is not the host's;
    one with users of its own (`uid_block`, host root) maps a leased block of 65536 host ids
    instead, and its root keeps a container root's capabilities, over the block's files only;
  * the filesystem is the image (or the host's /usr) read-only, plus a private layer of writable
    directories that is a host directory deleted on close, or (`writable_root`, host root) a
    copy-on-write overlay of the whole image; host files are simply not mounted;
  * rlimits on address space, processes (per uid, hence per sandbox), CPU time, file size and
    open files, a wall-clock timeout, and output truncation bound each process; as host root,
    a memory cgroup, a CPU quota and a tmpfs byte quota bound the sandbox as a whole, and a
    parent cgroup all sandboxes of the worker (`cgroup.py`, `layer.py`);
  * a timeout or a fork bomb kills the sandbox's whole PID namespace; closing does too;
  * `ShellSession.exec(pristine_system=True)` runs a process that inherits nothing from the
    shell and uses the image's own system code (how the OS task grades, see `bwrap.py`).
Not bounded: disk I/O bandwidth; without host root, the sandbox's totals (rlimits only).
"""

from environments.sandbox.config import Limits, SandboxConfig
from environments.sandbox.instance import SandboxError, SandboxInstance
from environments.sandbox.result import ExecResult, ExecStatus
from environments.sandbox.sandbox import Sandbox
from environments.sandbox.session import ShellSession
from environments.sandbox.worker_wrap import WorkerSandbox, wrap_worker_command

__all__ = [
    "ExecResult",
    "ExecStatus",
    "Limits",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxInstance",
    "ShellSession",
    "WorkerSandbox",
    "wrap_worker_command",
]
