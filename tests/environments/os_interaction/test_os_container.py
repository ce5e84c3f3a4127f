"""An OS machine behaves as AgentBench's Docker container where scripts can tell (issue #31).

Limits (open files), /proc as a container's root sees it, `start` in the agent's shell, and the
reference `example` run at grading in the agent's machine, among its processes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator

import pytest

from environments.oracle import play_one
from environments.os_interaction.machine import (
    Machine,
    MachineSpec,
    default_rootfs_dir,
    image_path,
)
from environments.os_interaction.oracle import Oracle
from environments.sandbox import Limits, cgroup
from environments.sandbox.bwrap import PROC_MASKED_DIRS, PROC_MASKED_FILES
from environments.sandbox.config import container_open_files
from environments.sandbox.mounts import host_root
from environments.sandbox.process import reachable_open_files
from tests.support.os_agents import Problems, Scripted, answer, bash, overlay_worker, write_problems

IMAGE = image_path("default", default_rootfs_dir())
pytestmark = pytest.mark.skipif(
    not (shutil.which("bwrap") and shutil.which("prlimit") and host_root()
         and cgroup.freezer_available() and IMAGE is not None),
    reason="needs host root, bubblewrap, cgroup v1 memory+cpu+pids+freezer and the default "
           "image (bash scripts/setup.sh as root)")

SLEEPS = "ps -e -o comm= | grep '^sleep$' | wc -l"
INTEGER_MATCH = {"language": "python",
                 "code": "from sys import argv\nexit(int(argv[1]) != int(argv[2]))"}
PROBLEMS = [
    {"description": "Where am I?", "create": {"local": "default"},
     "start": "mkdir /home/u; cd /home/u; export STARTED=yes; sleep 300 &",
     "evaluation": {"match": "/home/u"}},
    {"description": "How many sleep processes run?",
     "create": {"local": "default", "init": {"code": "sleep 300 & sleep 300 &"}},
     "evaluation": {"check": [None, INTEGER_MATCH], "example": {"code": SLEEPS}}},
    {"description": "How many directories are in /root/work?",
     "create": {"local": "default", "init": {"code": "mkdir -p /root/work/a /root/work/b"}},
     "evaluation": {"check": [None, INTEGER_MATCH],
                    "example": {"code": "find /root/work -mindepth 1 -type d | wc -l"}}},
]
WHERE, SLEEPING, DIRECTORIES = range(3)


def machine_run(*scripts: str) -> list[str]:
    """The outputs of `scripts` run one after the other in one overlay machine's shell."""
    async def run() -> list[str]:
        machine = await Machine.start(MachineSpec(image=str(IMAGE), root="overlay",
                                                  scratch_dir="/dev/shm/agentrl_os"))
        try:
            return [(await machine.run(script))[0] for script in scripts]
        finally:
            await machine.close()
    return asyncio.run(run())


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_problems(tmp_path_factory.mktemp("os_container"), PROBLEMS)


@pytest.fixture(scope="module")
def worker(data_dir) -> Iterator[str]:
    with overlay_worker(data_dir) as api:
        yield api


def replies(record) -> list[str]:
    return [m["content"] for m in record.messages if m["role"] == "tool"]


def test_open_file_limit_is_a_containers_and_the_protective_limits_stay():
    expected = reachable_open_files(Limits(open_files=container_open_files())).open_files
    assert expected is not None and expected > 1500
    limits, high_fd = machine_run("ulimit -Sn; ulimit -Hn; ulimit -u; ulimit -v",
                                  "exec 1500>/tmp/f && echo ok >&1500 && cat /tmp/f")
    assert limits.split() == [str(expected), str(expected), "256", str(2 * 1024**2)]
    assert high_fd == "ok\n"


def test_proc_reads_as_a_containers_root_sees_it():
    files = [f for f in PROC_MASKED_FILES if os.path.isfile(f)]
    dirs = [d for d in PROC_MASKED_DIRS if os.path.isdir(d)]
    assert "/proc/tty/driver" in dirs   # unreadable to the machine's root before
    found, kcore, *masked = machine_run(
        "find / -name nonexistent_xyz 2>&1; echo rc=$?",
        "cat /proc/kcore; echo rc=$?",
        *[f"cat {f}; echo rc=$?" for f in files],
        *[f"ls -A {d}; touch {d}/x; echo rc=$?" for d in dirs])
    assert found == "rc=0\n"
    if os.path.exists("/proc/kcore"):   # Docker: /dev/null over it
        assert kcore == "rc=0\n"
    else:                               # a kernel without it: no file, under Docker too
        assert kcore.startswith("rc=1\n") and "No such file or directory" in kcore
    assert masked[:len(files)] == ["rc=0\n"] * len(files)
    for output in masked[len(files):]:
        assert output.startswith("rc=1\n") and "Read-only file system" in output


def test_start_runs_in_the_agents_shell(worker):
    record = play_one(worker, Scripted(bash("pwd; echo $STARTED; jobs | wc -l"),
                                       answer("/home/u")), WHERE)
    assert replies(record)[0] == "The output of the OS:\n\n/home/u\nyes\n1\n"
    assert (record.status, record.reward) == ("completed", 1.0)


@pytest.mark.parametrize("index", [SLEEPING, DIRECTORIES])
def test_reference_answer_sees_the_agents_machine(worker, data_dir, index):
    """The oracle answers from the example run in its shell; the check runs it again."""
    record = play_one(worker, Oracle(Problems(data_dir)), index, session_id=200 + index)
    assert replies(record)[0] == "The output of the OS:\n\n2\n"
    assert (record.status, record.reward) == ("completed", 1.0), record.metrics


def test_reference_answer_runs_after_the_agents_actions(worker):
    """As in AgentBench, the example runs once the agent has answered, on what it left."""
    stopped = play_one(worker, Scripted(bash("pkill -x sleep; sleep 0.5; " + SLEEPS),
                                        answer("0")), SLEEPING, session_id=300)
    assert replies(stopped)[0] == "The output of the OS:\n\n0\n"
    assert stopped.reward == 1.0
    more = play_one(worker, Scripted(bash("mkdir /root/work/c"), answer("3")), DIRECTORIES,
                    session_id=301)
    assert more.reward == 1.0
    stale = play_one(worker, Scripted(bash("mkdir /root/work/c"), answer("2")), DIRECTORIES,
                     session_id=302)
    assert stale.reward == 0.0


def test_the_agents_processes_are_frozen_while_a_check_runs():
    """The check runs beside the agent's processes; none of them runs meanwhile."""
    async def run() -> tuple[str, str]:
        machine = await Machine.start(MachineSpec(image=str(IMAGE), root="overlay",
                                                  scratch_dir="/dev/shm/agentrl_os"))
        try:
            await machine.run("(while :; do echo x >> /tmp/ticks; done) >/dev/null 2>&1 &"
                              "\nwhile [ ! -s /tmp/ticks ]; do :; done")
            _, seen = await machine.check(("bash", "ps -e -o comm= | grep -c '^bash$'"))
            _, ticks = await machine.check(("bash", "a=$(wc -l < /tmp/ticks); sleep 0.3; "
                                            "echo $(( $(wc -l < /tmp/ticks) - a ))"))
            return seen, ticks
        finally:
            await machine.close()
    seen, ticks = asyncio.run(run())
    assert seen == "3\n"   # the agent's shell, its loop, the check's own bash
    assert ticks == "0\n"
