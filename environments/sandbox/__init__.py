"""Process isolation for task workers: bwrap (default) and Apptainer sandboxes.

See `sandbox.py` for the API (and `worker_wrap.py` for running a whole task worker sandboxed,
`wrap_worker_command`) and `../../../shared/design/ARCHITECTURE.md` (Sandboxes) for the
design. No JAX here: environments know nothing of the model side.

Security model:
  * each sandbox runs as its own unprivileged host uid (leased, see `uids.py`) inside new user,
    PID, mount, IPC, UTS and (unless asked) network namespaces, with no capabilities and no
    nested user namespaces; it sees only its own processes and a loopback that is not the host's;
  * the filesystem is the image (or the host's /usr) read-only, plus a private layer of writable
    directories that is a host directory deleted on close; host files are simply not mounted;
  * rlimits on address space, processes (per uid, hence per sandbox), CPU time, file size and
    open files, a wall-clock timeout, and output truncation bound what one sandbox can consume;
  * a timeout or a fork bomb kills the sandbox's whole PID namespace; closing does too.
Not bounded: total disk use of the private layer (only the size of each file) and disk I/O.
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
