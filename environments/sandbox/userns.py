"""Runs bwrap as root of a new user namespace whose ids map to a host uid block of its own.

    python -I userns.py --lock-dir DIR --stage-dir STAGE --host-base B --blocks N \
        --inside FIRST:COUNT -- bwrap ARGS...

Used by `worker_wrap.py` when the worker is started by host root. A sandboxed task worker must
itself be "root" (the OS task leases one uid per episode sandbox, so that RLIMIT_NPROC bounds
each sandbox, see `uids.py`) without being host root. bwrap can map only one uid, and util-linux
`unshare --map-users` needs `newuidmap`, which Debian ships separately; so this script:

  1. leases block b of the host uid space (an `flock` on DIR/b, held by the inherited fd for the
     life of the sandbox, released by the kernel when it dies), so that no two sandboxed workers
     on the machine share host uids;
  2. creates a user namespace (a forked holder calls unshare(CLONE_NEWUSER); this process, host
     root, writes the maps, which only it may):
        inside 0                      -> host B + b * (COUNT + 1)       (the worker itself)
        inside FIRST .. FIRST+COUNT-1 -> the next COUNT host ids        (its episode sandboxes)
     with gids the same. Host root is not mapped, so the worker's capabilities inside do not
     apply to host-root files, and bwrap, finding /proc/sys and /proc/sysrq-trigger unwritable,
     leaves its /proc uncovered, which nested (episode) sandboxes need to mount their own;
  3. still as host root, enters a private mount namespace and mounts every source path of
     bwrap's `--bind`/`--ro-bind` options at STAGE/<n> (a tmpfs seen only by this process),
     rewriting the options to point there. Inside the new user namespace bwrap resolves
     sources as the worker's unprivileged host uid, which could not traverse e.g. /root (0700)
     to reach ~/.cache/agentrl_jax; the staged mounts are reachable. Each is idmapped through
     the namespace (host uid 0 shows as the worker's own) where the filesystem supports it,
     so that files host root wrote with mode 0600 (tempfile's default, as task caches are)
     stay readable; bwrap still binds them read-only where asked;
  4. joins the namespace as its root (uid/gid 0, no supplementary groups) and execs bwrap,
     keeping its pid, so that the caller's signals reach bwrap directly.

Only the standard library is used: it runs with `python -I`, before any sandbox exists, and
reads its one sibling, `flock_lease.py` (the lease scan it shares with `uids.py`), by path.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import runpy
import sys

if __spec__ is not None:   # imported as a module of the package
    from environments.sandbox.flock_lease import lease_first_free
else:   # run as `python -I userns.py`: no package on the path; its sibling file, read by path
    _FLOCK_LEASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flock_lease.py")
    lease_first_free = runpy.run_path(_FLOCK_LEASE)["lease_first_free"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
# The new mount API (Linux >= 5.12 for idmapped mounts); numbers are the same on every arch.
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE = 1
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
_BIND_OPTIONS = ("--bind", "--ro-bind", "--bind-try", "--ro-bind-try", "--dev-bind",
                 "--dev-bind-try")
# How many values the other bwrap options that worker_wrap.py emits take.
_ARITY = {"--setenv": 2, "--symlink": 2, "--perms": 1, "--size": 1, "--tmpfs": 1, "--dir": 1,
          "--proc": 1, "--dev": 1, "--remount-ro": 1, "--chdir": 1, "--cap-add": 1,
          "--cap-drop": 1, "--unsetenv": 1, "--hostname": 1, "--uid": 1, "--gid": 1}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_long = ctypes.c_long   # syscall() is variadic: pass every integer at its full width


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def lease_block(lock_dir: str, blocks: int) -> tuple[int, int]:
    """(block number, fd holding its flock); the fd is inheritable so that bwrap keeps it."""
    lease = lease_first_free(lock_dir, range(blocks))
    if lease is None:
        raise RuntimeError(f"all {blocks} sandboxed-worker uid blocks under {lock_dir} are in use")
    block, fd = lease
    os.set_inheritable(fd, True)
    return block, fd


def id_map(host_first: int, inside_first: int, inside_count: int) -> str:
    return f"0 {host_first} 1\n{inside_first} {host_first + 1} {inside_count}\n"


def make_userns(mapping: str) -> int:
    """An fd of a new user namespace with `mapping` for uids and gids (written as host root)."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    holder = os.fork()
    if holder == 0:   # creates the namespace and keeps it alive until the parent holds an fd
        os.close(ready_r)
        os.close(done_w)
        ok = _libc.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"1" if ok else b"0")
        os.read(done_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.EPERM, "unshare(CLONE_NEWUSER) failed (user namespaces "
                          "disabled?)")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder}/{name}", "w") as f:
                f.write(mapping)
        return os.open(f"/proc/{holder}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.write(done_w, b"1")
        os.waitpid(holder, 0)
        os.close(ready_r)
        os.close(done_w)


def stage_sources(command: list[str], stage: str, userns_fd: int) -> list[str]:
    """Mounts each bind source at STAGE/<n> in a private mount namespace; the new command.

    Each staged mount is idmapped through `userns_fd` where the filesystem allows it, so that
    host root's files appear to be the worker's own (readable even at mode 0600; still
    read-only wherever bwrap binds them read-only). Otherwise it is a plain bind.
    """
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Private: none of the mounts below may propagate back to the host.
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    os.makedirs(stage, mode=0o755, exist_ok=True)
    _check(_libc.mount(b"tmpfs", stage.encode(), b"tmpfs", 0, b"mode=0755,size=1m"),
           f"mounting a tmpfs on {stage}")
    staged = list(command)
    i = 1
    while i < len(staged) and staged[i] != "--":
        option = staged[i]
        if option in _BIND_OPTIONS and os.path.exists(source := staged[i + 1]):
            target = os.path.join(stage, str(i))
            if os.path.isdir(source):
                os.mkdir(target, 0o755)
            else:
                open(target, "w").close()   # noqa: SIM115 (an empty mount point file)
            try:
                _idmapped_bind(source, target, userns_fd)
            except OSError:   # e.g. a filesystem without idmapping support
                _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC,
                                   None), f"staging {source}")
            staged[i + 1] = target
        i += 1 + (2 if option in _BIND_OPTIONS else _ARITY.get(option, 0))
    return staged


