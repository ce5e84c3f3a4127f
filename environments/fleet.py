"""Starts the environment side: one controller and task workers, each a subprocess.

`EnvFleet` starts a controller and adds workers (tests use it to kill and restart them);
`start_task_fleet` is the main job's fleet (a train- and a test-split worker per task);
`ServerThread` runs any ASGI app in a thread of this process. From the command line:
`python -m launch.env_fleet --task db=4 --port 5020`.

With `--sandbox`, each worker's command is wrapped by `environments.sandbox.wrap_worker_command
(argv) -> argv`, imported only then, so this module works where no sandbox backend exists: each
worker runs in its own bwrap sandbox (host network, read-only view of the repo, venv and task
data, private /tmp and $HOME; see `environments/sandbox/worker_wrap.py`). In Python,
`add_worker(task, sandbox=True)`, or `sandbox=WorkerSandbox(...)` for extra paths or variables.
A host-root `--sandbox` fleet (and `start_task_fleet`, the main job's) starts the OS task's
worker unsandboxed instead, with the overlay root its machines need (`task_worker_placements`);
a launcher that is not host root refuses to start it unless `--allow-root-fallback` is given
(then its machines get the seeded root).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

from agentrl_jax.controller.task_keys import task_key

if TYPE_CHECKING:   # only for annotations: the sandbox package is imported on demand
    from environments.sandbox import WorkerSandbox

_READY_PREFIX = "listening on "
_PR_SET_PDEATHSIG = 1
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent   # `python -m` resolves from here
# A new mount namespace whose mounts do not propagate back: what the worker mounts is seen by it
# and its children only, and the kernel drops it with the last of them. Both tools exec (same
# pid); setpriv makes the launcher's death SIGKILL the worker at once, as a sandboxed worker is
# killed when its bwrap dies (worker_wrap.py, "Killing"), instead of a graceful shutdown that
# waits for the commands its machines still run.
PRIVATE_MOUNTS = ("unshare", "--mount", "--propagation", "private", "--",
                  "setpriv", "--pdeathsig", "KILL", "--")


# ----------------------------------------------------------------------------- subprocesses


@dataclasses.dataclass
class ServerProcess:
    """A controller or worker subprocess and the API URL it announced."""

    argv: list[str]
    process: subprocess.Popen[str]
    url: str

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def kill(self, sig: int = signal.SIGKILL, grace_s: float = 10.0) -> None:
        """Sends `sig`; for a stopping signal, waits and escalates to SIGKILL after `grace_s`."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the process that started it dies.

    So a launcher killed with SIGKILL leaves no controller or worker behind. The signal is tied
    to the *thread* that forks, so servers are started from the thread that outlives them.
    """
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn_server(argv: Sequence[str], env: dict[str, str] | None = None,
                 log_path: str | os.PathLike | None = None) -> subprocess.Popen[str]:
    """Starts `argv` (stderr to `log_path` if given); `wait_ready` then reads its address."""
    stderr = open(log_path, "ab") if log_path else None   # noqa: SIM115 - the child keeps it
    try:
        return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=stderr, text=True,
                                cwd=REPO_ROOT, env={**os.environ, **(env or {})},
                                preexec_fn=_die_with_parent)
    finally:
        if stderr is not None:
            stderr.close()


def wait_ready(argv: Sequence[str], process: subprocess.Popen[str],
               timeout_s: float = 60.0) -> ServerProcess:
    """Waits for the `listening on URL` line a server prints once its socket is bound."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline() if ready else ""
    if not line.startswith(_READY_PREFIX):
        process.kill()
        process.wait()
        raise RuntimeError(f"{' '.join(argv)} did not start: {line!r}")
    # Keep draining stdout so that a chatty server never blocks on a full pipe.
    threading.Thread(target=process.stdout.read, daemon=True).start()
    return ServerProcess(list(argv), process, line[len(_READY_PREFIX):].strip())


