"""Where the fleet puts each task's worker: in a worker sandbox, or (OS, host root) beside it."""

from __future__ import annotations

import pytest

from environments.sandbox.mounts import host_root
from launch.env_fleet import PRIVATE_MOUNTS, task_worker_placements, worker_argv


@pytest.mark.skipif(not host_root(), reason="the exception is for a host-root launcher")
def test_a_host_root_fleet_runs_the_os_worker_unsandboxed_with_the_overlay_asked():
    placements = task_worker_placements(["echo", "os_interaction"], sandbox=True)
    assert placements["echo"] == {"sandbox": True, "params": []}
    assert placements["os_interaction"] == {"sandbox": False, "params": ["root=overlay"],
                                            "private_mounts": True}
    argv = worker_argv("os_interaction", "http://127.0.0.1:1", **placements["os_interaction"])
    assert argv[:len(PRIVATE_MOUNTS)] == list(PRIVATE_MOUNTS)
    assert argv[-2:] == ["--param", "root=overlay"]


def test_an_unsandboxed_fleet_changes_nothing():
    assert task_worker_placements(["echo", "os_interaction"], sandbox=False) == {
        "echo": {"sandbox": False, "params": []},
        "os_interaction": {"sandbox": False, "params": []}}


def test_private_mounts_are_only_for_unsandboxed_workers():
    with pytest.raises(ValueError, match="already has its own mount namespace"):
        worker_argv("echo", "http://127.0.0.1:1", sandbox=True, private_mounts=True)
