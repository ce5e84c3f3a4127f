"""Sandboxes with users of their own (`uid_block`): a container's root, bounded as one machine.

Needs host root, the default image (scripts/setup.sh) and cgroup v1 memory, cpu and pids.
"""

from __future__ import annotations

import os

import pytest
from sandbox_helpers import needs_bwrap, run

from environments.sandbox import (
    ExecStatus,
    Limits,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxInstance,
    cgroup,
)
from environments.sandbox.mounts import host_root
from environments.sandbox.uid_block import BLOCK_BASE, BLOCK_SIZE

IMAGE = os.path.join(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"),
                     "default")
pytestmark = [needs_bwrap, pytest.mark.skipif(
    not (host_root() and cgroup.available() and os.path.isdir(os.path.join(IMAGE, "usr"))),
    reason="needs host root, cgroup v1 memory+cpu+pids and the default image (scripts/setup.sh)")]


@pytest.fixture
def users_config(scratch_dir) -> SandboxConfig:
    return SandboxConfig(image=IMAGE, writable=(), writable_root=True, uid_block=True,
                         scratch_dir=scratch_dir,
                         limits=Limits(timeout_s=20, disk_bytes=32 * 1024**2, processes=64,
                                       sandbox_memory_bytes=256 * 1024**2, cpus=0.5))


def test_useradd_chown_and_su_work_as_in_a_container(users_config):
    async def go():
        async with Sandbox(users_config).session() as shell:
            made = await shell.run(
                "useradd -m -s /bin/bash jack && cd /home/jack && echo 'echo hi' > test && "
                "chmod 000 test && chown jack test && stat -c '%U %a' test && su - jack </dev/null"
                " && echo logged-out")
            as_jack = await shell.run(
                "su jack -c 'id -un; grep CapEff /proc/self/status; touch /root/x' 2>&1; "
                "chmod 700 /home/jack/test && su - jack -c ./test")
            nested = await shell.run("unshare --user true 2>&1; echo $?")
            return made, as_jack, nested, shell.layer_path

    made, as_jack, nested, layer = run(go())
    assert (made.status, made.stdout) == (ExecStatus.OK, "jack 0\nlogged-out\n"), made
    # jack is an ordinary user: no capabilities, no write to root's home; his file runs.
    assert as_jack.stdout.splitlines()[:2] == ["jack", "CapEff:\t0000000000000000"], as_jack
    assert "Permission denied" in as_jack.stdout and as_jack.stdout.endswith("hi\n")
    assert nested.stdout.endswith("1\n")   # no nested user namespaces
    assert not os.path.exists(layer)


def test_its_ids_are_a_block_of_its_own_on_the_host(users_config):
    async def go():
        async with Sandbox(users_config).session() as shell:
            await shell.run("useradd -m jack && su jack -c 'touch /home/jack/f'")
            root = os.path.join(shell.layer_path, "upper")
            owner = os.stat(os.path.join(root, "home/jack/f")).st_uid
            return owner, shell.layer_path, os.stat(shell.layer_path).st_uid

    owner, layer, block = run(go())
    assert block >= BLOCK_BASE and (block - BLOCK_BASE) % BLOCK_SIZE == 0
    assert owner == block + 1000   # jack's files are host uid block + 1000, nobody else's


def test_the_process_limit_holds_for_all_its_users_together(users_config):
    async def go():
        async with Sandbox(users_config).session() as shell:
            await shell.run("useradd jack")
            # 40 sleeping processes as root and 40 as jack: each uid is under its RLIMIT_NPROC
            # (64), the machine's 80 are over its pids limit (64).
            return await shell.run(
                "for i in $(seq 40); do sleep 30 & done; "
                "su jack -c 'for i in $(seq 40); do sleep 30 & done; wait' 2>&1 &"
                " sleep 2; echo alive=$(pgrep -c sleep)", timeout=15)

    result = run(go())
    alive = result.stdout.rsplit("alive=", 1)
    assert result.status == ExecStatus.PROCESS_LIMIT or int(alive[1]) < 64, result


def test_users_need_an_inside_root_and_cgroups(users_config, monkeypatch):
    with pytest.raises(ValueError, match="inside_uid 0"):
        SandboxConfig(image=IMAGE, writable=(), writable_root=True, uid_block=True,
                      inside_uid=1000)
    # Without a pids cgroup nothing would bound its users' processes together: refused.
    monkeypatch.setattr(cgroup, "available", lambda: False)
    with pytest.raises(SandboxError, match="users of its own needs the bwrap backend"):
        SandboxInstance(users_config)
