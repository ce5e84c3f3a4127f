"""A sandbox with users of its own: a user namespace that maps a whole block of host uids.

bwrap maps one uid, so inside a sandbox every file belongs to "root" or to nobody: `useradd jack;
chown jack f` fails with EINVAL (uid 1000 is not mapped) and `su jack` cannot switch. A container
maps a range. Here, a worker that is host root leases a block of `BLOCK_SIZE` host uids per
sandbox (`uids.acquire_uid` with a stride, so leases are the same flocks as single uids) and makes
a user namespace in which inside uid/gid k is host B + k for k < BLOCK_SIZE (B: the block's first
uid, which the sandbox's outer processes run as). No other host id is mapped: whatever the
sandbox's root can do with its namespaced capabilities applies to files of its own block only
(the private layer, and the image mounted idmapped to the block), never to the host's.

How (`make_userns`): a short-lived helper, `unshare --user sleep`, started *as B* (so that B
owns the namespace and bwrap, also run as B, may join it with `--userns FD`), creates the
namespace; this process, host root, writes the maps (only a process with CAP_SETUID in the
parent namespace may map more than one id), then, through `nsenter` as the namespace's root,
sets its `user.max_user_namespaces` to 0, so that nothing inside can create nested user
namespaces (what bwrap's `--disable-userns` does for namespaces it makes itself). This process
keeps an fd of the namespace, which keeps it alive after the helper is gone; the sandbox's bwrap
processes inherit it (`SandboxInstance.start`). Subprocesses, not a fork: the worker runs threads.
"""

from __future__ import annotations

import os
import subprocess
import time

BLOCK_SIZE = 65_536
# Host uids of sandboxes with users: block b is [BLOCK_BASE + b * BLOCK_SIZE, + BLOCK_SIZE),
# above every other range of this repository (single sandbox uids at 3,000,000, image owners at
# 2,000,000, sandboxed workers' blocks from 100,000,000) and under 2**31 (no tool sees a
# negative uid).
BLOCK_BASE = 1_000_000_000
BLOCKS = 16_384
_SEAL = "echo 0 > /proc/sys/user/max_user_namespaces"


def id_map(first_host_id: int, count: int = BLOCK_SIZE) -> str:
    """uid_map/gid_map text: inside 0..count-1 -> host first_host_id.."""
    return f"0 {first_host_id} {count}\n"


def make_userns(first_host_id: int, count: int = BLOCK_SIZE) -> int:
    """An fd (close-on-exec) of a new user namespace owned by `first_host_id`, mapping the block.

    Raises:
      OSError: this process is not host root, user namespaces are disabled, or a step failed.
    """
    helper = subprocess.Popen(["unshare", "--user", "sleep", "60"], stdin=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, user=first_host_id, group=first_host_id,
                              extra_groups=[], cwd="/", env={"PATH": os.defpath})
    try:
        ns_path = f"/proc/{helper.pid}/ns/user"
        _wait_for_new_userns(helper, ns_path)
        mapping = id_map(first_host_id, count)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(mapping)
        sealed = subprocess.run(["nsenter", f"--user={ns_path}", "--setuid", "0", "--setgid", "0",
                                 "--", "/bin/sh", "-c", _SEAL], capture_output=True, text=True,
                                cwd="/", env={"PATH": os.defpath})
        if sealed.returncode != 0:
            raise OSError("cannot forbid nested user namespaces: "
                          f"{sealed.stderr.strip() or sealed.returncode}")
        return os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()
        helper.stderr.close()


def _wait_for_new_userns(helper: subprocess.Popen, ns_path: str) -> None:
    """`unshare` has made its user namespace once its ns link differs from ours."""
    own = os.readlink("/proc/self/ns/user")
    for _ in range(2000):
        try:
            if os.readlink(ns_path) != own:
                return
        except FileNotFoundError:
            break
        if helper.poll() is not None:
            break
        time.sleep(0.001)
    why = "timed out"
    if helper.poll() is not None:
        why = helper.stderr.read().decode(errors="replace").strip() or f"exit {helper.returncode}"
    raise OSError(f"`unshare --user` did not create a user namespace: {why}")
