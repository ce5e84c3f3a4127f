"""Runs a whole task worker inside a bubblewrap sandbox: `wrap_worker_command(argv) -> argv`.

    argv = wrap_worker_command([sys.executable, "-m", "environments.worker", "--task", "os", ...])
    subprocess.Popen(argv, stdout=subprocess.PIPE)   # first line: "listening on URL", as before

`launch/env_fleet.py --sandbox` (and `EnvFleet.add_worker(task, sandbox=True)`) use it. The
episode sandboxes of `sandbox.py` isolate what an *agent* runs; this isolates the *worker* (task
code, parsers, SQLite, the SPARQL store, the ALFWorld engine) from the host. Decisions:

Network: the host's network namespace is shared. The worker must bind a port the controller
  reaches on the host's loopback and must reach the controller there; a private namespace would
  need port forwarding. What the agent runs in the OS task still gets a network namespace of its
  own (no network) in the nested per-episode sandboxes, which are unchanged.

Filesystem: the root is an empty read-only tmpfs holding, read-only, the host's /usr (and the
  /bin, /lib* links), a few harmless /etc files, and only the host paths the worker needs at
  their host paths: the repository, the Python interpreter and every `sys.path` entry of the
  worker's interpreter (the venv, its base install, editable installs), ../shared/data, the task
  caches (~/.cache/agentrl_jax or $AGENTRL_JAX_CACHE, $AGENTRL_KG_CACHE, $ALFWORLD_DATA), the OS
  task's rootfs images ($AGENTRL_ROOTFS_CACHE or /var/cache/agentrl_jax/rootfs), any absolute
  path given as a `--param KEY=/path` value, and `WorkerSandbox.ro_paths`. Writable: a private
  /tmp, $HOME and /dev/shm (size-capped tmpfs, so they vanish with the sandbox even when it is
  SIGKILLed; ~/.cache/agentrl_jax is bound read-only over $HOME), /run (for the episode uid
  leases) and `WorkerSandbox.rw_paths`. Fresh /proc and a minimal /dev. Caches must therefore be
  built before a sandboxed worker needs them (construct its Task in the launcher, or run the
  task once unsandboxed, e.g. its oracle); a sandboxed worker cannot write them.

Identity and nested sandboxes: the OS task worker starts one bwrap sandbox per episode, which
  needs user namespaces inside the worker's sandbox (so no `--disable-userns` here) and a /proc
  that bwrap did not partly cover (the kernel only lets a nested sandbox mount proc if a fully
  visible one exists; bwrap covers /proc/sys and friends whenever they are writable, i.e. when
  the sandbox's root holds capabilities over host-root files). So:
  * worker started by a normal user: `bwrap --unshare-user`, the worker keeps its uid and no
    capabilities; its episode sandboxes run as that uid too (as without the wrapper);
  * worker started by root: root inside must stay root-like, since it gives each episode sandbox
    its own uid so that RLIMIT_NPROC bounds that sandbox alone (see `uids.py`), yet must not be
    host root. `userns.py` puts it in a user namespace where inside uid 0 and the episode uid
    range (SandboxConfig's default `uid_range`) map to a block of otherwise unused host uids
    leased to this worker alone; host root is unmapped, so the worker's capabilities (only those
    the episode sandboxes need: chown, dac_override, fowner, fsetid, kill, setuid, setgid) apply
    to its own files only. bwrap then runs as that namespace's root without `--unshare-user`.
    The bound host paths are idmapped mounts (where the filesystem allows) on which host root's
    files appear to be the worker's own: read-only, but readable even at mode 0600, which is
    how `tempfile` leaves the task caches root builds.
  Either way the worker is never host root, and what an agent runs is two sandboxes deep.

Killing: the wrapper process *is* bwrap (the launcher execs it), so `ServerProcess.kill()`
  signals bwrap. bwrap runs with `--die-with-parent --unshare-pid`: when bwrap dies (SIGTERM or
  SIGKILL), its child, PID 1 of the worker's PID namespace, gets SIGKILL, and the kernel then
  kills every process of that namespace: the worker, its episode sandboxes, their commands. The
  same happens when the launcher (the fleet) dies. The worker gets no graceful shutdown: it holds
  nothing that outlives it (its scratch is a tmpfs, its leases are flocks).

Errors: `wrap_worker_command` raises `SandboxError` at once when bwrap is missing, and otherwise
  runs the wrapped `true` first, so that a host where the namespaces cannot be created (user
  namespaces disabled, seccomp) fails with bwrap's own message instead of a worker that never
  prints its address.

Environment: cleared; the worker gets PATH, LANG/LC_*, TZ, TERM, PYTHON* (PYTHONPATH with the
  repository first), AGENTRL_*, XDG_CACHE_HOME, ALFWORLD_DATA and VIRTUAL_ENV from the
  environment at wrap time, HOME and TMPDIR=/tmp, plus `WorkerSandbox.env`. Variables passed to
  the wrapper process itself (`start_server(env=...)`) do not reach the worker.

Only the bwrap backend wraps workers: an Apptainer worker would need an image holding the repo's
Python environment, and bwrap is what runs nested episode sandboxes anyway.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from environments.sandbox.bwrap import HOST_SYSTEM_DIRS, host_system_binds
from environments.sandbox.config import SandboxConfig
from environments.sandbox.instance import SandboxError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
_USERNS_SCRIPT = pathlib.Path(__file__).with_name("userns.py")

# Host uids of sandboxed workers started by root: block b is [base + b * stride, + stride), with
# stride = 1 + the episode uid range. Far above normal users and the episode range (3,000,000+).
USERNS_HOST_BASE = 100_000_000
USERNS_BLOCKS = 1024
USERNS_LOCK_DIR = "/run/agentrl_sandbox/worker_blocks"
USERNS_STAGE_DIR = "/run/agentrl_sandbox_stage"   # an empty mount point (see userns.py)
# What a root-started worker may still do inside its own user namespace: the episode sandboxes'
# setup (lease a uid, chown and later delete its private layer, switch to it, kill it).
WORKER_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
               "CAP_SETUID", "CAP_SETGID")
# Host /etc files that name resolution, time zones and the dynamic linker need.
_HOST_ETC = ("hosts", "host.conf", "nsswitch.conf", "gai.conf", "resolv.conf", "localtime",
             "timezone", "passwd", "group", "alternatives", "ld.so.cache", "ld.so.conf",
             "ld.so.conf.d", "mime.types")
_ENV_NAMES = ("PATH", "TZ", "TERM", "XDG_CACHE_HOME", "ALFWORLD_DATA", "VIRTUAL_ENV")
_ENV_PREFIXES = ("LANG", "LC_", "PYTHON", "AGENTRL_")
_PROBE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class WorkerSandbox:
    """Options of a sandboxed worker (the defaults suit every task of this repository).

    Attributes:
      ro_paths: more host paths the worker may read, bound at the same path.
      rw_paths: host paths the worker may write (e.g. a log directory), bound at the same path.
      scratch_bytes: size cap of each of the private /tmp, $HOME and /dev/shm (tmpfs: memory;
        the OS task keeps its episode sandboxes' writable layers in /dev/shm).
      env: more environment variables of the worker.
      bind_param_paths: bind, read-only, every existing absolute path given as `--param K=V`.
      check: run the wrapped `true` first and raise SandboxError if the sandbox cannot start.
    """

    ro_paths: tuple[str, ...] = ()
    rw_paths: tuple[str, ...] = ()
    scratch_bytes: int = 4 * 1024**3
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bind_param_paths: bool = True
    check: bool = True


def wrap_worker_command(argv: Sequence[str],
                        options: WorkerSandbox | None = None) -> list[str]:
    """The argv that runs worker `argv` inside its own sandbox (see the module docstring).

    Raises:
      SandboxError: bwrap is missing or (with `options.check`) cannot build the sandbox here.
    """
    options = options or WorkerSandbox()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("sandboxed workers need bubblewrap: `bwrap` is not on PATH "
                           "(Debian: apt-get install bubblewrap)")
    as_root = os.geteuid() == 0
    env = _worker_env(options)
    prefix = _userns_prefix() if as_root else []
    head = [*prefix, *_bwrap_head(bwrap, as_root)]
    tail = [*_filesystem(argv, options, env["HOME"]), "--chdir", str(REPO_ROOT), "--clearenv"]
    for key, value in env.items():
        tail += ["--setenv", key, value]
    if options.check:
        _check(tuple([*head, *tail, "--", "true"]))
    return [*head, *tail, "--", *argv]


def _userns_prefix() -> list[str]:
    first, count = SandboxConfig().uid_range
    return [sys.executable, "-I", str(_USERNS_SCRIPT), "--lock-dir", USERNS_LOCK_DIR,
            "--stage-dir", USERNS_STAGE_DIR,
            "--host-base", str(USERNS_HOST_BASE), "--blocks", str(USERNS_BLOCKS),
            "--inside", f"{first}:{count}", "--"]


def _bwrap_head(bwrap: str, as_root: bool) -> list[str]:
    # --new-session: the worker cannot push input into the launcher's terminal (TIOCSTI).
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:   # already root of the worker's own user namespace (userns.py)
        argv += ["--cap-drop", "ALL"]
        for cap in WORKER_CAPS:
            argv += ["--cap-add", cap]
    else:
        argv.append("--unshare-user")
    return argv


def _filesystem(argv: Sequence[str], options: WorkerSandbox, home: str) -> list[str]:
    args = [*host_system_binds(), "--perms", "0755", "--dir", "/etc"]
    for name in _HOST_ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(options.scratch_bytes), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev",
             "--perms", "1777", "--size", str(options.scratch_bytes), "--tmpfs", "/tmp",
             "--perms", "0700", "--size", str(options.scratch_bytes), "--tmpfs", home,
             "--perms", "0755", "--size", str(16 * 1024**2), "--tmpfs", "/run"]
    # Parents before children, so that a bind under /tmp or $HOME lands on the tmpfs above.
    binds = [("--ro-bind", p) for p in _readable_paths(argv, options, home)]
    binds += [("--bind", os.path.abspath(p)) for p in options.rw_paths]
    # bwrap would create missing parents of a mount point 0700, which the episode sandboxes'
    # uids could not traverse (to reach the OS task's rootfs images, say).
    mounted = {"/tmp", home, "/run", "/dev", "/usr", "/etc", "/proc"}
    parents = {parent for _, path in binds for parent in _ancestors(path)} - mounted
    for parent in sorted(parents, key=lambda p: p.count("/")):
        args += ["--perms", "0755", "--dir", parent]
    for flag, path in sorted(binds, key=lambda b: b[1].count("/")):
        args += [flag, path, path]
    # The root tmpfs only holds mount points; read-only, nothing can be written outside the above.
    return [*args, "--remount-ro", "/"]


def _readable_paths(argv: Sequence[str], options: WorkerSandbox, home: str) -> list[str]:
    """Existing host paths to bind read-only, without those already inside another one."""
    candidates = [str(REPO_ROOT), str(SHARED_DATA), *_cache_paths(home),
                  *_interpreter_paths(argv[0], os.environ.get("PYTHONPATH", "")),
                  *options.ro_paths]
    if options.bind_param_paths:
        candidates += [value for flag, pair in zip(argv, argv[1:], strict=False)
                       if flag == "--param" and (value := pair.partition("=")[2]).startswith("/")]
    system = ("/usr", "/etc", "/proc", "/dev", *("/" + name for name in HOST_SYSTEM_DIRS))
    writable = [os.path.abspath(p) for p in options.rw_paths]
    paths = set()
    for candidate in candidates:
        for path in {os.path.abspath(candidate), os.path.realpath(candidate)}:
            # Never the home directory or one above it: $HOME is private inside.
            if (os.path.exists(path) and not _under(home, [path])
                    and not _under(path, system) and path not in writable):
                paths.add(path)
    return sorted(p for p in paths if not _under(p, [q for q in paths if q != p]))


def _ancestors(path: str) -> list[str]:
    """"/a/b/c" -> ["/a", "/a/b"]."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == parent or path.startswith(parent.rstrip("/") + "/") for parent in parents)


def _cache_paths(home: str) -> list[str]:
    env = os.environ
    paths = [env.get("AGENTRL_JAX_CACHE") or os.path.join(home, ".cache", "agentrl_jax"),
             env.get("AGENTRL_ROOTFS_CACHE") or "/var/cache/agentrl_jax/rootfs"]
    if env.get("XDG_CACHE_HOME"):
        paths.append(os.path.join(env["XDG_CACHE_HOME"], "agentrl_jax"))
    paths += [env[name] for name in ("AGENTRL_KG_CACHE", "ALFWORLD_DATA") if env.get(name)]
    return paths


@functools.cache
def _interpreter_paths(executable: str, pythonpath: str) -> tuple[str, ...]:
    """The install prefixes and `sys.path` of interpreter `executable` (none if not Python)."""
    path = shutil.which(executable) or executable
    paths = [os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path))]
    code = ("import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "sys.base_exec_prefix, *sys.path]))")
    try:
        run = subprocess.run([path, "-c", code], capture_output=True, text=True, timeout=60,
                             cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": pythonpath})
        paths += [p for p in json.loads(run.stdout) if p.startswith("/")]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass   # not a Python interpreter: its own directory is all it gets
    return tuple(paths)


def _worker_env(options: WorkerSandbox) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key in _ENV_NAMES or key.startswith(_ENV_PREFIXES)}
    env.setdefault("PATH", os.defpath)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    # The repository is read-only inside: do not even try to write bytecode caches there.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["HOME"] = os.path.abspath(os.path.expanduser("~"))
    env["TMPDIR"] = "/tmp"
    # A task worker computes on the CPU: JAX must not probe for a TPU (libtpu, installed for
    # ahead-of-time compilation, aborts where the sandbox hides the PCI bus).
    env["JAX_PLATFORMS"] = "cpu"
    env.update(options.env)
    return env


@functools.cache
def _check(argv: tuple[str, ...]) -> None:
    """Runs a wrapped `true`; raises SandboxError with bwrap's reason if it fails."""
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"the worker sandbox did not start within {_PROBE_TIMEOUT_S:.0f} s "
                           "(a wrapped `true` hung)") from None
    if run.returncode != 0:
        raise SandboxError("cannot run the worker in a bwrap sandbox here (user namespaces "
                           f"disabled or not permitted?): {run.stderr.strip() or run.returncode}")
