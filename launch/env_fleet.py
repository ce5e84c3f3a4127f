"""Starts the environment side: one controller and task workers, each a subprocess.

    python -m launch.env_fleet --task echo=2 --task db=4 --port 5020

runs a controller on :5020 and, per `--task NAME=COUNT`, COUNT workers of NAME that register
with it; it stops them all on Ctrl-C. The same is available in Python as `EnvFleet` (tests use it
to kill and restart workers), and `ServerThread` runs any ASGI app in a thread of this process.

With `--sandbox`, each worker's command is wrapped by `environments.sandbox.wrap_worker_command
(argv) -> argv`, imported only then, so this module works where no sandbox backend exists: each
worker runs in its own bwrap sandbox (host network, read-only view of the repo, venv and task
data, private /tmp and $HOME; see `environments/sandbox/worker_wrap.py`). In Python,
`add_worker(task, sandbox=True)`, or `sandbox=WorkerSandbox(...)` for extra paths or variables.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import httpx
import uvicorn

if TYPE_CHECKING:   # only for annotations: the sandbox package is imported on demand
    from environments.sandbox import WorkerSandbox

_READY_PREFIX = "listening on "
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent   # `python -m` resolves from here


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


def start_server(argv: Sequence[str], timeout_s: float = 60.0,
                 env: dict[str, str] | None = None) -> ServerProcess:
    """Starts `argv` (a module printing `listening on URL` first) and waits for that line."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                               env={**os.environ, **(env or {})})
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    line = process.stdout.readline() if ready else ""   # printed once the socket is bound
    if not line.startswith(_READY_PREFIX):
        process.kill()
        process.wait()
        raise RuntimeError(f"{' '.join(argv)} did not start: {line!r}")
    # Keep draining stdout so that a chatty server never blocks on a full pipe.
    threading.Thread(target=process.stdout.read, daemon=True).start()
    return ServerProcess(list(argv), process, line[len(_READY_PREFIX):].strip())


def controller_argv(port: int = 0, **settings: float | int | str) -> list[str]:
    argv = [sys.executable, "-m", "agentrl_jax.controller", "--port", str(port)]
    for key, value in settings.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def worker_argv(task: str, controller_url: str, port: int = 0, *,
                sandbox: bool | WorkerSandbox = False, **settings: float | int | str) -> list[str]:
    """The worker's command; `sandbox`: True, or a `WorkerSandbox` with options, wraps it."""
    argv = [sys.executable, "-m", "environments.worker", "--task", task,
            "--controller", controller_url, "--port", str(port)]
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

    def __init__(self, controller_settings: dict | None = None) -> None:
        self.controller = start_server(controller_argv(**(controller_settings or {})))
        self.workers: list[ServerProcess] = []

    @property
    def url(self) -> str:
        return self.controller.url

    def add_worker(self, task: str, port: int = 0, sandbox: bool | WorkerSandbox = False,
                   **settings) -> ServerProcess:
        """Starts a worker of `task` registering here; `sandbox` as for `worker_argv`."""
        worker = start_server(worker_argv(task, self.url, port, sandbox=sandbox, **settings))
        self.workers.append(worker)
        return worker

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


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m launch.env_fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=5020, help="controller port")
    parser.add_argument("--task", action="append", default=[], metavar="NAME=COUNT",
                        help="start COUNT workers of task NAME (repeatable)")
    parser.add_argument("--concurrency", type=int, default=None, help="per worker")
    parser.add_argument("--sandbox", action="store_true",
                        help="run each worker inside environments.sandbox")
    args = parser.parse_args(argv)
    settings = {} if args.concurrency is None else {"concurrency": args.concurrency}
    # SIGTERM unwinds like Ctrl-C, so that the fleet's processes are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with EnvFleet({"port": args.port}) as fleet:
        print(f"controller {fleet.url}", flush=True)
        for spec in args.task:
            name, _, count = spec.partition("=")
            for _ in range(int(count or 1)):
                worker = fleet.add_worker(name, sandbox=args.sandbox, **settings)
                print(f"worker {name} {worker.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while all(s.process.poll() is None for s in [fleet.controller, *fleet.workers]):
                time.sleep(1.0)
        print("stopping", flush=True)


if __name__ == "__main__":
    main()
