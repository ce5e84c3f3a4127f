"""A persistent bash inside one sandbox, like AgentBench's `docker exec` into a long-lived shell.

Protocol. Bash reads commands from a pipe. Each `run(script)` sends

    eval -- '<script, shell-quoted>' < /dev/null
    printf '%s %d\\n' <marker> "$?"; printf '%s\\n' <marker> >&2

with a fresh random marker. `eval` runs the script in the shell itself, so `cd`, variables and
functions persist; a syntax error in it stays inside eval instead of swallowing the next lines;
`< /dev/null` gives the script EOF on stdin, so `cat` or `read` return at once and can never eat
the protocol. The markers (printed with the builtin printf, which needs no fork even under a fork
bomb) end stdout and stderr; the output is what precedes them, with or without a newline.

Faults. A timeout kills every process of the sandbox and starts a new bash in it: files in the
private layer survive, processes, variables and cwd do not (the result says TIMEOUT, and
`restarts` counts it). The same happens when the process limit is hit (PROCESS_LIMIT), which is
how a fork bomb is stopped (one left running in the background by an earlier command is noticed
from its error messages and stopped before the next command runs), and when the script ends the
shell itself (`exit 3`, or the CPU limit killing it): then the result carries the shell's status.

Separate processes. `exec(argv)` runs a command as its own process in the same sandbox (same
files, same limits) but with nothing of the shell: its own PID namespace, environment and pipes.
With `pristine_system=True` the command gets the image's system code (see `bwrap.py`), and
nothing of the sandbox can act while it runs: how the OS task grades. Where the sandbox can
freeze (`SandboxInstance.can_freeze`), the shell and everything it started are frozen, not
stopped, and the command runs beside them, in their PID namespace, as `docker exec` runs beside
a container's processes: it sees them (`ps`), they cannot touch it (frozen, they never run
again; the next `run` starts a fresh shell). Each such command's own leftovers are killed when
it ends. Elsewhere the shell and all it started are stopped first and the command gets a PID
namespace of its own.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Mapping, Sequence

from environments.sandbox import cgroup
from environments.sandbox.config import SandboxConfig
from environments.sandbox.instance import ProcessLimitWatch, SandboxError, SandboxInstance
from environments.sandbox.oneshot import run_to_end
from environments.sandbox.output import StreamBuffer, pump
from environments.sandbox.process import SandboxProcess
from environments.sandbox.result import ExecResult, ExecStatus, classify, decode

_SHELL = ("bash", "--noprofile", "--norc")
_START_TIMEOUT_S = 30.0


class ShellSession:
    """One sandbox with a long-lived bash. `start()` (or `async with`), `run()`..., `close()`."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.restarts = 0
        self._instance: SandboxInstance | None = None
        self._proc: SandboxProcess | None = None
        self._tasks: list[asyncio.Task] = []
        self._changed = asyncio.Event()
        limit = config.limits.output_bytes
        self._out = StreamBuffer(limit, self._changed)
        self._err = StreamBuffer(limit, self._changed)
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def layer_path(self) -> str | None:
        """Host path of the private layer (for tests and debugging); None before start."""
        return None if self._instance is None else self._instance.layer.path

    async def start(self) -> ShellSession:
        self._start_instance()
        if self._proc is None:
            await self._start_shell()
        return self

    def _start_instance(self) -> None:
        if self._closed:
            raise SandboxError("session is closed")
        if self._instance is None:
            self._instance = SandboxInstance(self.config)

    async def run(self, script: str, timeout: float | None = None) -> ExecResult:
        """Runs `script` in the shell; returns its output, exit status and classified status."""
        async with self._lock:
            if self._instance is not None and self._instance.frozen():
                await self.stop()   # a grader looked at it: it never runs again
            await self.start()
            try:
                return await self._run(script.replace("\0", ""),
                                       timeout or self.config.limits.timeout_s)
            except asyncio.CancelledError:
                # The command may still be running and would answer the next run's request:
                # kill the shell now; the next run starts a fresh one.
                await self._stop_shell()
                raise

    async def exec(self, argv: Sequence[str], timeout: float | None = None,
                   pristine_system: bool = False,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        """Runs `argv` as a separate process in this sandbox and waits for its end.

        `pristine_system`: freeze the shell (and all it started) and run beside it, or where
        the sandbox cannot freeze, stop it first (see the module docstring); the command gets
        the image's system code, and the next `run` starts a fresh shell. `env` replaces
        `config.env`.
        """
        async with self._lock:
            self._start_instance()
            beside = None
            if pristine_system:
                if self._instance.can_freeze and self._proc is not None:
                    self._instance.freeze()
                    beside = self._proc
                else:
                    await self.stop()
            proc = await self._instance.start(argv, pristine_system=pristine_system, env=env,
                                              beside=beside)
            try:
                return await run_to_end(proc, None, timeout or self.config.limits.timeout_s,
                                        self.config.limits.output_bytes,
                                        ProcessLimitWatch(self._instance))
            finally:
                await proc.kill()
                if beside is not None:   # what it left running among the frozen processes
                    self._instance.kill_group(cgroup.GRADER)

    async def stop(self) -> None:
        """Kills every process of the sandbox and keeps its files; `run` restarts the shell."""
        if self._proc is not None:
            self.restarts += 1
        await self._stop_shell()

    async def close(self) -> None:
        """Kills every process of the sandbox and deletes its private layer. Idempotent."""
        self._closed = True
        try:
            await self._stop_shell()
        finally:
            if self._instance is not None:
                self._instance.close()

    async def __aenter__(self) -> ShellSession:
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _run(self, script: str, timeout: float) -> ExecResult:
        marker = f"__agentrl_end_{secrets.token_hex(12)}__".encode()
        end_out = re.compile(re.escape(marker) + rb" (\d+)\n")
        end_err = marker + b"\n"
        out_of_processes = ProcessLimitWatch(self._instance)
        if out_of_processes.left_running(self._err.data):
            # A fork bomb left running in the background by an earlier command (its errors came
            # after that command's marker): stop it before it starves this command.
            await self._restart()
        self._out.clear()  # drop whatever background jobs printed between commands
        self._err.clear()
        request = (b"eval -- " + _quote(script) + b" < /dev/null\n"
                   b"printf '%s %d\\n' " + marker + b' "$?"; printf \'%s\\n\' ' + marker
                   + b" >&2\n")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            self._proc.stdin.write(request)
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the shell is gone; found out below
        while True:
            if out_of_processes(self._err.data):
                return await self._reset(ExecStatus.PROCESS_LIMIT)
            m = end_out.search(self._out.data)
            e = self._err.data.find(end_err)
            if m is not None and e >= 0:
                if out_of_processes.left_running(self._err.data[:e]):
                    return await self._reset(ExecStatus.PROCESS_LIMIT)
                result = self._result(int(m.group(1)), m.start(), e)
                # Keep only what background jobs printed after the markers (see the top of _run).
                self._out.discard(m.end())
                self._err.discard(e + len(end_err))
                return result
            if self._proc.proc.returncode is not None or (self._out.eof and self._err.eof):
                return await self._shell_ended()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return await self._reset(ExecStatus.TIMEOUT)
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 1.0))
            except TimeoutError:
                pass  # re-check the process state at least once a second

    def _result(self, code: int, out_end: int, err_end: int) -> ExecResult:
        stdout, out_cut = self._out.output(out_end)
        stderr, err_cut = self._err.output(err_end)
        status, sig = classify(code, bytes(self._err.data[:err_end]))
        return ExecResult(code, decode(stdout), decode(stderr), status, out_cut or err_cut, sig)

    async def _reset(self, status: ExecStatus) -> ExecResult:
        """Kills the whole sandbox (the command and everything else), then a new shell."""
        stdout, out_cut = self._out.output()
        stderr, err_cut = self._err.output()
        await self._restart()
        return ExecResult(None, decode(stdout), decode(stderr), status, out_cut or err_cut)

    async def _shell_ended(self) -> ExecResult:
        """The script ended the shell (exit, exec, a fatal signal): report its status, restart."""
        code = await self._proc.wait()
        await asyncio.wait(self._tasks, timeout=1.0)  # the last output is still in the pipes
        stdout, out_cut = self._out.output()
        stderr, err_cut = self._err.output()
        status, sig = classify(code, bytes(self._err.data))
        await self._restart()
        return ExecResult(code, decode(stdout), decode(stderr), status, out_cut or err_cut, sig)

    async def _restart(self) -> None:
        self.restarts += 1
        await self._stop_shell()
        await self._start_shell()

    async def _start_shell(self) -> None:
        self._out.clear()
        self._err.clear()
        self._out.eof = self._err.eof = False
        self._proc = await self._instance.start(_SHELL, stdin_pipe=True)
        if self._proc.setup_failed:
            err = await self._proc.proc.stderr.read()
            await self._stop_shell()
            raise SandboxError(f"sandbox failed to start: {decode(err).strip()}")
        self._tasks = [asyncio.create_task(pump(self._proc.stdout, self._out)),
                       asyncio.create_task(pump(self._proc.stderr, self._err))]
        # Handshake: a shell that answers proves the sandbox is up (bwrap reports some setup
        # errors, like a missing bind source, only by exiting).
        ready = f"__agentrl_ready_{secrets.token_hex(8)}__".encode()
        self._proc.stdin.write(b"printf '%s\\n' " + ready + b"\n")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT_S
        while ready + b"\n" not in self._out.data:
            if self._out.eof or loop.time() > deadline:
                await asyncio.wait(self._tasks, timeout=1.0)
                err = decode(bytes(self._err.data)).strip()
                await self._stop_shell()
                raise SandboxError(f"sandbox shell failed to start: {err}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), 1.0)
            except TimeoutError:
                pass
        self._out.clear()
        self._err.clear()

    async def _stop_shell(self) -> None:
        if self._instance is not None and self._instance.frozen():
            # A frozen process dies only once thawed: kill them all frozen, then thaw.
            self._instance.kill_group(cgroup.AGENT)
        if self._proc is not None:
            proc, self._proc = self._proc, None
            await proc.kill()
        for task in self._tasks:
            task.cancel()
        self._tasks = []


def _quote(script: str) -> bytes:
    """Single-quotes `script` for bash (only ' itself needs escaping inside single quotes)."""
    return b"'" + script.encode("utf-8", errors="surrogateescape").replace(b"'", b"'\\''") + b"'"
