"""Host-side mounts of a sandbox's writable root (root only): tmpfs, idmapped image, overlay.

(And the read-only overlay of a grader's system: the pristine image with the trusted packages
the sandbox installed over it, `layer.PrivateLayer.grading_system`.)

A copy-on-write root over a shared read-only image needs the image's files to look owned by the
sandbox's "root". The image is owned by host uid 0, and each sandbox runs as its own unprivileged
host uid U (see `uids.py`) that bwrap maps to 0 inside; so the image is mounted *idmapped*
(on-disk uid/gid 0 shown as U) and used as the lower layer of an overlay whose upper layer is
the sandbox's own. The image's other owners (e.g. group `shadow` of /etc/gshadow) are shown as
uids of `IMAGE_OWNERS`, a host range no process ever runs as: inside they look like `nobody`,
and the overlay can still copy such files up (it cannot copy up a file whose owner is
unmapped). Everything the sandbox writes lands in that upper layer, on a tmpfs sized to the
sandbox's byte quota; the image on disk never changes.

Idmapped mounts have no util-linux front end on Debian bookworm (`mount -o X-mount.idmap` is
2.39+), so they are made with the new mount API through libc's syscall(): open_tree(CLONE) of
the image, mount_setattr(MOUNT_ATTR_IDMAP) with a user namespace that maps 0 to U, move_mount to
the target. The user namespace comes from a short-lived `unshare --user` child whose maps root
writes.
"""

from __future__ import annotations

import ctypes
import os
import subprocess

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442   # x86_64 and arm64 alike
_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x00100000
_MNT_DETACH = 2
_MS_RDONLY = 1
IMAGE_OWNERS = 2_000_000   # on-disk uid/gid k > 0 of an image shows as host uid IMAGE_OWNERS + k
_MAPPED_IDS = 65_536


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def host_root() -> bool:
    """Whether this process is root of the initial user namespace, which these mounts need.

    Root of a nested user namespace (a worker run by `worker_wrap.py`) is not: it may not
    idmap the host's file systems.
    """
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def mount_tmpfs(target: str, size_bytes: int, owner: int | None) -> None:
    """A tmpfs of at most `size_bytes` at `target`, root directory 0700 owned by `owner`."""
    options = f"size={size_bytes},mode=0700,nr_inodes={max(1024, size_bytes // 4096)}"
    if owner is not None:
        options += f",uid={owner},gid={owner}"
    _check(_libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, options.encode()),
           f"mount tmpfs on {target}")


def shown_id(on_disk: int, uid: int, block: bool = False) -> int:
    """The host id as which `mount_idmapped(..., uid, block)` shows an image's on-disk id."""
    if block:
        return uid + on_disk
    return uid if on_disk == 0 else IMAGE_OWNERS + on_disk


def mount_idmapped(source: str, target: str, uid: int, block: bool = False) -> None:
    """Binds `source` read-only at `target`, on-disk uid and gid 0 shown as `uid`.

    On-disk ids 1..65535 show as IMAGE_OWNERS + id, or, with `block` (a sandbox that owns the
    host ids uid..uid+65535, see `uid_block.py`), as uid + id: its own users (`shown_id`).
    """
    if block:
        id_map = f"0 {shown_id(0, uid, block)} {_MAPPED_IDS}\n"
    else:
        id_map = f"0 {uid} 1\n1 {shown_id(1, uid)} {_MAPPED_IDS - 1}\n"
    helper = subprocess.Popen(["unshare", "--user", "sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        ns_path = f"/proc/{helper.pid}/ns/user"
        _wait_for_new_userns(helper.pid, ns_path)
        for name, text in (("uid_map", id_map), ("setgroups", "deny"), ("gid_map", id_map)):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(text)
        userns = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()
    try:
        tree = _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, source.encode(),
                                    _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC), f"open_tree {source}")
        try:
            attr = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, userns)
            _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH,
                                 ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr idmap")
            _check(_libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, target.encode(),
                                 _MOVE_MOUNT_F_EMPTY_PATH), f"move_mount to {target}")
        finally:
            os.close(tree)
    finally:
        os.close(userns)


def _wait_for_new_userns(pid: int, ns_path: str) -> None:
    """`unshare` has created its user namespace once its ns link differs from ours."""
    own = os.readlink("/proc/self/ns/user")
    for _ in range(1000):
        try:
            if os.readlink(ns_path) != own:
                return
        except FileNotFoundError:
            break
        os.sched_yield()
        if _libc.usleep(1000) != 0:
            break
    raise OSError(f"`unshare --user` (pid {pid}) did not create a user namespace")


def mount_overlay(lower: str, upper: str, work: str, target: str) -> None:
    """An overlay of `upper` (read-write) over `lower` (read-only) at `target`."""
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    _check(_libc.mount(b"overlay", target.encode(), b"overlay", 0, options.encode()),
           f"mount overlay on {target}")


def mount_readonly_overlay(lowers: list[str], target: str) -> None:
    """A read-only overlay of `lowers` (the first on top) at `target`."""
    options = f"lowerdir={':'.join(lowers)}"
    _check(_libc.mount(b"overlay", target.encode(), b"overlay", _MS_RDONLY, options.encode()),
           f"mount overlay on {target}")


def unmount(target: str) -> None:
    """Detaches the mount at `target` (lazily: a process still inside cannot block it)."""
    if os.path.ismount(target):
        _check(_libc.umount2(target.encode(), _MNT_DETACH), f"umount {target}")
