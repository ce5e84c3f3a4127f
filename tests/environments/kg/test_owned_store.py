"""A KG store's temporary folder is removed by the next worker when its owner was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from environments.kg.owned_store import OWNER_LOCK, OwnedDir, remove_orphans

# A process that makes an owned folder in argv[1], prints its path and sleeps until killed.
OWNER = ("import sys, time\n"
         "from environments.kg.owned_store import OwnedDir\n"
         "print(OwnedDir(sys.argv[1]).path, flush=True)\n"
         "time.sleep(600)\n")


def start_owner(parent) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", OWNER, str(parent)],
                               stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def test_a_killed_owners_folder_is_removed_and_a_live_ones_is_kept(tmp_path):
    killed, orphan = start_owner(tmp_path)
    live, kept = start_owner(tmp_path)
    stranger = tmp_path / "agentrl-kg-no-lock"   # the prefix without an owner lock
    stranger.mkdir()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert os.path.isdir(orphan)   # nothing ran at its death

        mine = OwnedDir(str(tmp_path))
        assert not os.path.exists(orphan)
        assert os.path.isfile(os.path.join(kept, OWNER_LOCK))
        assert stranger.is_dir()
        assert remove_orphans(str(tmp_path)) == []   # this process's own folder is live too
        mine.remove()
        assert not os.path.exists(mine.path)
    finally:
        live.kill()
        live.wait()
    assert remove_orphans(str(tmp_path)) == [kept]
