"""Red team through the main job's fleet: the battery's key attacks on its OS worker (issue #31).

The fleet is started by the function `launch.local` calls (`start_task_fleet`, sandboxed as
configs/local_default.py asks); as host root that puts the OS worker outside a worker sandbox, in
a mount namespace of its own, with `root=overlay` (`task_worker_placements`). Here it serves the
battery's fixture problems. Through the fleet's controller, as the main job's rollouts play, an
agent tries to reach the host (its files, the fleet's own loopback ports, its processes, the
image under the overlay), to forge its reward, to fork-bomb its machine and to make a nested
user namespace; each must fail as it does on the battery's own worker (test_os_grading,
test_os_resources, test_sandbox_seccomp).
"""

from __future__ import annotations

import glob
import os
import secrets
import socket

import pytest
from os_attack_support import (
    ATTACKS,
    COUNT,
    COUNT_ANSWER,
    FIXTURES,
    HIJACK,
    MATCH,
    ROOTFS,
    Paced,
    Scripted,
    answer,
    bash,
    demo_for,
    needs_root_sandbox,
    replies,
)

from agentrl_jax.controller.task_keys import task_key
from environments.fleet import PRIVATE_MOUNTS, start_task_fleet
from environments.oracle import play_one
from environments.sandbox import cgroup
from tests.support.host_secrets import planted_secrets

pytestmark = needs_root_sandbox
FORGERIES = ("function", "path", "system_binaries", "python_site", "stdlib")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with start_task_fleet(["os_interaction"], ["test"], sandbox=True, concurrency=4,
                          log_dir=tmp_path_factory.mktemp("fleet_logs"),
                          params=[f"data_dir={FIXTURES}"]) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def worker(fleet):
    (worker,) = fleet.workers
    return worker


def _machine_groups(worker_pid: int) -> list[str]:
    parent = os.path.join(cgroup.own_cgroup("memory"), f"agentrl_jax-{worker_pid}")
    return glob.glob(f"{parent}/*/")


def _play(fleet, agent, index):
    """An episode through the fleet's controller, as the main job's rollouts play it."""
    return play_one(fleet.url, agent, index, name=task_key("os_interaction", "test"))


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def test_the_worker_is_started_as_the_main_job_starts_it(worker):
    assert "bwrap" not in " ".join(worker.argv)
    assert worker.argv[:len(PRIVATE_MOUNTS)] == list(PRIVATE_MOUNTS)
    assert worker.argv[-2:] == ["--param", "root=overlay"]
    # Its own mount namespace: the machines' mounts are not this process's.
    assert os.readlink(f"/proc/{worker.process.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")


def test_the_host_is_out_of_reach(fleet, worker):
    ports = [_port(fleet.url), worker.port]
    for port in ports:   # both listen on the host's loopback
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    escaped = f"agentrl_escaped_{secrets.token_hex(6)}"
    with planted_secrets() as (name, secret_files):
        record = _play(fleet, Scripted(
            bash("; ".join(f"cat {path}" for path in secret_files)
                 + f"; find / -name '{name}*' 2>/dev/null; grep -rs TOP-SECRET /root /tmp /home"),
            bash("; ".join(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && "
                           f"echo CONNECTED {port}" for port in ports)),
            bash("cat /proc/[0-9]*/cmdline | tr '\\0' ' '"),
            bash(f"echo x > /usr/{escaped} && cat /usr/{escaped}"),
            answer("ok")), MATCH)
    files, connect, processes, written = replies(record)[:4]
    assert "TOP-SECRET" not in files and "No such file" in files, files
    assert "CONNECTED" not in connect, connect
    # Only the machine's own processes: neither the worker nor the controller.
    assert "environments.worker" not in processes and "controller" not in processes, processes
    assert written.endswith("x\n"), written   # written to the machine's own overlay ...
    assert not (ROOTFS / "default" / "usr" / escaped).exists()   # ... not to the image
    assert not os.path.exists(f"/usr/{escaped}")
    assert (record.status, record.reward, record.metrics["root"]) == ("completed", 1.0,
                                                                     "overlay"), record.metrics


@pytest.mark.parametrize("name", FORGERIES)
def test_forgery_scores_zero(fleet, name):
    record = _play(fleet, Scripted(bash(ATTACKS[name]), bash(demo_for(name)),
                                           answer("7")), COUNT)
    assert "rc=0" in replies(record)[1], replies(record)   # it works in the agent's shell
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics
    assert record.metrics["root"] == "overlay"


def test_hijacked_shell_pipe_scores_zero(fleet):
    record = _play(fleet, Paced(bash(HIJACK), bash("echo rc=1"), answer("7")), COUNT)
    assert "rc=1" not in replies(record)[1]   # the hijacker answers for the shell
    assert (record.status, record.reward) == ("completed", 0.0), record.metrics


def test_honest_answer_still_scores_one_after_a_forgery(fleet):
    record = _play(fleet, Scripted(bash(ATTACKS["path"]), answer(COUNT_ANSWER)), COUNT)
    assert (record.status, record.reward) == ("completed", 1.0), record.metrics


def test_fork_bomb_is_stopped_and_the_session_goes_on(fleet, worker):
    record = _play(fleet, Scripted(
        bash(":(){ :|:& };:"), bash("sleep 2"), bash("echo recovered"), answer("ok")), MATCH)
    # The bomb is stopped at the latest during the next command (which it may cost).
    assert replies(record)[2].endswith("recovered\n"), replies(record)
    assert (record.status, record.reward) == ("completed", 1.0), record.metrics
    assert worker.process.poll() is None   # the worker outlived it
    assert _machine_groups(worker.process.pid) == []   # its machine is gone, bomb and all


def test_a_machine_cannot_make_a_nested_user_namespace(fleet):
    record = _play(fleet, Scripted(
        bash("unshare -U true; echo status $?; unshare -Ur id -u; echo status $?"),
        bash("python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
             "print(libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))'"),
        answer("ok")), MATCH)
    tools, direct = replies(record)[:2]
    assert tools.count("unshare failed: Operation not permitted") == 2, tools
    assert tools.count("status 1") == 2, tools
    assert direct.strip().endswith("-1 Operation not permitted"), direct   # the seccomp filter
    assert (record.status, record.reward, record.metrics["root"]) == ("completed", 1.0,
                                                                     "overlay"), record.metrics
