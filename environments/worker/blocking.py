"""Each session's blocking calls on a thread of its own, so no session waits behind another's.

Database drivers and SPARQL stores block. Run through Python's shared default executor (a few
threads for the whole worker), a handful of endless queries from one agent would hold every
thread and stall every other session's `SELECT 1`. A `SessionCalls` is one thread per session:
a session runs at most one blocking call at a time (its next call waits for its previous one,
even one the session stopped waiting for), and another session's calls never wait for it. The
number of threads is bounded by the worker's session concurrency, plus calls of ended sessions
still unwinding, which each backend keeps short by interrupting its work when it closes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class SessionCalls:
    """Runs one session's blocking calls, one at a time, on the session's own thread."""

    def __init__(self, name: str = "session") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, function: Callable[..., T], /, *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))

    def close(self) -> None:
        """Drops queued calls; a running one finishes on its thread, which then exits."""
        self._executor.shutdown(wait=False, cancel_futures=True)
