"""The seccomp filter that refuses nested user namespaces (`environments/sandbox/seccomp.py`).

The program's decisions are checked by a small classic-BPF interpreter (no kernel needed); the
filter itself in real bwrap sandboxes: one mapping one uid, and a machine with users of its own
(host root, the default image), where without the filter `unshare -U` fails only because the
namespace's sysctl says 0 ("No space left on device"), and a 32-bit system call gets through.
"""

from __future__ import annotations

import os
import platform
import struct

import pytest
from sandbox_helpers import needs_bwrap, run

from environments.sandbox import ExecStatus, Limits, Sandbox, SandboxConfig, cgroup, seccomp
from environments.sandbox.bwrap import bwrap_argv
from environments.sandbox.layer import PrivateLayer
from environments.sandbox.mounts import host_root

IMAGE = os.path.join(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"),
                     "default")
X86_64 = seccomp.ARCHES["x86_64"]
EPERM, ENOSYS = seccomp.SECCOMP_RET_ERRNO | 1, seccomp.SECCOMP_RET_ERRNO | 38


def decide(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the kernel would return for one system call: a classic-BPF interpreter of the
    instructions `seccomp.program` uses (LD W ABS, JEQ/JGE/JSET K, RET K)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_the_program_refuses_new_user_namespaces_and_nothing_else(machine):
    program, arch = seccomp.program(machine), seccomp.ARCHES[machine]
    new_user = seccomp.CLONE_NEWUSER | 0x11   # with SIGCHLD, as a fork would pass
    assert decide(program, arch.audit_arch, arch.unshare, new_user) == EPERM
    assert decide(program, arch.audit_arch, arch.clone, new_user) == EPERM
    assert decide(program, arch.audit_arch, arch.clone3) == ENOSYS
    for nr, arg0 in ((arch.unshare, 0x00020000), (arch.clone, 0x11), (0, 0), (arch.clone3 + 1,
                                                                            new_user)):
        assert decide(program, arch.audit_arch, nr, arg0) == seccomp.SECCOMP_RET_ALLOW
    # Another architecture's entry (x86_64's i386 int 0x80: unshare is 310 there) is killed.
    assert decide(program, 0x40000003, 310, new_user) == seccomp.SECCOMP_RET_KILL_PROCESS
    if arch.x32:
        assert decide(program, arch.audit_arch, 0x40000000 | arch.unshare, new_user) == ENOSYS


def test_an_unknown_architecture_is_refused_loudly():
    with pytest.raises(ValueError, match="no seccomp table for architecture 'riscv64'"):
        seccomp.program("riscv64")


def test_the_fd_holds_the_program_once():
    fd = seccomp.program_fd()
    try:
        assert os.read(fd, 4096) == seccomp.program() and os.read(fd, 1) == b""
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


# Run inside the sandbox (python3 of its system): each line "name result".
PROBE = r"""
import ctypes, mmap, os, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def call(*args):
    r = libc.syscall(*(L(a) for a in args))
    if r == 0 and args[0] == %(clone)d:
        os._exit(0)   # a clone that worked: the child leaves at once
    return os.strerror(ctypes.get_errno()) if r < 0 else "ok"
print("unshare", call(%(unshare)d, 0x10000000))
print("clone", call(%(clone)d, 0x10000000 | 17, 0, 0, 0, 0))
print("clone3", call(%(clone3)d, 0, 0))
t = threading.Thread(target=lambda: print("thread ok")); t.start(); t.join()
print("subprocess", subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout.strip())
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
sys.stdout.flush()
# i386 unshare(CLONE_NEWUSER) through int 0x80: mov eax,310; mov ebx,0x10000000; int 0x80; ret
code = bytes.fromhex("b836010000bb00000010cd80c3")
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
i386 = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print("i386", i386())
"""
EXPECTED = ["unshare Operation not permitted", "clone Operation not permitted",
            "clone3 Function not implemented", "thread ok", "subprocess ok", "fork 7"]


def _probe_in(config: SandboxConfig) -> tuple[str, object]:
    script = PROBE % {"unshare": X86_64.unshare, "clone": X86_64.clone, "clone3": X86_64.clone3}

    async def go():
        async with Sandbox(config).session() as shell:
            tool = await shell.run("unshare -U true; echo status $?")
            probe = await shell.run(f"python3 -c {_quote(script)}; echo status $?")
            return tool, probe
    tool, probe = run(go())
    return tool, probe


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _check(tool, probe) -> None:
    assert tool.status == ExecStatus.OK, tool
    assert "unshare failed: Operation not permitted" in tool.stderr and \
        tool.stdout == "status 1\n", tool
    lines = probe.stdout.splitlines()
    assert lines[:len(EXPECTED)] == EXPECTED, probe
    # The 32-bit entry kills the process (SIGSYS: 128 + 31) before the call happens.
    assert lines[len(EXPECTED):] == ["status 159"], probe


x86_64_only = pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the probe's system call numbers are x86_64's")


@needs_bwrap
@x86_64_only
def test_a_sandbox_of_one_uid_cannot_make_a_user_namespace(config):
    _check(*_probe_in(config))


@needs_bwrap
@x86_64_only
@pytest.mark.skipif(
    not (host_root() and cgroup.available() and os.path.isdir(os.path.join(IMAGE, "usr"))),
    reason="needs host root, cgroup v1 memory+cpu+pids and the default image (scripts/setup.sh)")
def test_a_machine_with_users_of_its_own_cannot_make_a_user_namespace(scratch_dir):
    config = SandboxConfig(image=IMAGE, writable=(), writable_root=True, uid_block=True,
                           scratch_dir=scratch_dir,
                           limits=Limits(timeout_s=20, disk_bytes=32 * 1024**2, processes=64,
                                         sandbox_memory_bytes=256 * 1024**2, cpus=0.5))
    _check(*_probe_in(config))


def test_bwrap_loads_the_filter_from_the_fd_it_is_given(tmp_path):
    layer = PrivateLayer(str(tmp_path / "scratch"), ("/tmp",), owner=None, inside_uid=0,
                         hostname="box")
    argv = bwrap_argv(SandboxConfig(image="/images/os"), layer, ["true"], seccomp_fd=9)
    assert argv[argv.index("--seccomp") + 1] == "9" and argv.index("--seccomp") < argv.index("--")
    assert "--seccomp" not in bwrap_argv(SandboxConfig(image="/images/os"), layer, ["true"])
