"""Where the fleet puts each task's worker: in a worker sandbox, or (OS, host root) beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from environments.fleet import PRIVATE_MOUNTS, REPO_ROOT, task_worker_placements, worker_argv
from environments.sandbox.mounts import host_root


@pytest.mark.skipif(not host_root(), reason="the exception is for a host-root launcher")
def test_a_host_root_fleet_runs_the_os_worker_unsandboxed_with_the_overlay_asked():
    placements = task_worker_placements(["echo", "os_interaction"], sandbox=True)
    assert placements["echo"] == {"sandbox": True, "params": []}
    assert placements["os_interaction"] == {"sandbox": False, "params": ["root=overlay"],
                                            "private_mounts": True}
    argv = worker_argv("os_interaction", "http://127.0.0.1:1", **placements["os_interaction"])
    assert argv[:len(PRIVATE_MOUNTS)] == list(PRIVATE_MOUNTS)
    assert argv[-2:] == ["--param", "root=overlay"]


@pytest.mark.skipif(not host_root(), reason="a host-root launcher's unsandboxed fleet")
def test_a_host_root_unsandboxed_fleet_changes_nothing():
    assert task_worker_placements(["echo", "os_interaction"], sandbox=False) == {
        "echo": {"sandbox": False, "params": []},
        "os_interaction": {"sandbox": False, "params": []}}


# Run as a launcher that is not host root: the root of a user namespace of its own (what a
# worker sandbox's root is), or a normal user where the tests run as one.
NOT_HOST_ROOT = r"""
import json
from environments.fleet import NeedsHostRoot, start_task_fleet, task_worker_placements
out = {"echo alone": task_worker_placements(["echo"], sandbox=True)}
for sandbox in (True, False):
    try:
        task_worker_placements(["echo", "os_interaction"], sandbox)
        out[f"refused {sandbox}"] = None
    except NeedsHostRoot as error:
        out[f"refused {sandbox}"] = str(error)
    out[f"fallback {sandbox}"] = task_worker_placements(["echo", "os_interaction"], sandbox,
                                                        allow_root_fallback=True)
try:
    start_task_fleet(["os_interaction"], ["test"])   # refuses before it starts anything
except NeedsHostRoot:
    out["fleet"] = "refused"
print(json.dumps(out))
"""


def test_a_launcher_that_is_not_host_root_refuses_the_os_task_unless_asked_for_the_fallback():
    prefix = ["unshare", "--user", "--map-root-user"] if os.geteuid() == 0 else []
    if prefix and subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here to run as a launcher that is not host root")
    done = subprocess.run([*prefix, sys.executable, "-c", NOT_HOST_ROOT], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["echo alone"] == {"echo": {"sandbox": True, "params": []}}
    for sandbox in (True, False):
        assert "task os_interaction needs a launcher that is host root" in out[f"refused {sandbox}"]
        assert "env.allow_root_fallback=True" in out[f"refused {sandbox}"]
        assert out[f"fallback {sandbox}"] == {
            "echo": {"sandbox": sandbox, "params": []},
            "os_interaction": {"sandbox": sandbox, "params": ["root=seeded"]}}
    assert out["fleet"] == "refused"


def test_private_mounts_are_only_for_unsandboxed_workers():
    with pytest.raises(ValueError, match="already has its own mount namespace"):
        worker_argv("echo", "http://127.0.0.1:1", sandbox=True, private_mounts=True)
