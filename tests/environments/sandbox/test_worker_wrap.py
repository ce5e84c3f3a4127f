"""Task workers inside their own sandbox: `wrap_worker_command` and `EnvFleet(sandbox=True)`.

Each test starts real sandboxed worker processes (bwrap) that register with a real controller,
and plays episodes through them; the isolation tests run a probe script in the same sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

import psutil
import pytest
from sandbox_helpers import bwrap_problem

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.episode import SampleStatus
from environments.fleet import REPO_ROOT, EnvFleet, ServerProcess
from environments.oracle import load_oracle, play_one, tool_call_message
from environments.registry import load_task
from environments.sandbox import SandboxError, WorkerSandbox, worker_wrap, wrap_worker_command

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason=str(bwrap_problem()))

# Fast liveness, so that a worker is listed as alive right after it starts.
CONTROLLER = dict(heartbeat_timeout_s=5.0, liveness_interval_s=0.2, probe_timeout_s=2.0)
GONE_TIMEOUT_S = 30.0   # only bounds a regression; a killed sandbox is gone at once


@pytest.fixture(scope="module")
def fleet() -> Iterator[EnvFleet]:
    with EnvFleet(CONTROLLER) as env_fleet:
        yield env_fleet


@contextlib.contextmanager
def sandboxed_worker(fleet: EnvFleet, task: str, **settings) -> Iterator[ServerProcess]:
    """A sandboxed worker of `task`, alive at the controller; stopped (and forgotten) after."""
    worker = fleet.add_worker(task, sandbox=True, heartbeat_interval=0.5, **settings)
    try:
        fleet.wait_until(lambda listing: any(w["address"] == worker.url and w["status"] == "alive"
                                             for ws in listing.values() for w in ws), 120)
        yield worker
    finally:
        worker.kill(signal.SIGTERM)
        fleet.workers.remove(worker)


def run_probe(code: str, options: WorkerSandbox | None = None, *args: str) -> dict:
    """Runs Python `code` (which prints one JSON line last) in a worker sandbox."""
    argv = wrap_worker_command([sys.executable, "-c", code, *args], options)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture
def reachable_dir() -> Iterator[Callable[[], str]]:
    """Makes host directories that every uid may reach (pytest's tmp_path is 0700 root), as
    a non-root worker's uid needs; deletes them afterwards."""
    made: list[str] = []

    def make() -> str:
        made.append(tempfile.mkdtemp(prefix="worker_wrap_test_"))
        os.chmod(made[-1], 0o755)
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- the fleet path


def test_sandboxed_echo_worker_registers_and_plays_an_episode(fleet):
    with sandboxed_worker(fleet, "echo", params=["rounds=2"]) as worker:
        assert worker.url.startswith("http://127.0.0.1:")   # reachable on the host's loopback

        async def episode() -> list:
            async with ControllerClient(fleet.url, start_jitter_s=0.0) as client:
                sample = await client.start_sample("echo", 0)
                steps = [await client.interact(sample.session_id,
                                               [tool_call_message("echo", {"text": t})])
                         for t in ("one", "two")]
                return steps

        first, second = asyncio.run(episode())
        assert not first.finish and first.messages[-1]["content"] == "one"
        assert second.finish and second.status is SampleStatus.COMPLETED
        assert second.reward == 1.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_killing_the_wrapper_leaves_no_worker_behind(fleet, sig):
    with sandboxed_worker(fleet, "echo") as worker:
        inside = psutil.Process(worker.process.pid).children(recursive=True)
        assert any("environments.worker" in " ".join(p.cmdline()) for p in inside)
        worker.kill(sig)
        _, alive = psutil.wait_procs(inside, timeout=GONE_TIMEOUT_S)
        assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


def test_sandboxed_os_worker_runs_an_episode_in_a_nested_sandbox(fleet):
    try:
        task = load_task("os_interaction", split="test")
    except FileNotFoundError as error:
        pytest.skip(f"no OS task data: {error}")
    index = 7   # the oracle runs `ls -1 /root | grep "^[[:alpha:]]" | wc -l`, then answers
    with sandboxed_worker(fleet, "os_interaction", params=["split=test"]) as worker:
        record = play_one(worker.url, load_oracle("os_interaction", task), index)
        ran = [m for m in record.messages if m["role"] == "tool"]
        assert record.status == "completed" and record.reward == 1.0, record.reason()
        assert ran and ran[0]["content"].startswith("The output of the OS:")
        if os.geteuid() == 0:   # the worker is not host root, its episode sandboxes neither
            host_uids = {p.uids().real for p in
                         psutil.Process(worker.process.pid).children(recursive=True)}
            assert min(host_uids) >= worker_wrap.USERNS_HOST_BASE


@pytest.mark.parametrize("task_name", ["db", "kg", "alfworld", "webshop"])
def test_sandboxed_task_worker_plays_an_oracle_episode(fleet, task_name, reachable_dir):
    params = {"split": "test"}
    if task_name == "webshop":   # a small store in a host directory: passed as --param, bound
        params.update(data_path=reachable_dir(), num_products=1500, train_goals=60,
                      test_goals=24)
    # Built here first: a sandboxed worker reads task caches but cannot write them.
    task = load_task(task_name, **params)
    with sandboxed_worker(fleet, task_name,
                          params=[f"{k}={v}" for k, v in params.items()]) as worker:
        index = task.indices()[0]
        record = play_one(worker.url, load_oracle(task_name, task), index)
        assert record.success, record.reason()


# ----------------------------------------------------------------------------- isolation

_PROBE = """
import json, os, socket, sys
secret, kept, shared, port = sys.argv[1:5]
home = os.environ["HOME"]

def can_write(directory):
    path = os.path.join(directory, "written_by_sandbox")
    try:
        with open(path, "w") as f:
            f.write("x")
        return True
    except OSError:
        return False

with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as sock:
    greeting = sock.recv(16).decode()
print(json.dumps({
    "secret_visible": os.path.exists(secret),
    "param_readable": open(os.path.join(kept, "data.txt")).read(),
    "writable": {d: can_write(d) for d in
                 ("/tmp", home, shared, kept, sys.argv[5], "/usr", "/", os.path.dirname(secret))},
    "host_root_mapped": any(int(line.split()[1]) == 0 for line in open("/proc/self/uid_map")),
    "greeting": greeting,
}))
"""


def test_the_worker_sees_and_writes_only_what_it_is_given(tmp_path, reachable_dir):
    secret = tmp_path / "not_mounted.txt"   # a host temp dir that is not mounted
    secret.write_text("host secret")
    kept, shared = reachable_dir(), reachable_dir()
    with open(os.path.join(kept, "data.txt"), "w") as f:
        f.write("task data")
    os.chmod(os.path.join(kept, "data.txt"), stat.S_IRUSR)   # 0400 root: read via the idmap

    with socket.socket() as server:   # the controller side: a listener on the host's loopback
        server.bind(("127.0.0.1", 0))
        server.listen()
        threading.Thread(target=lambda: server.accept()[0].sendall(b"hello"),
                         daemon=True).start()
        seen = run_probe(_PROBE, WorkerSandbox(rw_paths=(shared,)),
                         str(secret), kept, shared, str(server.getsockname()[1]),
                         str(REPO_ROOT), "--param", f"data_path={kept}")

    assert seen["greeting"] == "hello"   # shares the host's network namespace
    assert not seen["secret_visible"]
    assert seen["param_readable"] == "task data"   # an absolute --param path, read-only
    writable = seen["writable"]
    assert writable.pop("/tmp") and writable.pop(os.path.expanduser("~"))   # private scratch
    assert writable.pop(shared)   # WorkerSandbox.rw_paths
    assert not any(writable.values()), writable   # the repo, /usr, /, the --param path, ...
    assert os.path.exists(os.path.join(shared, "written_by_sandbox"))
    assert not os.path.exists(os.path.join(kept, "written_by_sandbox"))
    for host_dir in (REPO_ROOT, "/tmp", os.path.expanduser("~")):   # theirs were private
        assert not os.path.exists(os.path.join(host_dir, "written_by_sandbox"))
    assert not seen["host_root_mapped"]


def test_missing_bwrap_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(worker_wrap.shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(SandboxError, match="bubblewrap"):
        wrap_worker_command([sys.executable, "-c", "pass"])


def test_a_bwrap_that_cannot_create_namespaces_is_a_clear_error(monkeypatch, reachable_dir):
    fake_dir = reachable_dir()
    fake = os.path.join(fake_dir, "bwrap")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    os.chmod(fake, 0o755)
    monkeypatch.setenv("PATH", f"{fake_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SandboxError, match="No permissions to create new namespace"):
        wrap_worker_command([sys.executable, "-c", "pass"])
