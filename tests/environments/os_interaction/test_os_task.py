"""OSTask's choice of machines: the images it needs, or a refusal that says why."""

from __future__ import annotations

import pytest
from os_task_fixtures import FIXTURES

from environments.os_interaction.machine import MachineSpec
from environments.os_interaction.task import OSTask
from environments.sandbox.mounts import host_root


def test_refuses_without_its_images(tmp_path):
    with pytest.raises(ValueError, match=r"\['default'\] are not built .* scripts/setup.sh"):
        OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path))


def test_host_fallback_is_explicit_and_stated(tmp_path, capsys):
    task = OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path),
                  allow_host_fallback=True)
    assert task.specs["default"] == MachineSpec(
        image=None, root="host", scratch_dir=task.specs["default"].scratch_dir,
        limits=task.specs["default"].limits,
        worker_memory_bytes=task.specs["default"].worker_memory_bytes)
    assert "default: host" in capsys.readouterr().err


def test_uses_the_image_with_the_root_asked(tmp_path):
    (tmp_path / "default" / "usr").mkdir(parents=True)
    task = OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path), root="seeded",
                  memory_mb=100, disk_mb=10, cpus=0.25, worker_memory_mb=1000)
    spec = task.specs["default"]
    assert (spec.image, spec.root) == (str(tmp_path / "default"), "seeded")
    assert (spec.limits.sandbox_memory_bytes, spec.limits.disk_bytes, spec.limits.cpus) == (
        100 * 1024**2, 10 * 1024**2, 0.25)
    assert spec.worker_memory_bytes == 1000 * 1024**2
    auto = OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path))
    assert auto.specs["default"].root == ("overlay" if host_root() else "seeded")
    with pytest.raises(ValueError, match="root must be"):
        OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path), root="tmpfs")


def test_machine_spec_configs():
    overlay = MachineSpec(image="/img", root="overlay").sandbox_config()
    assert overlay.writable_root and overlay.writable == ()
    seeded = MachineSpec(image="/img", root="seeded").sandbox_config()
    assert not seeded.writable_root and "/etc" in seeded.writable
    host = MachineSpec(image=None, root="host").sandbox_config()
    assert host.image is None and "/etc" not in host.writable
    with pytest.raises(ValueError):
        MachineSpec(image=None, root="overlay").sandbox_config()


@pytest.mark.skipif(not host_root(), reason="root=overlay needs a host-root worker")
def test_an_explicit_overlay_refuses_to_start_without_cgroups(tmp_path, monkeypatch):
    (tmp_path / "default" / "usr").mkdir(parents=True)
    monkeypatch.setattr("environments.sandbox.cgroup.available", lambda: False)
    with pytest.raises(ValueError, match="root=overlay bounds each machine's memory and CPU"):
        OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path), root="overlay")
    # Without bounds to enforce, it still grades beside the frozen machine.
    with pytest.raises(ValueError, match="needs the cgroup-v1 freezer"):
        OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path), root="overlay",
               memory_mb=0, cpus=0)
    monkeypatch.setattr("environments.sandbox.cgroup.freezer_available", lambda: True)
    task = OSTask("test", data_dir=str(FIXTURES), rootfs_dir=str(tmp_path), root="overlay",
                  memory_mb=0, cpus=0)
    limits = task.specs["default"].limits
    assert (limits.sandbox_memory_bytes, limits.cpus) == (None, None)