def start_server(argv: Sequence[str], timeout_s: float = 60.0,
                 env: dict[str, str] | None = None,
                 log_path: str | os.PathLike | None = None) -> ServerProcess:
    """Starts `argv` (a module printing `listening on URL` first) and waits for that line."""
    return wait_ready(argv, spawn_server(argv, env, log_path), timeout_s)


def controller_argv(port: int = 0, **settings: float | int | str) -> list[str]:
    argv = [sys.executable, "-m", "agentrl_jax.controller", "--port", str(port)]
    for key, value in settings.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def worker_argv(task: str, controller_url: str, port: int = 0, *,
                sandbox: bool | WorkerSandbox = False, private_mounts: bool = False,
                **settings: float | int | str) -> list[str]:
    """The worker's command; `sandbox`: True, or a `WorkerSandbox` with options, wraps it;
    `private_mounts` (unsandboxed only) runs it in a mount namespace of its own."""
    argv = [sys.executable, "-m", "environments.worker", "--task", task,
            "--controller", controller_url, "--port", str(port)]
    if private_mounts:
        if sandbox:
            raise ValueError("a sandboxed worker already has its own mount namespace")
        argv = [*PRIVATE_MOUNTS, *argv]
    for key, value in settings.items():
        if key == "params":
            for pair in value:   # type: ignore[union-attr]
                argv += ["--param", pair]
        else:
            argv += ["--" + key.replace("_", "-"), str(value)]
    if sandbox is False or sandbox is None:
        return argv
    return wrap_in_sandbox(argv, None if sandbox is True else sandbox)


def wrap_in_sandbox(argv: list[str], options: WorkerSandbox | None = None) -> list[str]:
    """`argv` run in its own sandbox; `options`: an `environments.sandbox.WorkerSandbox`."""
    try:
        from environments.sandbox import wrap_worker_command
    except ImportError as error:
        raise RuntimeError("--sandbox needs environments.sandbox.wrap_worker_command(argv) -> "
                           f"argv, which is not available: {error}") from None
    return list(wrap_worker_command(argv, options))


class EnvFleet:
    """A controller and workers as subprocesses; a context manager that stops them all."""

    def __init__(self, controller_settings: dict | None = None,
                 log_dir: str | os.PathLike | None = None) -> None:
        self.log_dir = pathlib.Path(log_dir) if log_dir is not None else None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / "controller.log" if self.log_dir is not None else None
        self.controller = start_server(controller_argv(**(controller_settings or {})),
                                       log_path=log)
        self.workers: list[ServerProcess] = []

    @property
    def url(self) -> str:
        return self.controller.url

    def add_worker(self, task: str, port: int = 0, sandbox: bool | WorkerSandbox = False,
                   **settings) -> ServerProcess:
        """Starts a worker of `task` registering here; `sandbox` as for `worker_argv`."""
        return self.add_workers([dict(task=task, port=port, sandbox=sandbox, **settings)])[0]

    def add_workers(self, specs: Sequence[dict], timeout_s: float = 300.0
                    ) -> list[ServerProcess]:
        """Starts several workers at once (each spec: `add_worker`'s arguments) and waits for
        all; they load their data in parallel. Stderr goes to `log_dir/worker-N.log`."""
        started = []
        for spec in specs:
            spec = dict(spec)
            argv = worker_argv(spec.pop("task"), self.url, spec.pop("port", 0),
                               sandbox=spec.pop("sandbox", False), **spec)
            log = None
            if self.log_dir is not None:
                log = self.log_dir / f"worker-{len(self.workers) + len(started)}.log"
            started.append((argv, spawn_server(argv, log_path=log)))
        workers = [wait_ready(argv, process, timeout_s) for argv, process in started]
        self.workers += workers
        return workers

    def restart_worker(self, worker: ServerProcess) -> ServerProcess:
        """Starts the same command again (same port, so same address) and replaces `worker`."""
        worker.kill()
        fresh = start_server(worker.argv)
        self.workers[self.workers.index(worker)] = fresh
        return fresh

    def wait_until(self, predicate: Callable[[dict], bool], timeout_s: float = 30.0) -> dict:
        """Polls `list_workers` until `predicate` holds; returns that listing."""
        deadline = time.monotonic() + timeout_s
        while True:
            listing = httpx.get(self.url + "/list_workers", timeout=5).json()
            if predicate(listing):
                return listing
            if time.monotonic() > deadline:
                raise TimeoutError(f"fleet did not reach the expected state: {listing}")
            time.sleep(0.1)

    def close(self) -> None:
        for server in [*self.workers, self.controller]:
            server.kill(signal.SIGTERM)

    def __enter__(self) -> EnvFleet:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- task fleets

