"""The OS worker's machines: built from their image or refused, writable, and thrown away.

Issue #16, items 0 and 1, through a real worker's HTTP API.
"""

from __future__ import annotations

import asyncio
import glob
import os
import signal

import httpx
import pytest
from os_attack_support import (
    FIXTURES,
    MATCH,
    ROOTFS,
    SYSTEM,
    Scripted,
    answer,
    bash,
    child_pids,
    needs_root_sandbox,
    os_worker,
    replies,
)

from environments.oracle import play_episode, play_one
from environments.os_interaction.task import OSTask
from environments.sandbox import cgroup

pytestmark = needs_root_sandbox


def test_worker_refuses_to_start_without_its_image(tmp_path):
    log = tmp_path / "worker.log"
    with pytest.raises(RuntimeError, match="before listening"):
        with os_worker(log_path=log, rootfs_dir=str(tmp_path)):
            pass
    reason = log.read_text()
    assert "['default'] are not built" in reason and "scripts/setup.sh" in reason


def test_host_fallback_only_when_allowed(tmp_path):
    with os_worker(rootfs_dir=str(tmp_path), allow_host_fallback=True) as api:
        record = play_one(api, Scripted(answer("ok")), MATCH)
    assert (record.status, record.reward) == ("completed", 1.0)
    assert (record.metrics["image"], record.metrics["root"]) == ("host", "host")


@pytest.fixture(scope="module")
def worker():
    with os_worker() as api:
        yield api


def test_root_is_writable_like_a_container(worker):
    record = play_one(worker, Scripted(bash(
        "mkdir /working2 && echo x > /usr/stock2.log && echo y > /top.txt && "
        "useradd -m bob && chmod 700 /usr/bin/find && ls -ld /working2 /top.txt && "
        "stat -c '%a %U' /usr/bin/find /usr/stock2.log && id -un && grep -c ^bob: /etc/passwd"),
        answer("ok")), MATCH)
    reply = replies(record)[0]
    assert "Read-only" not in reply and "cannot" not in reply, reply
    assert "700 root\n644 root\nroot\n1\n" in reply, reply
    assert record.metrics["root"] == "overlay"


def test_init_scripts_that_write_the_system_run(worker):
    # The fixture's init does mkdir /working, writes /usr/stock.log and adds a user.
    record = play_one(worker, Scripted(bash("cat /working/note; wc -l < /usr/stock.log"),
                                       answer("3")), SYSTEM)
    assert replies(record)[0].endswith("hi\n2\n")
    assert (record.status, record.reward) == ("completed", 1.0)


def test_root_is_discarded_with_the_session(worker):
    first = play_one(worker, Scripted(bash("echo mine > /usr/left_behind"), answer("ok")), MATCH)
    assert first.reward == 1.0
    second = play_one(worker, Scripted(bash("cat /usr/left_behind"), answer("ok")), MATCH)
    assert "No such file" in replies(second)[0]
    assert not (ROOTFS / "default" / "usr" / "left_behind").exists()   # the image is untouched


def test_what_a_killed_worker_leaves_is_removed_by_the_next(tmp_path):
    scratch = "/dev/shm/agentrl_os_redteam_killed"

    def mounts():
        with open("/proc/mounts") as f:
            return [line for line in f if f" {scratch}/" in line]

    async def kill_mid_episode(api: str) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
            episode = asyncio.create_task(play_episode(client, api, Scripted(
                bash("head -c 20M /dev/zero > /root/fill && sleep 30"), answer("ok")), MATCH, 1))
            while not mounts():
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)
            for pid in dead:
                os.kill(pid, signal.SIGKILL)
            await episode

    before = set(child_pids())   # (other tests' workers may be running)
    with os_worker(scratch_dir=scratch) as api:
        dead = set(child_pids()) - before
        asyncio.run(kill_mid_episode(api))
    assert mounts() and os.listdir(scratch)   # the dead worker's machine is still there
    assert any(glob.glob(os.path.join(cgroup.own_cgroup("memory"), f"agentrl_jax-{pid}"))
               for pid in dead)
    OSTask("test", data_dir=str(FIXTURES), scratch_dir=scratch)
    assert mounts() == [] and os.listdir(scratch) == []
    assert not any(glob.glob(os.path.join(cgroup.own_cgroup(c), f"agentrl_jax-{pid}"))
                   for pid in dead for c in cgroup.CONTROLLERS)
