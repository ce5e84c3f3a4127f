"""Copy-on-write roots, byte quotas, cgroups and pristine-system processes of real sandboxes.

Needs host root, the default image (scripts/setup.sh) and cgroup v1 memory+cpu controllers.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from sandbox_helpers import needs_bwrap, run

from environments.sandbox import ExecStatus, Limits, Sandbox, SandboxConfig, SandboxError, cgroup
from environments.sandbox.bwrap import pristine_system_problem
from environments.sandbox.mounts import host_root

IMAGE = os.path.join(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"),
                     "default")
pytestmark = [needs_bwrap, pytest.mark.skipif(
    not (host_root() and cgroup.available() and os.path.isdir(os.path.join(IMAGE, "usr"))),
    reason="needs host root, cgroup v1 memory+cpu and the default image (scripts/setup.sh)")]
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin"}


@pytest.fixture
def rootfs_config(scratch_dir) -> SandboxConfig:
    return SandboxConfig(image=IMAGE, writable=(), writable_root=True, scratch_dir=scratch_dir,
                         limits=Limits(timeout_s=20, disk_bytes=32 * 1024**2,
                                       sandbox_memory_bytes=128 * 1024**2, cpus=0.5))


def _mounts_under(path: str) -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(path)]


def test_root_is_writable_and_thrown_away(rootfs_config, scratch_dir):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            wrote = await shell.run("echo x > /usr/bin/new && echo y > /etc/motd && "
                                    "mkdir /top && stat -c %U /usr/bin/new /etc/passwd && id -u")
            assert (wrote.status, wrote.stdout) == (ExecStatus.OK, "root\nroot\n0\n"), wrote
            layer = shell.layer_path
            assert _mounts_under(layer)   # its tmpfs, image and overlay
            # A timeout restarts the shell in the same machine: the files stay.
            slow = await shell.run("sleep 30", timeout=1)
            assert slow.status == ExecStatus.TIMEOUT
            assert (await shell.run("cat /usr/bin/new")).stdout == "x\n"
        return layer

    layer = run(go())
    assert not os.path.exists(layer) and _mounts_under(layer) == []
    assert not os.path.exists(os.path.join(IMAGE, "usr/bin/new"))
    with open(os.path.join(IMAGE, "etc/motd")) as f:
        assert "y\n" != f.read()


def test_writes_stop_at_the_byte_quota(rootfs_config):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            full = await shell.run("head -c 100M /dev/zero > /big; du -m /big | cut -f1")
            return full

    full = run(go())
    assert "No space left on device" in full.stderr
    assert int(full.stdout) <= 32


def test_memory_is_bounded_for_all_processes_together(rootfs_config):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            # 3 x 60 MB, each far under RLIMIT_AS: only the sandbox's total is over its 128 MB.
            return await shell.run(
                "for i in 1 2 3; do python3 -c 'import time; b = bytearray(60 << 20); "
                "time.sleep(30)' & done; sleep 3; pgrep -c python3")

    assert int(run(go()).stdout) <= 2


def test_processes_run_in_the_sandbox_cgroups(rootfs_config):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            pid = int((await shell.run("sleep 30 & echo $!")).stdout)   # a pid inside
            group = shell._instance.cgroup   # noqa: SLF001 (the test looks at the host side)
            with open(os.path.join(group.paths["cpu"], "cpu.cfs_quota_us")) as f:
                quota = int(f.read())
            with open(os.path.join(group.paths["memory"], "memory.limit_in_bytes")) as f:
                memory = int(f.read())
            return pid, len(group.pids()), quota, memory, group.paths

    pid, count, quota, memory, paths = run(go())
    assert pid > 1 and count >= 3   # bwrap, its init, bash, sleep
    assert (quota, memory) == (cgroup.CFS_PERIOD_US // 2, 128 * 1024**2)
    assert not any(os.path.exists(p) for p in paths.values())   # removed with the sandbox


def test_pristine_system_process_uses_the_image_tools(rootfs_config):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            await shell.run("printf '#!/bin/sh\\necho forged\\n' > /usr/bin/wc && "
                            "chmod +x /usr/bin/wc && echo data > /root/file && "
                            "export SECRET=1 && wc() { echo forged; }")
            mine = await shell.run("wc -l < /root/file")
            graded = await shell.exec(["bash", "-c", "wc -l < /root/file; echo ${SECRET:-unset}"],
                                      pristine_system=True, env=ENV)
            again = await shell.run("echo ${SECRET:-unset} $(cat /root/file)")
            return mine, graded, again

    mine, graded, again = run(go())
    assert mine.stdout == "forged\n"
    assert graded.stdout == "1\nunset\n"          # the image's wc, the agent's file, no env
    assert again.stdout == "unset data\n"         # the shell was stopped; files stay


def test_pristine_system_refuses_a_replaced_bin(rootfs_config):
    async def go():
        async with Sandbox(rootfs_config).session() as shell:
            await shell.run("rm /bin && mkdir /bin && cp /usr/bin/true /bin/sh")
            with pytest.raises(SandboxError, match="/bin was replaced"):
                await shell.exec(["true"], pristine_system=True, env=ENV)

    run(go())


def test_pristine_system_problem_compares_with_the_image(tmp_path):
    image, root = tmp_path / "image", tmp_path / "root"
    for base in (image, root):
        (base / "usr/bin").mkdir(parents=True)
        (base / "etc").mkdir()
        (base / "bin").symlink_to("usr/bin")
    layer = SimpleNamespace(root=str(root), pristine=str(image), system=None)
    config = SandboxConfig(image="/unused", writable=(), writable_root=True)
    assert pristine_system_problem(config, layer) is None
    (root / "etc/ld.so.preload").mkdir()
    assert "ld.so.preload" in pristine_system_problem(config, layer)
    (root / "etc/ld.so.preload").rmdir()
    (root / "bin").unlink()
    (root / "bin").symlink_to("/root/evil")
    assert "link to /root/evil" in pristine_system_problem(config, layer)
    # A read-only image with writable directories (the seeded root): /etc is the sandbox's.
    etc = tmp_path / "rw_etc"
    (etc / "alternatives").mkdir(parents=True)
    (image / "etc/alternatives").mkdir()
    seeded = SandboxConfig(image=str(image), writable=("/etc",))
    layer = SimpleNamespace(root=None, pristine=None, system=None, writable={"/etc": str(etc)})
    assert pristine_system_problem(seeded, layer) is None
    (etc / "alternatives").rmdir()
    (etc / "alternatives").symlink_to("/root")
    assert "/etc/alternatives was replaced" in pristine_system_problem(seeded, layer)
    assert pristine_system_problem(SandboxConfig(), layer) is None   # the host's, read-only


def test_writable_root_needs_an_image():
    with pytest.raises(ValueError, match="needs an image"):
        SandboxConfig(writable_root=True)