# A session waits for its first turn while the sampler compiles (minutes for a large model on a
# CPU); the protocol's idle expiry (controller 300 s, worker 660 s) would end it as a task
# error. A fleet started for one run serves only that run, so it waits as long as the run takes.
RUN_IDLE_TIMEOUT_S = 6 * 3600.0


def prepare_task_data(tasks: Sequence[str], splits: Sequence[str],
                      log_dir: pathlib.Path) -> None:
    """Builds each task's data cache for `splits`, unsandboxed (a sandboxed worker only reads).

    Each in a subprocess, so the caller never holds a task's data in memory.
    """
    for task in tasks:
        for split in splits:
            code = ("from environments.registry import load_task; "
                    f"load_task({task!r}, split={split!r})")
            with open(log_dir / f"prepare_{task}_{split}.log", "w") as out:
                subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True,
                               stdout=out, stderr=subprocess.STDOUT)


class NeedsHostRoot(RuntimeError):
    """A task's bounds need a host-root launcher, and no fallback was asked for."""


def task_worker_placements(tasks: Sequence[str], sandbox: bool,
                           allow_root_fallback: bool = False) -> dict[str, dict]:
    """{task: `add_worker`'s `sandbox` and extra `params` (and `private_mounts`)} of a fleet.

    With `sandbox`, every worker runs in a worker sandbox, except, when this process is host
    root, a task that sets `Task.host_root_params` (the OS task): its machines are its sandboxes
    and need host root, so it runs unsandboxed with those params (which make it refuse to start
    without the bounds), in a mount namespace of its own so that its machines' mounts vanish
    with it even when it is killed (`PRIVATE_MOUNTS`). docs/security.md says what it can reach.

    A launcher that is not host root cannot give such a task what it needs, sandboxed or not
    (the OS task's overlay root, cgroups, disk quota): it raises NeedsHostRoot, unless
    `allow_root_fallback`, and then that worker gets the task's `host_root_fallback_params`
    (the OS task's `root=seeded`), so that a run never quietly trains on weaker machines; each
    OS episode's metrics record the root it had. The tasks' classes are looked up in a
    subprocess, so that this one never imports them.
    """
    from environments.sandbox.mounts import host_root

    placements = {task: {"sandbox": sandbox, "params": []} for task in tasks}
    root = host_root()
    if not tasks or (root and not sandbox):   # host root, unsandboxed: the task's own defaults
        return placements
    code = ("import json, sys; from environments import registry as r; print(json.dumps({t: "
            "[r.host_root_params(t), r.host_root_fallback_params(t)] for t in sys.argv[1:]}))")
    found = subprocess.run([sys.executable, "-c", code, *tasks], cwd=REPO_ROOT, check=True,
                           capture_output=True, text=True).stdout
    for task, (params, fallback) in json.loads(found.splitlines()[-1]).items():
        if params is None:
            continue
        if root:
            placements[task] = {"sandbox": False, "params": params, "private_mounts": True}
        elif allow_root_fallback:
            placements[task] = {"sandbox": sandbox, "params": list(fallback)}
        else:
            raise NeedsHostRoot(
                f"task {task} needs a launcher that is host root: its workers run with "
                f"{' '.join(params)}, whose bounds only host root can give (docs/security.md); "
                f"this one is uid {os.geteuid()}{'' if os.geteuid() else ' of a user namespace'}"
                ". Run it as host root, or ask for the fallback explicitly "
                "(env.allow_root_fallback=True; env_fleet --allow-root-fallback): "
                f"{' '.join(fallback) or 'the task defaults'}")
    return placements


