"""asyncio front end: `await engine.generate(request)` from many concurrent episodes.

A background thread owns the `SamplingEngine` and loops `step()` while there is work; callers on
any asyncio loop hand it requests and commands through a queue and await futures that the
thread resolves with `call_soon_threadsafe`. Weight preparation (resharding onto the sampler
mesh) runs in the caller's thread; only the swap itself runs between two engine steps.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from flax import nnx

from agentrl_jax.models.decoder import Decoder
from agentrl_jax.sampling.engine import SamplingEngine, TokenCallback
from agentrl_jax.sampling.types import GenerateRequest, GenerationResult, TokenEvent
from agentrl_jax.sampling.weights import Weights


def _resolve(future: asyncio.Future, outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _deliver(loop: asyncio.AbstractEventLoop, on_tokens: TokenCallback, event: TokenEvent
             ) -> None:
    """Hands `event` to `on_tokens` on `loop` (from the engine's thread); a closed loop has no
    one left to tell, and must not stop the engine."""
    try:
        loop.call_soon_threadsafe(on_tokens, event)
    except RuntimeError:
        pass


class AsyncSamplingEngine:
    """Runs a SamplingEngine on a background thread; use as an (async) context manager."""

    def __init__(self, engine: SamplingEngine):
        self.engine = engine
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="sampling-engine", daemon=True)
        self._thread.start()

    # ---- the loop thread -----------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop:
                while not self._commands.empty():
                    self._commands.get()()
                if self.engine.has_work:
                    self.engine.step()
                else:
                    self._wake.wait()
                    self._wake.clear()
        except BaseException as e:  # fail every waiter instead of hanging them
            self._error = e
            self.engine.fail_all(RuntimeError(f"sampling engine loop died: {e!r}"))
            while not self._commands.empty():
                self._commands.get()()

    def _call(self, command: Callable[[], None]) -> None:
        if self._error is not None:
            raise RuntimeError("sampling engine loop died") from self._error
        self._commands.put(command)
        self._wake.set()

    async def _run(self, fn: Callable[[], Any]) -> Any:
        """Runs fn() on the loop thread between two steps and returns its result."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def command():
            try:
                outcome = fn()
            except BaseException as e:
                outcome = e
            loop.call_soon_threadsafe(_resolve, future, outcome)

        self._call(command)
        return await future

    # ---- API -----------------------------------------------------------------------------

    async def generate(self, request: GenerateRequest, on_tokens: TokenCallback | None = None
                       ) -> GenerationResult:
        """Generates one turn; cancelling the awaiting task aborts the request.

        `on_tokens(event)` (`SamplingEngine.submit`) is called on the caller's event loop with
        the turn's new tokens at each host sync; every call comes before `generate` returns,
        since both are queued on that loop in the engine's order.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        ids: list[int] = []

        def on_done(outcome):
            loop.call_soon_threadsafe(_resolve, future, outcome)

        tokens = None if on_tokens is None else functools.partial(_deliver, loop, on_tokens)

        def submit():
            try:
                ids.append(self.engine.submit(request, on_done, tokens))
            except BaseException as e:
                on_done(e)

        self._call(submit)
        try:
            return await future
        except asyncio.CancelledError:
            def cancel() -> None:
                if ids:
                    self.engine.cancel(ids[0])

            self._call(cancel)
            raise

    async def update_params(
        self, params: Decoder | nnx.State | Weights, version: int, policy: str = "current"
    ) -> None:
        """Serves new weights as `policy`; returns once the swap is in place."""
        weights = await asyncio.to_thread(self.engine.prepare_weights, params)
        await self._run(lambda: self.engine.install(policy, version, weights))

    async def install(self, policy: str, version: int, weights: Any) -> None:
        """Serves weights already in the sampler's layout and shardings (`SamplingEngine.install`:
        placed there by the caller, device to device) as `policy`; returns once in place."""
        await self._run(lambda: self.engine.install(policy, version, weights))

    async def end_session(self, session_id: str) -> None:
        await self._run(lambda: self.engine.end_session(session_id))

    async def policies(self) -> dict[str, int]:
        return await self._run(lambda: self.engine.policies)

    async def prefill_stats(self) -> dict[str, float]:
        """`SamplingEngine.prefill_stats`, read between two steps."""
        return await self._run(self.engine.prefill_stats)

    def close(self) -> None:
        """Stops the loop thread (after the current step)."""
        self._stop = True
        self._wake.set()
        self._thread.join()

    async def __aenter__(self) -> AsyncSamplingEngine:
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> AsyncSamplingEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
