"""A seccomp filter that refuses nested user namespaces, compiled to classic BPF for bwrap.

A machine with users of its own maps 65536 host ids (`uid_block.py`). A user namespace nested
inside it would give whoever makes it every capability over a fresh namespace (mounts, network
configuration, ...) and is kernel attack surface a container does not need, so the machine must
not make one. The namespace's `user.max_user_namespaces` is already 0 (`uid_block.make_userns`;
bwrap's `--disable-userns` where bwrap makes the namespace itself); this filter is a second,
independent wall that holds whatever that sysctl says: the kernel runs it before it looks at
namespaces at all. What it returns, for every process of the sandbox (bwrap `--seccomp FD`,
loaded just before the sandbox's command and inherited by all it starts):

  * `unshare(flags)` and `clone(flags, ...)` with CLONE_NEWUSER in `flags`: EPERM;
  * `clone3(args)`: ENOSYS. Its flags live in a struct in memory, which a seccomp filter cannot
    read, so every clone3 is refused as unknown; glibc (and Go, and Rust's std) then fall back
    to `clone`, which the filter can inspect. This is what container runtimes do (Docker's and
    Podman's default profiles);
  * x32-ABI system calls (`nr` with bit 30 set): ENOSYS, as on a kernel built without x32;
  * a system call made through another architecture's entry (a 32-bit `int 0x80` on x86_64,
    whose numbers differ and would slip past the checks): the process is killed;
  * everything else: allowed.

`unshare -U true` then fails with "Operation not permitted"; fork, threads, subprocesses, Python,
npm work as before. Only the standard library: the filter is built by the worker before the
sandbox exists. The program is generated for the host's architecture (`ARCHES`); on any other,
`program()` raises, loudly, rather than start sandboxes without the filter.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000
_X32_SYSCALL_BIT = 0x40000000

# linux/filter.h: classic BPF instruction classes and fields used here.
_BPF_LD, _BPF_JMP, _BPF_RET = 0x00, 0x05, 0x06
_BPF_W, _BPF_ABS = 0x00, 0x20
_BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_K = 0x10, 0x30, 0x40, 0x00
# linux/seccomp.h: actions, and where `struct seccomp_data` keeps what the filter reads.
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
_NR_OFFSET, _ARCH_OFFSET, _ARG0_OFFSET = 0, 4, 16   # args[0]'s low 32 bits (little endian)


@dataclasses.dataclass(frozen=True)
class Arch:
    """One architecture's seccomp identity and the numbers of the system calls filtered."""

    audit_arch: int   # AUDIT_ARCH_* (linux/audit.h)
    unshare: int
    clone: int        # flags are clone's first argument on both arches below
    clone3: int
    x32: bool = False  # whether numbers with bit 30 set are another ABI (x86_64's x32)


# platform.machine() -> its table (asm/unistd_64.h, asm-generic/unistd.h).
ARCHES = {
    "x86_64": Arch(audit_arch=0xC000003E, unshare=272, clone=56, clone3=435, x32=True),
    "aarch64": Arch(audit_arch=0xC00000B7, unshare=97, clone=220, clone3=435),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _ret(action: int) -> bytes:
    return _insn(_BPF_RET | _BPF_K, action)


def _load(offset: int) -> bytes:
    return _insn(_BPF_LD | _BPF_W | _BPF_ABS, offset)


def program(machine: str | None = None) -> bytes:
    """The filter above as bwrap reads it: `struct sock_filter`s, native byte order.

    `machine`: a `platform.machine()` name (default: this host's). Raises ValueError for an
    architecture without a table in `ARCHES`.
    """
    name = machine or platform.machine()
    arch = ARCHES.get(name)
    if arch is None:
        raise ValueError(f"no seccomp table for architecture {name!r} (known: "
                         f"{', '.join(ARCHES)}): sandboxes would allow nested user namespaces")
    eperm = SECCOMP_RET_ERRNO | 1     # EPERM
    enosys = SECCOMP_RET_ERRNO | 38   # ENOSYS (the same number on every Linux arch)
    jeq, jge, jset = (_BPF_JMP | op | _BPF_K for op in (_BPF_JEQ, _BPF_JGE, _BPF_JSET))
    # Jump offsets count instructions after the jump; the labels below are fixed positions.
    insns = [
        _load(_ARCH_OFFSET),                         # 0
        _insn(jeq, arch.audit_arch, jt=1),           # 1: native arch: skip the kill
        _ret(SECCOMP_RET_KILL_PROCESS),              # 2
        _load(_NR_OFFSET),                           # 3
        # 4: x32: ENOSYS (at 12); on other arches a never-taken test of the same length
        _insn(jge, _X32_SYSCALL_BIT if arch.x32 else 0xFFFFFFFF, jt=7),
        _insn(jeq, arch.clone3, jt=6),               # 5: -> 12 ENOSYS
        _insn(jeq, arch.unshare, jt=1),              # 6: -> 8 flags test
        _insn(jeq, arch.clone, jf=2),                # 7: neither: -> 10 allow
        _load(_ARG0_OFFSET),                         # 8
        _insn(jset, CLONE_NEWUSER, jt=1),            # 9: -> 11 EPERM
        _ret(SECCOMP_RET_ALLOW),                     # 10
        _ret(eperm),                                 # 11
        _ret(enosys),                                # 12
    ]
    return b"".join(insns)


def program_fd() -> int:
    """A fresh fd (close-on-exec, to pass on explicitly) from which bwrap reads `program()`.

    A pipe, filled and closed for writing: bwrap reads to end of file, and the program (13
    instructions, 104 bytes) fits a pipe's buffer. One per bwrap: reading consumes it.
    """
    data = program()
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(write_end, data)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end