def start_task_fleet(tasks: Sequence[str], splits: Sequence[str], *, sandbox: bool = True,
                     concurrency: int = 64, log_dir: pathlib.Path | None = None,
                     idle_timeout_s: float = RUN_IDLE_TIMEOUT_S,
                     allow_root_fallback: bool = False, params: Sequence[str] = ()
                     ) -> EnvFleet:
    """A controller and one worker per (task, split), registered as `TASK-SPLIT` and alive.

    `params` (`KEY=VALUE`) go to every worker after the split and before its placement's own
    (tests: a task's data elsewhere).

    Start it from the thread that outlives it and before JAX starts its threads (workers are
    forked); close it (it is a context manager) to stop every process. Raises NeedsHostRoot
    where a task's bounds need host root and `allow_root_fallback` is not given (see
    `task_worker_placements`).
    """
    placements = task_worker_placements(tasks, sandbox, allow_root_fallback)
    fleet = EnvFleet({"idle_session_timeout_s": idle_timeout_s}, log_dir=log_dir)
    try:
        fleet.add_workers([dict(task=task, concurrency=concurrency, idle_timeout=idle_timeout_s,
                                **{**placements[task],
                                   "params": [f"split={split}", *params,
                                              *placements[task]["params"]]})
                           for task in tasks for split in splits])
        names = {task_key(task, split) for task in tasks for split in splits}
        fleet.wait_until(lambda listing: names <= {
            name for name, workers in listing.items()
            if any(w["status"] == "alive" for w in workers)}, timeout_s=120)
    except BaseException:
        fleet.close()
        raise
    return fleet


@contextlib.contextmanager
def serve_tasks(env: Any, log_dir: pathlib.Path) -> Iterator[str]:
    """The main job's environments (its `env` config): the controller URL `env.controller_url`
    when set (any AgentRL-compatible fleet), else that of a fleet started here, a train- and a
    test-split worker per task, stopped on exit; its processes are listed in
    `log_dir/../fleet.json`."""
    if env.controller_url:
        yield env.controller_url
        return
    splits = (env.train_split, env.test_split)
    print(f"environments: starting {len(env.tasks) * len(splits)} workers"
          f"{' (sandboxed)' if env.sandbox else ''}; logs in {log_dir}")
    fleet = start_task_fleet(env.tasks, splits, sandbox=env.sandbox,
                             concurrency=env.concurrency, log_dir=log_dir,
                             allow_root_fallback=env.allow_root_fallback)
    with fleet:
        (log_dir.parent / "fleet.json").write_text(json.dumps({
            "controller": {"url": fleet.url, "pid": fleet.controller.process.pid},
            "workers": [{"argv": w.argv, "url": w.url, "pid": w.process.pid}
                        for w in fleet.workers]}, indent=1))
        yield fleet.url


# ----------------------------------------------------------------------------- in-process


class ServerThread:
    """Serves an ASGI app with uvicorn in a daemon thread on a free loopback port."""

    def __init__(self, app=None, host: str = "127.0.0.1", *,
                 make_app: Callable[[str], object] | None = None) -> None:
        """Give `app`, or `make_app(api_url)` for an app that must know its own address."""
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.base_url = f"http://{host}:{self._sock.getsockname()[1]}"
        if make_app is not None:
            app = make_app(self.api)
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    backlog=4096))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]},
                                        daemon=True)

    @property
    def api(self) -> str:
        return self.base_url + "/api"

    def start(self) -> ServerThread:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("server thread died during start-up")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
