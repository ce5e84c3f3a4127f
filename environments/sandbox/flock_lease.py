"""Leases one free id of a range as an `flock` on a lock file named after it.

Sandbox uids (`uids.py`) and sandboxed workers' uid blocks (`userns.py`) are both handed out
this way: one lock file per candidate id under a root-only directory, held with an exclusive
`flock` for as long as the id is in use. The kernel shares those locks correctly between every
process on the machine and drops them when the holder dies, so a crashed worker leaks nothing.

Only the standard library is used: `userns.py` runs with `python -I` as host root, before any
sandbox exists, and loads this file by its path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
from collections.abc import Sequence


def lease_first_free(lock_dir: str, candidates: Sequence[int]) -> tuple[int, int] | None:
    """(id, fd holding its lock) of a candidate no other process holds, or None if all are held.

    The scan starts at a random candidate and wraps around, which spreads concurrent callers
    over the range. `lock_dir` is created (mode 0700) when missing, each lock file (0600) on
    first use. The fd is close-on-exec; closing it, or the process ending, gives the id back.

    Raises:
      OSError: the directory or a lock file cannot be made or opened, or `flock` fails for any
        reason other than another holder.
      ValueError: `candidates` is empty.
    """
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    start = random.randrange(len(candidates))
    for i in range(len(candidates)):
        candidate = candidates[(start + i) % len(candidates)]
        fd = os.open(os.path.join(lock_dir, str(candidate)),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue
            raise
        return candidate, fd
    return None
