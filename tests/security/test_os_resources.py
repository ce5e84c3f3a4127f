"""Red team: an OS session that fills, allocates or spins stays in its bounds (issue #16, item 3).

A real worker with small per-machine bounds (256 MB of memory, 64 MB of writes, half a CPU);
the attacks go through its HTTP API. Afterwards nothing of the machine is left on the host: no
cgroup, no mount, no memory charged to the worker's machines.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re

import httpx
import pytest
from os_attack_support import (
    MATCH,
    Scripted,
    answer,
    bash,
    child_pids,
    needs_root_sandbox,
    os_worker,
    replies,
)

from environments.oracle import play_episode, play_one
from environments.sandbox import cgroup

pytestmark = needs_root_sandbox
SCRATCH = "/dev/shm/agentrl_os_redteam"
BOUNDS = dict(memory_mb=256, disk_mb=64, cpus=0.5, worker_memory_mb=1024, scratch_dir=SCRATCH)


@pytest.fixture(scope="module")
def worker():
    with os_worker(**BOUNDS) as api:
        yield api


def _worker_groups(controller: str) -> list[str]:
    """The cgroup parents of the OS workers this test process started (not other processes').

    Other children of the test process (workers of other tasks, from other modules' fixtures)
    have no such group, so only the groups that exist are the workers'.
    """
    groups = [os.path.join(cgroup.own_cgroup(controller), f"agentrl_jax-{pid}")
              for pid in child_pids()]
    return [group for group in groups if os.path.isdir(group)]


def _machine_cgroups(controller: str) -> list[str]:
    return [p for group in _worker_groups(controller) for p in glob.glob(f"{group}/*/")]


def _machine_mounts() -> list[str]:
    with open("/proc/mounts") as f:
        return [line for line in f if f" {SCRATCH}/" in line]


def _assert_nothing_left() -> None:
    assert _machine_cgroups("memory") == [] and _machine_cgroups("cpu") == []
    assert _machine_mounts() == []
    for parent in _worker_groups("memory"):
        with open(os.path.join(parent, "memory.usage_in_bytes")) as f:
            assert int(f.read()) < 16 * 1024**2   # the machines' memory is given back


def test_filling_the_disk_stops_at_the_quota(worker):
    host_shm = os.statvfs("/dev/shm")
    record = play_one(worker, Scripted(
        bash("head -c 200M /dev/zero > /root/fill; du -m /root/fill"),
        bash("for i in $(seq 20); do head -c 10M /dev/zero > /usr/f$i || break; done; "
             "echo files=$(ls /usr | grep -c '^f')"),
        bash("rm /root/fill /usr/f*; echo freed > /root/after"),
        answer("ok")), MATCH)
    fill, many, after = replies(record)[:3]
    written = re.search(r"(\d+)\s+/root/fill", fill)
    assert "No space left on device" in fill and int(written.group(1)) <= 64, fill
    assert "No space left on device" in many
    assert "empty" in after   # the quota is the machine's own: freeing it makes room again
    assert (record.status, record.reward) == ("completed", 1.0)
    # The host's /dev/shm never held the 200 MB (the machine writes to its own tmpfs).
    now = os.statvfs("/dev/shm")
    assert (host_shm.f_bfree - now.f_bfree) * now.f_frsize < 64 * 1024**2
    _assert_nothing_left()


def test_allocating_is_bounded_for_the_whole_machine(worker):
    # Three processes of 150 MB, each well under the per-process address-space limit (2 GB).
    record = play_one(worker, Scripted(
        bash("for i in 1 2 3; do python3 -c 'import time; b = bytearray(150 << 20); "
             "time.sleep(60)' & done; sleep 5; echo alive=$(pgrep -c python3)"),
        bash("echo still answering"),
        answer("ok")), MATCH)
    allocated, after = replies(record)[:2]
    alive = int(allocated.rsplit("alive=", 1)[1].split()[0])
    assert alive <= 1, allocated   # 2 x 150 MB is over the machine's 256 MB
    assert after.endswith("still answering\n")
    assert (record.status, record.reward) == ("completed", 1.0)
    _assert_nothing_left()


def test_spinning_does_not_starve_another_session(worker):
    # (How much CPU the quota leaves a spinning machine is measured by
    # benchmarks/probes/os_sandbox.py; on a loaded host the loops may get less than their quota
    # anyway.)
    quotas = []

    async def run() -> tuple:
        async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
            spinner = asyncio.create_task(play_episode(client, worker, Scripted(
                bash("for i in 1 2 3 4; do (while :; do :; done) & done; echo spinning"),
                bash("sleep 6; echo done"), answer("ok")), MATCH, session_id=1))
            while not _machine_cgroups("cpu"):
                await asyncio.sleep(0.1)
            await asyncio.sleep(2)   # the loops are running
            other = await play_episode(client, worker, Scripted(
                bash("echo hello from another session"), answer("ok")), MATCH, session_id=2)
            for path in _machine_cgroups("cpu"):
                with open(os.path.join(path, "cpu.cfs_quota_us")) as f:
                    quotas.append(int(f.read()))
            return await spinner, other

    spinner, other = asyncio.run(run())
    assert replies(other)[0].endswith("hello from another session\n")
    assert (other.status, other.reward) == ("completed", 1.0)
    assert (spinner.status, spinner.reward) == ("completed", 1.0)
    assert quotas == [cgroup.CFS_PERIOD_US // 2]   # the spinning machine: half a CPU
    _assert_nothing_left()


def test_fork_bomb_is_stopped_and_the_session_goes_on(worker):
    record = play_one(worker, Scripted(
        bash(":(){ :|:& };:"), bash("sleep 2"), bash("echo recovered"), answer("ok")), MATCH)
    # The bomb is stopped at the latest during the next command (which it may cost).
    assert replies(record)[2].endswith("recovered\n"), replies(record)
    assert (record.status, record.reward) == ("completed", 1.0)
    _assert_nothing_left()
