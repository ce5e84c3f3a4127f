"""Running one command in a sandbox to its end: feed stdin, collect output, enforce limits.

Shared by `Sandbox.exec` (a fresh sandbox per command) and `ShellSession.exec` (a separate
process in a session's sandbox, e.g. a grader).
"""

from __future__ import annotations

import asyncio

from environments.sandbox.instance import ProcessLimitWatch
from environments.sandbox.output import StreamBuffer, pump
from environments.sandbox.process import SandboxProcess
from environments.sandbox.result import ExecResult, ExecStatus, classify, decode

_DRAIN_S = 5.0  # after the sandbox is dead its pipes hit EOF at once; this only bounds a bug


async def run_to_end(proc: SandboxProcess, stdin: bytes | None, timeout: float,
                      output_bytes: int, out_of_processes: ProcessLimitWatch) -> ExecResult:
    """Feeds stdin, collects output, and waits for exit, a timeout or a fork bomb."""
    changed = asyncio.Event()
    out, err = StreamBuffer(output_bytes, changed), StreamBuffer(output_bytes, changed)
    tasks = [asyncio.create_task(pump(proc.stdout, out)),
             asyncio.create_task(pump(proc.stderr, err))]
    if stdin is not None:
        tasks.append(asyncio.create_task(_feed(proc.stdin, stdin)))
    waiter = asyncio.create_task(proc.wait())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    killed_for: ExecStatus | None = None
    try:
        while not waiter.done():
            if out_of_processes(err.data):
                killed_for = ExecStatus.PROCESS_LIMIT  # stop a fork bomb now, not at the timeout
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                killed_for = ExecStatus.TIMEOUT
                break
            changed.clear()
            change = asyncio.create_task(changed.wait())
            # Wake at least every second: a pending EAGAIN may need another look at the uid.
            await asyncio.wait({waiter, change}, timeout=min(remaining, 1.0),
                               return_when=asyncio.FIRST_COMPLETED)
            change.cancel()
        if killed_for is not None:
            await proc.kill()
        code = await waiter
        await asyncio.wait(tasks[:2], timeout=_DRAIN_S)
    finally:
        for task in (*tasks, waiter):
            task.cancel()
    stdout, out_cut = out.output()
    stderr, err_cut = err.output()
    if proc.setup_failed or (code == 1 and stdout == b"" and stderr.startswith(b"bwrap: ")):
        # bwrap reports its own setup errors (a missing bind source, say) as "bwrap: ..." and
        # exit status 1, after it has already reported the sandbox's PID 1.
        return ExecResult(None, "", decode(stderr), ExecStatus.SANDBOX_ERROR)
    if killed_for is not None:
        return ExecResult(None, decode(stdout), decode(stderr), killed_for, out_cut or err_cut)
    status, sig = classify(code, bytes(err.data))
    return ExecResult(code, decode(stdout), decode(stderr), status, out_cut or err_cut, sig)


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command exited without reading all of it: that is its business
