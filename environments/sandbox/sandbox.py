"""The `Sandbox` API: one-shot commands and persistent shells in an isolated environment.

    sandbox = Sandbox(SandboxConfig(image="/var/cache/agentrl_jax/rootfs/default"))
    result = await sandbox.exec("python3 -c 'print(6 * 7)'")       # fresh sandbox, then gone
    async with sandbox.session() as shell:                            # one sandbox, many commands
        await shell.run("cd /tmp && export X=1")
        print((await shell.run("echo $X $PWD")).stdout)               # "1 /tmp"

`exec` builds a fresh `SandboxInstance` per call and deletes it afterwards; a `ShellSession` keeps
one instance (and one bash in it) until closed.
"""

from __future__ import annotations

from collections.abc import Sequence

from environments.sandbox.config import SandboxConfig
from environments.sandbox.instance import ProcessLimitWatch, SandboxInstance
from environments.sandbox.oneshot import run_to_end
from environments.sandbox.result import ExecResult
from environments.sandbox.session import ShellSession


class Sandbox:
    """Factory of sandboxes sharing one config: `exec` (one-shot) and `session` (a shell)."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()

    async def exec(self, cmd: str | Sequence[str], stdin: bytes | str | None = None,
                   timeout: float | None = None) -> ExecResult:
        """Runs `cmd` (a bash script, or an argv) in a fresh sandbox that is deleted afterwards.

        Output is truncated to `limits.output_bytes` per stream. The command gets `stdin` (or
        /dev/null) and `timeout` seconds of wall clock (default `limits.timeout_s`).
        """
        command = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        limits = self.config.limits
        instance = SandboxInstance(self.config)
        try:
            proc = await instance.start(command, stdin_pipe=data is not None)
            try:
                return await run_to_end(proc, data, timeout or limits.timeout_s,
                                         limits.output_bytes, ProcessLimitWatch(instance))
            finally:
                await proc.kill()
        finally:
            instance.close()

    def session(self) -> ShellSession:
        """A persistent bash in one sandbox; use as `async with sandbox.session() as shell:`."""
        return ShellSession(self.config)
