"""Temporary store folders that outlive no process: each holds its owner's lock, and a folder
whose owner died without removing it (a worker killed with SIGKILL, as a launcher's death or
`kill -9` does) is removed by the next owner to start beside it.

The owner holds an exclusive `flock` on `owner.lock` inside its folder for as long as it
lives; the kernel drops that lock when the process ends, however it ends. A folder whose lock
can be taken is therefore orphaned. Locks work across PID namespaces (a sandboxed worker's), where
a process id would not. A folder without `owner.lock` is left alone: it is not one of these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "agentrl-kg-"
OWNER_LOCK = "owner.lock"


class OwnedDir:
    """A fresh folder `PREFIX*` under `parent` (default: the system's temporary folder), locked
    by this process until `remove()`; orphaned siblings are removed first."""

    def __init__(self, parent: str | None = None) -> None:
        parent = parent or tempfile.gettempdir()
        remove_orphans(parent)
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
        # Locked before it is named `owner.lock`, so no sweeper ever sees it unlocked.
        pending = os.path.join(self.path, ".owner.lock.pending")
        self._fd: int | None = os.open(pending, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.rename(pending, os.path.join(self.path, OWNER_LOCK))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def remove_orphans(parent: str) -> list[str]:
    """Removes the `PREFIX*` folders under `parent` whose owner is gone; returns them."""
    removed = []
    for path in sorted(Path(parent).glob(PREFIX + "*")):
        try:
            fd = os.open(path / OWNER_LOCK, os.O_RDONLY)
        except OSError:
            continue   # no owner lock: not an owned folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue   # its owner lives
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    return removed
