"""Red team: the main job's OS worker gives its machines every bound (issue #16, item 3).

The fleet is started by the function `launch.local` calls (`start_task_fleet`, sandboxed as
configs/local_default.py asks), with the task's default bounds (2 GB memory, 1 GB of writes,
one CPU per machine). A worker sandbox would leave the OS worker unable to mount or use cgroups;
this checks that its machines get the copy-on-write root, their cgroups and their byte quota,
and that an agent filling the disk stops at the quota.
"""

from __future__ import annotations

import glob
import os
import re

import pytest
from os_attack_support import Scripted, answer, bash, needs_root_sandbox, replies

from agentrl_jax.controller.task_keys import task_key
from environments.fleet import start_task_fleet
from environments.oracle import play_one
from environments.sandbox import cgroup

pytestmark = needs_root_sandbox
MACHINE_MEMORY, MACHINE_DISK_MB = 2048 * 1024**2, 1024   # OSTask's defaults


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with start_task_fleet(["os_interaction"], ["test"], sandbox=True, concurrency=4,
                          log_dir=tmp_path_factory.mktemp("fleet_logs")) as fleet:
        yield fleet


def _machine_groups(worker_pid: int, controller: str) -> list[str]:
    parent = os.path.join(cgroup.own_cgroup(controller), f"agentrl_jax-{worker_pid}")
    return glob.glob(f"{parent}/*/")


def _read(path: str) -> int:
    with open(path) as f:
        return int(f.read())


class Probing(Scripted):
    """Plays its messages; before each, records the cgroup bounds of the worker's machines."""

    def __init__(self, worker_pid: int, *messages):
        super().__init__(*messages)
        self.worker_pid = worker_pid
        self.seen: list[tuple[list[int], list[int]]] = []

    def next_message(self, index, history):
        memory = [_read(g + "memory.limit_in_bytes")
                  for g in _machine_groups(self.worker_pid, "memory")]
        cpu = [_read(g + "cpu.cfs_quota_us") for g in _machine_groups(self.worker_pid, "cpu")]
        self.seen.append((memory, cpu))
        return super().next_message(index, history)


def test_the_os_worker_runs_outside_a_worker_sandbox_with_the_overlay_asked(fleet):
    (worker,) = fleet.workers
    assert "bwrap" not in " ".join(worker.argv)
    assert worker.argv[-2:] == ["--param", "root=overlay"]


def test_machines_get_the_overlay_root_cgroups_and_a_byte_quota(fleet):
    (worker,) = fleet.workers
    agent = Probing(
        worker.process.pid,
        # Files of 400 MB each, under the per-file limit (512 MB): only the quota stops them.
        bash("for i in 1 2 3; do head -c 400M /dev/zero > /root/f$i || break; done; "
             "du -cm /root/f* | tail -1"),
        bash("rm /root/f*; mkdir /working && echo written > /usr/written && cat /usr/written"),
        answer("done"))
    # Through the controller, as the main job plays (it cancels sessions it did not start).
    record = play_one(fleet.url, agent, 0, name=task_key("os_interaction", "test"))
    fill, write = replies(record)[:2]
    written = re.search(r"(\d+)\s+total", fill)
    assert "No space left on device" in fill and int(written.group(1)) <= MACHINE_DISK_MB, fill
    assert write.endswith("written\n"), write   # a writable / (the overlay), as in a container
    assert record.metrics["root"] == "overlay", record.metrics
    # While the episode ran its machine had its own memory cgroup and CPU quota.
    assert agent.seen[1] == ([MACHINE_MEMORY], [cgroup.CFS_PERIOD_US])
    assert record.status == "completed", record.metrics
    assert _machine_groups(worker.process.pid, "memory") == []   # removed with the machine
