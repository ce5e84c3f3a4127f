"""One unprivileged host uid per live sandbox.

Why: RLIMIT_NPROC counts the processes of a *real uid*, and the kernel ignores it for root. If
sandboxes ran as root (even as a mapped "root" in a user namespace, which is still host uid 0) a
fork bomb would not be stopped; if they all ran as one shared uid, one sandbox's fork bomb would
use up every other sandbox's process budget. So, when the worker runs as root, each sandbox gets
its own otherwise unused uid from a reserved range, and the process limit becomes exactly "the
processes of this sandbox". The uid owns nothing on the host except the sandbox's private layer,
so it also cannot read anything root-only even if a bind exposed it.

Leases are `flock`s on one file per uid under a root-only directory (`flock_lease.py`): they are
shared correctly by every worker process on the machine and are released by the kernel when a
worker dies.
"""

from __future__ import annotations

import errno
import fcntl
import os

from environments.sandbox.flock_lease import lease_first_free

_LOCK_DIR = "/run/agentrl_sandbox/uids"


class UidLease:
    """A held uid; `release()` (or process exit) gives it back."""

    def __init__(self, uid: int, fd: int):
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __repr__(self) -> str:
        return f"UidLease(uid={self.uid}, held={self._fd is not None})"


def acquire_uid(first: int, count: int, lock_dir: str = _LOCK_DIR, stride: int = 1) -> UidLease:
    """Leases a uid first + k * stride (0 <= k < count) that no other sandbox here holds.

    With a `stride`, the lease is of the block [uid, uid + stride) (see `uid_block.py`).

    Raises:
      PermissionError: not running as root (only root may switch to an arbitrary uid).
      RuntimeError: every uid in the range is leased.
    """
    if os.geteuid() != 0:
        raise PermissionError("per-sandbox uids need root; run the worker as root")
    lease = lease_first_free(lock_dir, range(first, first + count * stride, stride))
    if lease is None:
        raise RuntimeError(f"all {count} sandbox uids from {first} are in use")
    return UidLease(*lease)


def is_leased(uid: int, lock_dir: str = _LOCK_DIR) -> bool:
    """Whether some live process holds `uid`'s lease (a probe: it takes and drops the lock)."""
    try:
        fd = os.open(os.path.join(lock_dir, str(uid)), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)   # drops the lock if we took it
    return False


def count_processes(uid: int) -> int:
    """How many processes (threads not counted) on the host have `uid` as their real uid."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += 1
        except OSError:
            continue  # exited while we looked
    return count
