"""Command line of the bubblewrap backend.

bwrap runs unprivileged (as the sandbox's own host uid, see `uids.py`) and builds:
  * new user, PID, IPC, UTS and cgroup namespaces, and a new network namespace unless the config
    asks for the network (then the host's is shared);
  * a mount namespace whose root is the image read-only (or the host's /usr read-only when there
    is no image), fresh /proc with Docker's masks (`PROC_MASKED_FILES`), a read-only /dev with a
    size-capped /dev/shm, and the private layer's directories as the only other writable paths;
  * no capabilities, a new terminal session (so TIOCSTI cannot inject into ours), no nested user
    namespaces (bwrap's `--disable-userns`, and the seccomp filter of `seccomp.py` that refuses
    them whatever the namespace's sysctl says), a cleared environment, and death when its
    parent (the worker) dies.

A sandbox with users of its own (`SandboxConfig.uid_block`) instead joins the user namespace the
worker made for it (`--userns FD`, `uid_block.py`: 65536 ids of its own, no nested user
namespaces) and its root keeps `USERS_CAPS`, namespaced: they act on its own ids' files only.

A grader can run in a running sandbox's PID namespace (`pidns_fd`, bwrap `--pidns`), beside its
processes, instead of a new one.

bwrap reports, on --info-fd, the host pid of the sandbox's PID 1 (bwrap's own init); killing it
ends every process of the sandbox at once (see `process.py`).

With a writable root (`SandboxConfig.writable_root`) `/` is the private layer's overlay over the
image instead, read-write. A *pristine-system* process (`pristine_system=True`, the OS task's
grader) sees the sandbox's files, but with the system's code taken from the untouched image: /usr's
bin, sbin, lib* and libexec (and through the merged-/usr links /bin, /sbin, /lib*), Perl's
modules, the dynamic linker's configuration, the alternatives; /usr/local/lib (Python's
dist-packages, any shared library) is an empty read-only directory. The rest, data such as
/usr/stock.log or a command in /usr/local/bin, stays the sandbox's. `pristine_system_problem`
checks first that the sandbox has not replaced the directories these mounts go over.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence

from environments.sandbox.config import SandboxConfig
from environments.sandbox.layer import PrivateLayer

# Top-level host paths that make up a usable system when there is no image: /usr, plus the
# merged-/usr links (or real directories on older hosts).
HOST_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Host /etc files that are harmless and that common tools need: Debian's alternatives (awk, vi,
# editor, ...) and the dynamic linker's cache.
_HOST_ETC = ("/etc/alternatives", "/etc/ld.so.cache")
# What a pristine-system process takes from the image over a writable root: executables, the
# libraries and interpreters' modules they load, and what tells the linker where those are.
_PRISTINE_DIRS = ("usr/bin", "usr/sbin", "usr/lib", "usr/lib32", "usr/lib64", "usr/libx32",
                  "usr/libexec", "usr/share/perl", "usr/share/perl5", "etc/alternatives",
                  "etc/ld.so.conf.d", "etc/perl")
# Interpreters' configuration that runs code at their start (Debian's python3.X/sitecustomize.py).
_PRISTINE_GLOBS = ("etc/python3*",)
_PRISTINE_FILES = ("etc/ld.so.cache", "etc/ld.so.conf")
# /proc as a container's root sees it. Docker's default masked paths (a file: /dev/null bound
# over it, writes discarded; a directory: an empty read-only tmpfs), plus what bwrap's fresh
# /proc leaves unreadable to a machine's root because its owner (host root) is unmapped there,
# where Docker's root reads it: /proc/tty/driver, which `find /` would report as "Permission
# denied". Docker's read-only paths are already so here: bwrap binds /proc/sys, sysrq-trigger,
# irq and bus read-only itself, and /proc/fs is host root's, unwritable inside. /sys is not
# mounted (the image's empty /sys), so Docker's /sys masks have nothing to cover. Only the
# paths this kernel has are masked.
PROC_MASKED_FILES = ("/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                     "/proc/timer_stats", "/proc/sched_debug")
PROC_MASKED_DIRS = ("/proc/asound", "/proc/acpi", "/proc/scsi", "/proc/tty/driver")
# What the root of a sandbox with users keeps: Docker's default set for a container's root, less
# what has no use without devices or a real network (MKNOD, NET_RAW, AUDIT_WRITE) and the
# capability-editing ones (SETPCAP, SETFCAP).
USERS_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
              "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT")


def bwrap_argv(config: SandboxConfig, layer: PrivateLayer, command: Sequence[str],
               info_fd: int | str | None = None, bwrap: str = "bwrap",
               pristine_system: bool = False, env: Mapping[str, str] | None = None,
               userns_fd: int | None = None, pidns_fd: int | None = None,
               seccomp_fd: int | None = None) -> list[str]:
    """The argv that runs `command` in a sandbox described by `config` over `layer`.

    `env` replaces `config.env` (HOME is the workdir unless `env` sets it). `userns_fd`: the
    user namespace of a `config.uid_block` sandbox (the caller passes the fd on). `pidns_fd`:
    run in that PID namespace (a running sandbox's, owned by that user namespace) instead of a
    new one, so that the command sees and is seen by its processes. `seccomp_fd`: an fd holding
    the filter bwrap loads before the command (`seccomp.program_fd()`, passed on likewise).
    """
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if pidns_fd is None:
        argv.append("--unshare-pid")
    elif not config.uid_block:
        raise ValueError("joining a sandbox's PID namespace needs its user namespace (uid_block)")
    else:
        argv += ["--pidns", str(pidns_fd)]
    if config.uid_block:
        if userns_fd is None:
            raise ValueError("a sandbox with users of its own needs its user namespace's fd")
        argv += ["--userns", str(userns_fd)]
        for cap in USERS_CAPS:
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user", "--disable-userns", "--uid", str(config.inside_uid),
                 "--gid", str(config.inside_uid)]
    argv += ["--hostname", config.hostname]
    if not config.network:
        argv.append("--unshare-net")
    argv += _filesystem(config, layer)
    if pristine_system:
        argv += _pristine_system(config, layer)
    argv += ["--chdir", config.workdir, "--clearenv"]
    for key, value in {"HOME": config.workdir, **(config.env if env is None else env)}.items():
        argv += ["--setenv", key, value]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, "--", *command]


def host_system_binds() -> list[str]:
    """bwrap arguments that show the host's system read-only: /usr, and each of
    `HOST_SYSTEM_DIRS` as the host has it (a link to the same target, or a directory bound)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in HOST_SYSTEM_DIRS:
        host = "/" + name
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    return args


def _filesystem(config: SandboxConfig, layer: PrivateLayer) -> list[str]:
    if config.writable_root:
        if layer.root is None:
            raise ValueError("a writable root needs a layer built over the image")
        args = ["--bind", layer.root, "/"]
    elif config.image is not None:
        args = ["--ro-bind", config.image, "/"]
    else:
        # bwrap would create /etc 0700 for the binds below; a non-root inside uid needs 0755.
        args = [*host_system_binds(), "--perms", "0755", "--dir", "/etc"]
        for name in ("passwd", "group", "hosts", "hostname"):
            args += ["--ro-bind", os.path.join(layer.etc, name), f"/etc/{name}"]
        for path in _HOST_ETC:
            args += ["--ro-bind-try", path, path]
    # --dev is a fresh tmpfs with the safe device nodes; only its shm may be written, and that
    # one is size-capped (tmpfs pages are memory the rlimits do not count).
    args += ["--proc", "/proc", *_proc_masks(), "--dev", "/dev",
             "--perms", "1777", "--size", str(config.limits.shm_bytes), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev"]
    for dest, src in layer.writable.items():
        args += ["--bind", src, dest]
    for src, dest in config.ro_binds:
        args += ["--ro-bind", src, dest]
    if config.image is None:
        # Without an image, bwrap's root is a tmpfs holding the mount points: make it read-only,
        # or the sandbox could write (and fill memory) anywhere outside the private layer.
        args += ["--remount-ro", "/"]
    return args


def _proc_masks() -> list[str]:
    """The bwrap arguments that mask `PROC_MASKED_FILES` and `PROC_MASKED_DIRS` (see above).

    The sandbox's /proc shows the host's kernel, so the host's /proc says which paths exist.
    """
    args = []
    for path in PROC_MASKED_FILES:
        if os.path.isfile(path):
            args += ["--dev-bind", "/dev/null", path]   # (--ro-bind would make it nodev)
    for path in PROC_MASKED_DIRS:
        if os.path.isdir(path):
            args += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    return args


def _pristine_system(config: SandboxConfig, layer: PrivateLayer) -> list[str]:
    image = _pristine_image(config, layer)
    args = []
    if image is not None:   # (without an image, the host's /usr and /etc are read-only)
        for rel in _pristine_paths(image):
            if os.path.lexists(os.path.join(image, rel)):
                args += ["--ro-bind", os.path.join(image, rel), "/" + rel]
        args += ["--ro-bind", "/dev/null", "/etc/ld.so.preload"]
    return [*args, "--perms", "0755", "--tmpfs", "/usr/local/lib", "--remount-ro", "/usr/local/lib"]


def _pristine_image(config: SandboxConfig, layer: PrivateLayer) -> str | None:
    """The untouched image as a host path: the writable root's lower layer (with the trusted
    packages the sandbox installed over it, `PrivateLayer.grading_system`), or the image."""
    if config.writable_root:
        return layer.system or layer.pristine
    return config.image


def _agent_view(config: SandboxConfig, layer: PrivateLayer, rel: str) -> str:
    """The host path of what the sandbox sees at `/rel` (its root, a writable dir, the image)."""
    if config.writable_root:
        return os.path.join(layer.root, rel)
    path = "/" + rel
    for dest, src in layer.writable.items():
        if path == dest or path.startswith(dest + "/"):
            return src + path[len(dest):]
    return os.path.join(config.image, rel)


def pristine_system_problem(config: SandboxConfig, layer: PrivateLayer) -> str | None:
    """Why a pristine-system process cannot start in this sandbox, or None.

    Binds go over paths the sandbox may have changed, and bwrap follows a symlink it finds
    there; so each path they go over must still be what the image has (the same kind of file,
    the same link target), /etc/ld.so.preload absent or a plain file. Only meaningful while no
    process of the sandbox runs (it could change them after the check).
    """
    image = _pristine_image(config, layer)
    if image is None:
        return None
    names = [*HOST_SYSTEM_DIRS, "etc", "usr", "usr/share", *_pristine_paths(image),
             "usr/local", "usr/local/lib"]
    for rel in names:
        theirs, mine = os.path.join(image, rel), _agent_view(config, layer, rel)
        if os.path.lexists(theirs) and _kind(theirs) != _kind(mine):
            return f"/{rel} was replaced ({_kind(theirs)} in the image, {_kind(mine)} now)"
    preload = _agent_view(config, layer, "etc/ld.so.preload")
    if os.path.lexists(preload) and _kind(preload) != "file":
        return "/etc/ld.so.preload is not a plain file"
    return None


def _pristine_paths(image: str) -> list[str]:
    """The image-relative paths a pristine-system process takes from `image`, parents first."""
    globbed = sorted(os.path.relpath(p, image) for pattern in _PRISTINE_GLOBS
                     for p in glob.glob(os.path.join(image, pattern)))
    return [*_PRISTINE_DIRS, *globbed, *_PRISTINE_FILES]


def _kind(path: str) -> str:
    if os.path.islink(path):
        return f"link to {os.readlink(path)}"
    if os.path.isdir(path):
        return "directory"
    if os.path.isfile(path):
        return "file"
    return "missing" if not os.path.lexists(path) else "special file"
