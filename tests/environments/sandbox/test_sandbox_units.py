"""Pieces of the sandbox that need no sandbox: status decoding, output buffers, command lines."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.sandbox import ExecStatus, Limits, SandboxConfig
from environments.sandbox.apptainer import apptainer_argv
from environments.sandbox.bwrap import bwrap_argv
from environments.sandbox.flock_lease import lease_first_free
from environments.sandbox.layer import PrivateLayer
from environments.sandbox.output import StreamBuffer
from environments.sandbox.process import prlimit_argv, reachable_open_files
from environments.sandbox.result import classify
from environments.sandbox.session import _quote
from environments.sandbox.uids import acquire_uid
from environments.sandbox.userns import lease_block

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


# --- status decoding -------------------------------------------------------------------------

@pytest.mark.parametrize("code, stderr, status, sig", [
    (0, b"", ExecStatus.OK, None),
    (3, b"boom", ExecStatus.NONZERO_EXIT, None),
    (128 + signal.SIGXCPU, b"", ExecStatus.KILLED_CPU, signal.SIGXCPU),
    (128 + signal.SIGXFSZ, b"", ExecStatus.FILE_TOO_LARGE, signal.SIGXFSZ),
    (1, b"write error: File too large", ExecStatus.FILE_TOO_LARGE, None),
    (1, b"Traceback ...\nMemoryError\n", ExecStatus.KILLED_MEMORY, None),
    (2, b"bash: xmalloc: cannot allocate 1073741824 bytes", ExecStatus.KILLED_MEMORY, None),
    (134, b"terminate called after throwing an instance of 'std::bad_alloc'",
     ExecStatus.KILLED_MEMORY, signal.SIGABRT),
    (0, b"bash: fork: retry: Resource temporarily unavailable", ExecStatus.PROCESS_LIMIT, None),
    (1, b"RuntimeError: can't start new thread", ExecStatus.PROCESS_LIMIT, None),
    (128 + signal.SIGKILL, b"", ExecStatus.KILLED_SIGNAL, signal.SIGKILL),
    (128 + signal.SIGSEGV, b"", ExecStatus.KILLED_SIGNAL, signal.SIGSEGV),
])
def test_classify(code, stderr, status, sig):
    assert classify(code, stderr) == (status, sig)


def test_plain_failure_mentioning_memory_words_in_stdout_is_not_a_memory_kill():
    # Only stderr is inspected, and only for failed commands.
    assert classify(0, b"")[0] is ExecStatus.OK
    assert classify(1, b"no such file")[0] is ExecStatus.NONZERO_EXIT


# --- output buffer ---------------------------------------------------------------------------

def test_stream_buffer_keeps_head_and_finds_marker_after_a_flood():
    buf = StreamBuffer(limit=10)
    for _ in range(100):
        buf.feed(b"y\n" * 5000)  # ~1 MB, far beyond the limit
    buf.feed(b"tail__MARK__ 0\n")
    out, truncated = buf.output(buf.data.find(b"__MARK__"))
    assert out == b"y\ny\ny\ny\ny\n" and truncated
    assert len(buf.data) < 10 + 8192  # memory stays bounded


def test_stream_buffer_marker_split_across_chunks():
    buf = StreamBuffer(limit=4)
    buf.feed(b"x" * 10_000 + b"__MA")
    buf.feed(b"RK__")
    assert buf.data.find(b"__MARK__") >= 0


def test_stream_buffer_short_output_is_not_truncated():
    buf = StreamBuffer(limit=100)
    buf.feed(b"hello")
    assert buf.output() == (b"hello", False)


# --- shell quoting of session scripts --------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))))
def test_quote_round_trips_through_bash(script):
    printed = subprocess.run([b"bash", b"-c", b"printf %s " + _quote(script)],
                             capture_output=True, check=True).stdout
    assert printed == script.encode()


# --- command lines ---------------------------------------------------------------------------

def _layer(tmp_path, writable=("/root", "/tmp")) -> PrivateLayer:
    return PrivateLayer(str(tmp_path / "scratch"), writable, owner=None, inside_uid=0,
                        hostname="box")


def _pairs(argv, flag):
    return [tuple(argv[i + 1:i + 3]) for i, a in enumerate(argv) if a == flag]


def test_prlimit_argv():
    argv = prlimit_argv(Limits(memory_bytes=100, processes=7, cpu_seconds=3, file_size_bytes=9,
                               open_files=None))
    assert argv == ["prlimit", "--core=0", "--as=100", "--nproc=7", "--cpu=3:4", "--fsize=9", "--"]
    assert prlimit_argv(Limits(None, None, None, None, None)) == ["prlimit", "--core=0", "--"]


def test_open_files_are_capped_at_what_an_unprivileged_worker_may_hand_on(monkeypatch):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    if hard != resource.RLIM_INFINITY:
        assert reachable_open_files(Limits(open_files=hard + 1)).open_files == hard
    assert reachable_open_files(Limits(open_files=16)).open_files == 16
    assert reachable_open_files(Limits(open_files=None)).open_files is None


def test_bwrap_argv_joins_a_pid_namespace_only_with_its_user_namespace(tmp_path):
    layer = _layer(tmp_path)
    config = SandboxConfig(image="/images/os", uid_block=True)
    argv = bwrap_argv(config, layer, ["true"], userns_fd=5, pidns_fd=6)
    assert "--unshare-pid" not in argv and argv[argv.index("--pidns") + 1] == "6"
    assert "--pidns" not in bwrap_argv(config, layer, ["true"], userns_fd=5)
    with pytest.raises(ValueError, match="user namespace"):
        bwrap_argv(SandboxConfig(image="/images/os"), layer, ["true"], pidns_fd=6)


def test_bwrap_argv_masks_proc_as_docker_does(tmp_path):
    argv = bwrap_argv(SandboxConfig(image="/images/os"), _layer(tmp_path), ["true"])
    masked = [dst for src, dst in _pairs(argv, "--dev-bind") if src == "/dev/null"]
    assert masked == [f for f in ("/proc/kcore", "/proc/keys", "/proc/latency_stats",
                                  "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug")
                      if os.path.isfile(f)]
    for directory in ("/proc/asound", "/proc/acpi", "/proc/scsi", "/proc/tty/driver"):
        empty_read_only = ["--tmpfs", directory, "--remount-ro", directory]
        windows = [argv[i:i + 4] for i in range(argv.index("--proc"), len(argv))]
        assert (empty_read_only in windows) == os.path.isdir(directory)


def test_bwrap_argv_isolates_by_default(tmp_path):
    layer = _layer(tmp_path)
    config = SandboxConfig(ro_binds=(("/data/x", "/task"),))
    argv = bwrap_argv(config, layer, ["bash", "-c", "id"], info_fd=7)
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent",
                 "--new-session", "--clearenv", "--disable-userns"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert ("/usr", "/usr") in _pairs(argv, "--ro-bind")
    assert ("/data/x", "/task") in _pairs(argv, "--ro-bind")
    assert set(_pairs(argv, "--bind")) == {(src, dst) for dst, src in layer.writable.items()}
    assert argv[argv.index("--info-fd") + 1] == "7"
    assert argv[-4:] == ["--", "bash", "-c", "id"]


def test_bwrap_argv_with_image_and_network(tmp_path):
    argv = bwrap_argv(SandboxConfig(image="/images/os", network=True), _layer(tmp_path), ["true"])
    assert "--unshare-net" not in argv
    assert ("/images/os", "/") in _pairs(argv, "--ro-bind")
    assert ("/usr", "/usr") not in _pairs(argv, "--ro-bind")


def test_apptainer_argv(tmp_path):
    layer = _layer(tmp_path)
    config = SandboxConfig(image="/images/os.sif", ro_binds=(("/data", "/task"),))
    argv = apptainer_argv(config, layer, ["bash", "--norc"], apptainer="/opt/bin/apptainer")
    assert argv[:3] == ["/opt/bin/apptainer", "--silent", "exec"]
    for flag in ("--containall", "--userns", "--no-privs", "--fakeroot", "--net"):
        assert flag in argv
    assert argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--no-mount") + 1] == "bind-paths,cwd"
    assert argv[argv.index("--home") + 1] == f"{layer.writable['/root']}:/root"
    assert argv[argv.index("--bind") + 1] == f"{layer.writable['/tmp']}:/tmp:rw"
    assert "/data:/task:ro" in argv
    assert argv[argv.index("--pwd") + 1] == "/root"
    assert "--writable" not in argv  # the image stays read-only
    assert argv[-3:] == ["/images/os.sif", "bash", "--norc"]
    assert "--net" not in apptainer_argv(SandboxConfig(image="/i", network=True), layer, ["true"])


def test_apptainer_argv_rejects_what_it_cannot_express(tmp_path):
    with pytest.raises(ValueError, match="needs an image"):
        apptainer_argv(SandboxConfig(), _layer(tmp_path), ["true"])
    with pytest.raises(ValueError, match="commas"):
        apptainer_argv(SandboxConfig(image="/i", env={"A": "x,y"}), _layer(tmp_path), ["true"])


def test_backend_selection(monkeypatch):
    import environments.sandbox.config as config_module

    monkeypatch.setattr(config_module.shutil, "which", lambda name: None)
    assert SandboxConfig().resolved_backend() == "bwrap"
    monkeypatch.setattr(config_module.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert SandboxConfig().resolved_backend() == "apptainer"
    assert SandboxConfig(backend="bwrap").resolved_backend() == "bwrap"
    with pytest.raises(ValueError):
        SandboxConfig(backend="docker")
    with pytest.raises(ValueError):
        SandboxConfig(writable=("relative/path",))


# --- private layer and uid leases ------------------------------------------------------------

def test_private_layer_lifecycle(tmp_path):
    layer = _layer(tmp_path, writable=("/root", "/var/tmp"))
    assert set(layer.writable) == {"/root", "/var/tmp"}
    os.makedirs(os.path.join(layer.writable["/root"], "deep", "er"))
    os.symlink("/etc", os.path.join(layer.writable["/root"], "link"))
    os.chmod(os.path.join(layer.writable["/root"], "deep"), 0)  # as a hostile sandbox might
    with open(os.path.join(layer.etc, "passwd")) as f:
        assert f.read().startswith("root:x:0:0:")
    layer.remove()
    assert not layer.exists
    assert os.path.isdir("/etc")  # the symlink was removed, not followed


@pytest.mark.skipif(os.geteuid() != 0, reason="uid leases need root")
def test_uid_leases_are_exclusive_and_released(tmp_path):
    lock_dir = str(tmp_path / "locks")
    a = acquire_uid(5_000_000, 2, lock_dir)
    b = acquire_uid(5_000_000, 2, lock_dir)
    assert {a.uid, b.uid} == {5_000_000, 5_000_001}
    with pytest.raises(RuntimeError, match="in use"):
        acquire_uid(5_000_000, 2, lock_dir)
    a.release()
    assert acquire_uid(5_000_000, 2, lock_dir).uid == a.uid


def test_flock_leases_take_each_candidate_once_until_released(tmp_path):
    lock_dir = str(tmp_path / "locks")
    candidates = range(7, 37, 10)
    leases = [lease_first_free(lock_dir, candidates) for _ in candidates]
    assert sorted(lease[0] for lease in leases) == [7, 17, 27]
    assert lease_first_free(lock_dir, candidates) is None
    os.close(leases[1][1])   # closing the fd gives the id back
    again = lease_first_free(lock_dir, candidates)
    assert again is not None and again[0] == leases[1][0]
    for _, fd in [leases[0], leases[2], again]:
        assert not os.get_inheritable(fd)
        os.close(fd)


def test_a_worker_uid_block_lease_is_kept_across_exec(tmp_path):
    block, fd = lease_block(str(tmp_path), 1)
    assert block == 0 and os.get_inheritable(fd)   # bwrap, exec'd by userns.py, holds it
    with pytest.raises(RuntimeError, match="in use"):
        lease_block(str(tmp_path), 1)
    os.close(fd)


def test_build_rootfs_script_parses():
    script = os.path.join(REPO, "environments", "sandbox", "images", "build_rootfs.sh")
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    bad = subprocess.run(["bash", script, "no-such-image"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown image" in bad.stderr


def test_apptainer_def_files_are_well_formed():
    images = os.path.join(REPO, "environments", "sandbox", "images")
    defs = sorted(n for n in os.listdir(images) if n.endswith(".def"))
    assert {d[:-4] for d in defs} >= {"os_interaction", "db", "kg", "alfworld", "webshop",
                                      "worker"}
    for name in defs:
        with open(os.path.join(images, name)) as f:
            lines = [ln for ln in f.read().splitlines() if ln and not ln.startswith("#")]
        header = dict(ln.split(":", 1) for ln in lines if not ln.startswith(("%", " ", "\t"))
                      and ":" in ln and lines.index(ln) < lines.index("%post"))
        assert header["Bootstrap"].strip() == "docker", name
        assert header["From"].strip(), name
        sections = {ln.split()[0] for ln in lines if ln.startswith("%")}
        assert {"%post", "%labels"} <= sections, name
        assert sections <= {"%post", "%labels", "%environment", "%runscript", "%files", "%help",
                            "%test"}, name


def _cow_layer(tmp_path):
    """A stand-in for a writable-root layer: its overlay root and the image it shows."""
    pristine, root = tmp_path / "pristine", tmp_path / "root"
    for rel in ("usr/bin", "usr/lib", "etc/alternatives", "etc/python3.11", "usr/local/lib"):
        (pristine / rel).mkdir(parents=True)
    (pristine / "etc/ld.so.cache").write_text("")
    return SimpleNamespace(root=str(root), pristine=str(pristine), system=None, writable={},
                           path=str(tmp_path), etc=str(tmp_path / "etc"))


def test_bwrap_argv_with_a_writable_root(tmp_path):
    layer = _cow_layer(tmp_path)
    config = SandboxConfig(image="/images/os", writable=(), writable_root=True)
    argv = bwrap_argv(config, layer, ["true"])
    assert (layer.root, "/") in _pairs(argv, "--bind")
    assert ("/images/os", "/") not in _pairs(argv, "--ro-bind")
    assert not any(dst.startswith("/usr") for _, dst in _pairs(argv, "--ro-bind"))


def test_bwrap_argv_of_a_pristine_system_process(tmp_path):
    layer = _cow_layer(tmp_path)
    config = SandboxConfig(image="/images/os", writable=(), writable_root=True)
    argv = bwrap_argv(config, layer, ["true"], pristine_system=True, env={"PATH": "/usr/bin"})
    ro = _pairs(argv, "--ro-bind")
    for rel in ("usr/bin", "usr/lib", "etc/alternatives", "etc/python3.11", "etc/ld.so.cache"):
        assert (os.path.join(layer.pristine, rel), "/" + rel) in ro
    assert ("/dev/null", "/etc/ld.so.preload") in ro
    assert ("/usr/share/perl5", "/usr/share/perl5") not in ro   # only what the image has
    assert argv[argv.index("--tmpfs", argv.index("/usr/bin")) + 1] == "/usr/local/lib"
    # After the root, and the environment is exactly the one given (plus HOME).
    assert argv.index("/") < argv.index("/usr/bin")
    assert _pairs(argv, "--setenv") == [("HOME", "/root"), ("PATH", "/usr/bin")]


def test_apptainer_argv_with_a_writable_root(tmp_path):
    layer = _layer(tmp_path)
    image = tmp_path / "image"
    (image / "usr").mkdir(parents=True)
    config = SandboxConfig(image=str(image), writable_root=True)
    agent = apptainer_argv(config, layer, ["bash"])
    overlay = os.path.join(layer.path, "overlay")
    assert agent[agent.index("--overlay") + 1] == overlay and os.path.isdir(overlay)
    grader = apptainer_argv(config, layer, ["bash"], pristine_system=True, env={"A": "1"})
    assert grader[grader.index("--overlay") + 1] == f"{overlay}:ro"
    assert f"{image}/usr:/usr:ro" in grader
    assert grader[grader.index("--env") + 1:][:3] == ["HOME=/root", "--env", "A=1"]
    with pytest.raises(ValueError, match="directory image"):
        apptainer_argv(SandboxConfig(image="/x.sif", writable_root=True), layer, ["bash"],
                       pristine_system=True)
