"""One OS problem's machine: a sandbox with a persistent bash, set up like AgentBench's container.

AgentBench gives each problem a fresh Ubuntu container, as root, with a writable filesystem, and
talks to it three ways, all kept here:
  * `run(script)`: the agent's commands, in one long-lived bash (cwd, variables, background jobs
    persist), with a 30 s limit per command;
  * `exec_independent((language, code), *args)`: init scripts, each a separate bash or python3
    started in /root with a clean environment, returning exit status and stdout+stderr;
  * `check((language, code), *args)`: a check script, the same way but as the grader must run:
    see "Grading" below.

Roots (`ROOTS`):
  overlay  each machine's `/` is a copy-on-write overlay over the read-only image, discarded with
           the machine, as a container's is (sandbox `writable_root`; needs a worker that is real
           host root, for the mounts). The machine's memory, CPU, processes and written bytes are
           bounded as a whole (sandbox `Limits`), its writes on a tmpfs of `disk_bytes`. Its root
           has users of its own, as a container's (sandbox `uid_block`): `useradd jack`, `chown
           jack f`, `su jack` work.
  seeded   for a worker that cannot mount (one run inside a worker sandbox): the image read-only
           except `WRITABLE`, which start as copies of the image's own directories; /usr itself
           is then read-only (only /usr/local is writable), so problems that write there fail.
  host     no image: the host's /usr read-only and the empty `WRITABLE` directories (never
           chosen unless the task explicitly allows it, see task.py).

Grading. AgentBench runs its check scripts with `docker exec` in the problem's container, so
what they call is whatever the agent left there: a function or an alias named like a command (in
our former single-shell design), an executable earlier on PATH, a hijacked shell. Here a check
runs when AgentBench runs it, once the agent has answered, and sees the agent's machine as
`docker exec` does: on the overlay root everything of the agent is frozen (not stopped) and the
check runs beside it, in its PID namespace, so the reference `example` counts the same
processes (init's background `sleep`s, what the agent started) and files as the agent's own
commands did (sandbox `ShellSession.exec`); on the other roots, which cannot freeze, everything
of the agent is stopped first. Either way nothing of the agent runs while a check does, and the
check is a separate process that inherits nothing from the agent's shell (environment
`CHECK_ENV`, no fd of the shell), whose interpreters, libraries and linker configuration come
from the pristine image (sandbox `pristine_system`), while the files the agent changed (its
home, /etc/passwd, /usr/stock.log, a command it installed in /usr/local/bin) stay visible, which
is what the problems check. PATH puts
the image's directories first, so /usr/local/bin only adds commands the image lacks; Python
ignores the user site and the working directory.

All sandbox work runs on one private thread with a plain asyncio event loop: the worker's loop
may be uvloop (uvicorn picks it when installed), whose subprocess support lacks the `user=` and
`group=` arguments the sandbox starts its processes with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import shlex
import subprocess
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from environments.sandbox import ExecStatus, Limits, Sandbox, SandboxConfig, SandboxError
from environments.sandbox.config import container_open_files

ROOTS = ("overlay", "seeded", "host")
WRITABLE = ("/root", "/home", "/tmp", "/etc", "/var", "/usr/local", "/opt", "/srv", "/mnt",
            "/media")
SEEDED_FROM_IMAGE = ("/root", "/home", "/etc", "/var", "/usr/local", "/opt", "/srv", "/mnt",
                     "/media")
COMMAND_TIMEOUT_S = 30.0    # AgentBench's limit on one agent command
SCRIPT_TIMEOUT_S = 300.0    # init scripts (AgentBench sets none)
CHECK_TIMEOUT_S = 60.0      # one check script (AgentBench sets none)
_SYSTEM_FIRST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin"
CHECK_ENV = {"PATH": _SYSTEM_FIRST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm",
             "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
_CLEAN_ENV = ("env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
              "HOME=/root LANG=C.UTF-8 TERM=xterm")
_LOGIN = "for f in /etc/profile ~/.profile; do [ -r \"$f\" ] && . \"$f\"; done; cd /root"
# stdout and stderr of a check as one stream, in order, as `docker exec` returns them.
_MERGED = ("/bin/sh", "-c", 'exec 2>&1; exec "$@"', "check")


T = TypeVar("T")


@functools.cache
def _sandbox_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.SelectorEventLoop()
    threading.Thread(target=loop.run_forever, name="os-sandbox-loop", daemon=True).start()
    return loop


async def on_sandbox_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs `coroutine` on the sandbox thread's loop; cancelling the caller cancels it."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine,
                                                                      _sandbox_loop()))


def default_rootfs_dir() -> Path:
    return Path(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"))


def image_path(name: str, rootfs_dir: Path) -> Path | None:
    """The rootfs directory of AgentBench image `name` (build_rootfs.sh), or None if not built."""
    path = rootfs_dir / name
    return path if (path / "usr").is_dir() else None


@dataclasses.dataclass(frozen=True)
class MachineSpec:
    """What a machine is built from: `image` (None: host), `root` (one of ROOTS), its limits."""

    image: str | None
    root: str
    scratch_dir: str | None = None
    limits: Limits = Limits(timeout_s=COMMAND_TIMEOUT_S, open_files=container_open_files())
    worker_memory_bytes: int | None = None

    def sandbox_config(self) -> SandboxConfig:
        if self.root not in ROOTS or (self.root == "host") != (self.image is None):
            raise ValueError(f"root {self.root!r} with image {self.image!r}")
        common = dict(image=self.image, workdir="/root", scratch_dir=self.scratch_dir,
                      hostname="localhost", limits=self.limits,
                      worker_memory_bytes=self.worker_memory_bytes)
        if self.root == "overlay":   # a container's root: users of its own (useradd, su)
            return SandboxConfig(writable=(), writable_root=True, uid_block=True, **common)
        # Without an image the sandbox builds /etc from its own passwd/group files; keep it so.
        writable = WRITABLE if self.image else tuple(p for p in WRITABLE if p != "/etc")
        return SandboxConfig(writable=writable, **common)


class Machine:
    """A started sandbox for one episode. `await Machine.start(spec)`, then `close()`."""

    def __init__(self, spec: MachineSpec):
        self.spec = spec
        self.config = spec.sandbox_config()
        self.shell = Sandbox(self.config).session()

    @classmethod
    async def start(cls, spec: MachineSpec) -> Machine:
        machine = cls(spec)
        try:
            await on_sandbox_loop(machine._start())
        except BaseException:
            await machine.close()
            raise
        return machine

    async def _start(self) -> None:
        await self.shell.start()
        if self.spec.root == "seeded":
            await asyncio.to_thread(self._seed_from_image, self.spec.image)
        await self.shell.run(_LOGIN, timeout=SCRIPT_TIMEOUT_S)

    def _seed_from_image(self, image: str) -> None:
        """Copies the image's content into the empty writable directories (as their owner).

        The private layer keeps writable path number i at `rw/<i><path with / as _>` (see
        environments/sandbox/layer.py); the copy goes there from the host side.
        """
        layer = Path(self.shell.layer_path or "")
        for i, path in enumerate(self.config.writable):
            source, target = Path(image + path), layer / "rw" / f"{i}{path.replace('/', '_')}"
            if path not in SEEDED_FROM_IMAGE or not source.is_dir():
                continue
            if not target.is_dir():
                raise SandboxError(f"no writable layer directory for {path} at {target}")
            subprocess.run(["cp", "-a", f"{source}/.", f"{target}/"], capture_output=True)
            if os.geteuid() == 0:   # root's copy keeps root's files; hand them to the sandbox
                owner = target.parent.stat().st_uid
                subprocess.run(["chown", "-R", "-h", f"{owner}:{owner}", str(target)],
                               capture_output=True)

    async def run(self, script: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[str, bool]:
        """Runs an agent command in the persistent shell: (stdout then stderr, timed out)."""
        result = await on_sandbox_loop(self.shell.run(script, timeout=timeout))
        return result.stdout + result.stderr, result.status == ExecStatus.TIMEOUT

    async def exec_independent(self, script: tuple[str, str], *args: str,
                               timeout: float = SCRIPT_TIMEOUT_S) -> tuple[int, str]:
        """Runs an init script as its own process, as AgentBench's `execute_independent` does.

        Through the persistent shell (in a subshell, so that its cwd and variables stay), so
        that what it starts in the background lives on, as in a container; the agent has not
        run anything yet.
        """
        command = _argv(script, *args)
        if command is None:
            return 1, f"unsupported script language {script[0]!r}"
        result = await on_sandbox_loop(self.shell.run(
            f"(cd /root && {_CLEAN_ENV} {shlex.join(command)}) 2>&1", timeout=timeout))
        code = result.exit_code if result.exit_code is not None else 1
        return code, result.stdout + result.stderr

    async def check(self, script: tuple[str, str], *args: str,
                    timeout: float = CHECK_TIMEOUT_S) -> tuple[int, str]:
        """Runs a check script as the grader (see the module docstring): (status, output).

        Freezes (or stops) everything the agent runs first, for good: grading ends the
        episode. A machine
        whose system directories the agent replaced cannot be graded: status 1 and the reason.
        """
        command = _argv(script, *args)
        if command is None:
            return 1, f"unsupported script language {script[0]!r}"
        try:
            result = await on_sandbox_loop(self.shell.exec(
                [*_MERGED, *command], timeout=timeout, pristine_system=True, env=CHECK_ENV))
        except SandboxError as e:
            return 1, str(e)
        if result.status in (ExecStatus.TIMEOUT, ExecStatus.SANDBOX_ERROR):
            return 1, f"check {result.status.value}: {(result.stdout + result.stderr)[-300:]}"
        code = result.exit_code if result.exit_code is not None else 1
        return code, result.stdout + result.stderr

    async def close(self) -> None:
        # Shielded: the machine must go away even when the episode is being cancelled.
        await asyncio.shield(on_sandbox_loop(self.shell.close()))


def _argv(script: tuple[str, str], *args: str) -> list[str] | None:
    """`bash -c code -- args` or `python3 -c code args`, as AgentBench runs a script."""
    language, code = script
    if language == "bash":
        return ["bash", "-c", code, "--", *args]
    if language == "python":
        return ["python3", "-c", code, *args]
    return None