def _idmapped_bind(source: str, target: str, userns_fd: int) -> None:
    tree = _check(_libc.syscall(_long(SYS_OPEN_TREE), _long(AT_FDCWD), source.encode(),
                                _long(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE)),
                  f"open_tree({source})")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
        _check(_libc.syscall(_long(SYS_MOUNT_SETATTR), _long(tree), b"",
                             _long(AT_EMPTY_PATH | AT_RECURSIVE), ctypes.byref(attr),
                             _long(ctypes.sizeof(attr))), f"idmapping {source}")
        _check(_libc.syscall(_long(SYS_MOVE_MOUNT), _long(tree), b"", _long(AT_FDCWD),
                             target.encode(), _long(MOVE_MOUNT_F_EMPTY_PATH)),
               f"mounting {source}")
    finally:
        os.close(tree)


def enter_userns(userns_fd: int) -> None:
    """Joins the user namespace as its root, without the host's supplementary groups."""
    _check(_libc.setns(userns_fd, CLONE_NEWUSER), "setns(user namespace)")
    os.close(userns_fd)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="userns.py")
    parser.add_argument("--lock-dir", required=True)
    parser.add_argument("--stage-dir", required=True)
    parser.add_argument("--host-base", type=int, required=True)
    parser.add_argument("--blocks", type=int, required=True)
    parser.add_argument("--inside", required=True, metavar="FIRST:COUNT")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    first, count = (int(x) for x in args.inside.split(":"))
    try:
        block, _lease_fd = lease_block(args.lock_dir, args.blocks)
        userns_fd = make_userns(id_map(args.host_base + block * (count + 1), first, count))
        command = stage_sources(command, args.stage_dir, userns_fd)
        enter_userns(userns_fd)
        os.execvp(command[0], command)
    except (OSError, RuntimeError) as error:
        print(f"userns: cannot start the sandboxed worker: {error}", file=sys.stderr)
        sys.exit(125)


if __name__ == "__main__":
    main()
