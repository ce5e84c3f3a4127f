"""The private writable layer of one sandbox: a host directory that lives exactly as long as it.

Layout under `<scratch>/<random id>/` (mode 0700, owned by the sandbox's uid):
  rw/<i>_<path>  one empty directory per writable sandbox path (e.g. /root, /tmp), bound rw;
  etc/           passwd, group and hosts for sandboxes built on the host's /usr (no image),
                 bound read-only, so that `ls -l`, `whoami` and `localhost` work;
and, for a copy-on-write root over an image (root only, see `mounts.py`):
  pristine/      the image, idmapped (its root-owned files owned by the sandbox's uid), read-only;
  upper/ work/   the overlay's upper layer (everything the sandbox changes) and its work dir;
  root/          the overlay: the sandbox's whole writable `/`;
  system<n>/     for a grader (`grading_system`): `debs/`, trusted packages the sandbox
                 installed, unpacked, and `view/`, a read-only overlay of them over `pristine/`.

With `size_bytes` (root only) the layer is a tmpfs of that size: a byte quota on everything the
sandbox writes, whose pages count against the memory cgroup of the process that writes them.

It lives on the host rather than inside the sandbox so that it survives restarting the sandbox's
shell (after a timeout, say) within one session, and so that deleting it on close is something
the host does and can check.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Sequence

from environments.sandbox import mounts, offline_packages


class PrivateLayer:
    """Creates the layer on construction; `remove()` deletes it and everything in it."""

    def __init__(self, scratch_dir: str, writable: tuple[str, ...], owner: int | None,
                 inside_uid: int, hostname: str, size_bytes: int | None = None,
                 image: str | None = None, owner_block: bool = False):
        """Args:
          scratch_dir: parent directory of all layers (created 0711 if missing).
          writable: sandbox paths to back with a private directory each.
          owner: host uid (and gid) that owns the layer; None: the current user.
          inside_uid: the sandbox's own uid, for the generated passwd.
          hostname: for the generated hosts file.
          size_bytes: make the layer a tmpfs of this size (needs root); None: a plain directory.
          image: build a copy-on-write root over this image directory (needs root and `owner`).
          owner_block: `owner` is the first of a block of host ids the sandbox maps (its users):
            the image's on-disk ids k show as owner + k (see `mounts.mount_idmapped`).
        """
        os.makedirs(scratch_dir, mode=0o711, exist_ok=True)
        self.path = os.path.join(scratch_dir, secrets.token_hex(8))
        os.mkdir(self.path, 0o700)
        self.root: str | None = None       # the writable root (overlay), if any
        self.pristine: str | None = None   # the image as the sandbox sees it, read-only
        self.system: str | None = None     # what a grader's system code comes from, if not that
        self._systems: dict[tuple[str, ...], str] = {}   # grading_system's, by its .debs
        self._owner, self._owner_block = owner, owner_block
        self._mounts: list[str] = []       # innermost last
        try:
            if size_bytes is not None:
                mounts.mount_tmpfs(self.path, size_bytes, owner)
                self._mounts.append(self.path)
            if image is not None:
                self._build_root(image, owner, owner_block)
            self.writable = {}
            os.mkdir(os.path.join(self.path, "rw"), 0o755)
            for i, dest in enumerate(writable):
                src = os.path.join(self.path, "rw", f"{i}{dest.replace('/', '_')}")
                os.makedirs(src, 0o755)
                self.writable[dest] = src
            self.etc = os.path.join(self.path, "etc")
            os.mkdir(self.etc, 0o755)
            _write_etc(self.etc, inside_uid, hostname)
            if owner is not None:
                # Only the rw/ tree and the root must be the sandbox's; etc/ stays root's.
                for root, dirs, _ in os.walk(os.path.join(self.path, "rw")):
                    for d in dirs:
                        os.chown(os.path.join(root, d), owner, owner)
                os.chown(os.path.join(self.path, "rw"), owner, owner)
                os.chown(self.path, owner, owner)
        except BaseException:
            self.remove()
            raise

    def _build_root(self, image: str, owner: int | None, owner_block: bool) -> None:
        if owner is None:
            raise OSError("a copy-on-write root needs a sandbox uid of its own (run as root)")
        self.pristine, self.root = (os.path.join(self.path, d) for d in ("pristine", "root"))
        upper, work = os.path.join(self.path, "upper"), os.path.join(self.path, "work")
        for d in (self.pristine, self.root, upper, work):
            os.mkdir(d, 0o755)
        for d in (upper, work):
            os.chown(d, owner, owner)   # the overlay's "/" takes the upper layer's owner
        mounts.mount_idmapped(image, self.pristine, owner, block=owner_block)
        self._mounts.append(self.pristine)
        mounts.mount_overlay(self.pristine, upper, work, self.root)
        self._mounts.append(self.root)

    def grading_system(self, debs: Sequence[str]) -> str:
        """Makes `system` the pristine image with `debs` unpacked over it, read-only; its path.

        For a grader that must find what the sandbox installed (`offline_packages.py`): the
        .debs are the image's own, so the view is as trusted as the image. Built once per set
        of .debs; without any, the pristine image itself. Its bytes count against the layer's
        quota. Raises OSError (e.g. ENOSPC) or ValueError (an unreadable .deb).
        """
        if self.pristine is None or self._owner is None:
            raise ValueError("a grading system needs a copy-on-write root")
        key = tuple(debs)
        if not key:
            self.system = self.pristine
            return self.system
        if key not in self._systems:
            base = os.path.join(self.path, f"system{len(self._systems)}")
            unpacked, view = os.path.join(base, "debs"), os.path.join(base, "view")
            for d in (base, unpacked, view):
                os.mkdir(d, 0o755)
            offline_packages.unpack(debs, unpacked, functools.partial(
                mounts.shown_id, uid=self._owner, block=self._owner_block), self.pristine)
            mounts.mount_readonly_overlay([unpacked, self.pristine], view)
            self._mounts.append(view)
            self._systems[key] = view
        self.system = self._systems[key]
        return self.system

    def remove(self) -> None:
        """Deletes the layer. Safe against symlinks planted inside and against chmod 000 dirs.

        Unmounts first (innermost first): the image is never walked, and a tmpfs goes at once.
        """
        while self._mounts:
            mounts.unmount(self._mounts.pop())
        if os.path.lexists(self.path):
            shutil.rmtree(self.path, onerror=_make_writable_and_retry)

    @property
    def exists(self) -> bool:
        return os.path.lexists(self.path)


def remove_stale_layers(scratch_dir: str, is_leased: Callable[[int], bool]) -> list[str]:
    """Deletes the layers under `scratch_dir` left by a worker that died; returns their paths.

    A layer is owned by its sandbox's uid, whose lease its sandbox holds until the layer is
    gone (`SandboxInstance.close`): a layer whose owner is not leased is nobody's. Its mounts
    (tmpfs, image, overlay) are detached first, innermost first.
    """
    if not os.path.isdir(scratch_dir):
        return []
    removed = []
    for name in os.listdir(scratch_dir):
        path = os.path.join(scratch_dir, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid == os.geteuid() or is_leased(info.st_uid):
            continue
        with open("/proc/mounts") as f:
            inside = [line.split()[1] for line in f]
        for target in sorted((m for m in inside if m == path or m.startswith(path + "/")),
                             key=len, reverse=True):
            mounts.unmount(target)
        shutil.rmtree(path, onerror=_make_writable_and_retry)
        removed.append(path)
    return removed


def _write_etc(etc: str, inside_uid: int, hostname: str) -> None:
    users = ["root:x:0:0:root:/root:/bin/bash", "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh"]
    groups = ["root:x:0:", "nogroup:x:65534:"]
    if inside_uid not in (0, 65534):
        users.append(f"user:x:{inside_uid}:{inside_uid}:user:/root:/bin/bash")
        groups.append(f"user:x:{inside_uid}:")
    files = {
        "passwd": "\n".join(users) + "\n",
        "group": "\n".join(groups) + "\n",
        "hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{hostname}\n",
        "hostname": f"{hostname}\n",
    }
    for name, text in files.items():
        with open(os.path.join(etc, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(etc, name), 0o644)


def _make_writable_and_retry(_func, path, _exc_info) -> None:
    # A sandbox may chmod its own directories to 000; a non-root host user must then restore
    # permissions before deleting (root needs no help). Symlinks are removed, never followed.
    os.chmod(os.path.dirname(path), stat.S_IRWXU)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, stat.S_IRWXU)
        shutil.rmtree(path, onerror=_make_writable_and_retry)
    elif os.path.lexists(path):
        os.unlink(path)
