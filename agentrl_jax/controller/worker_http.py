"""The controller's HTTP client to all its workers: one pool, and fresh connections for retries.

This is aiohttp, not httpx, on measurement (benchmarks/controller.py, 2-core machine): an
httpx.AsyncClient call cost ~0.8 ms of CPU at 10 open connections and ~3 ms at 1,000, because
httpcore's pool re-examines every pooled connection (a readability poll each) on every request;
aiohttp's connector pops an idle connection from a per-host list, ~0.2 ms flat. The proxy's own
CPU is the controller's throughput limit, so this choice alone is most of its budget.

Connection reuse is where a proxy loses requests: uvicorn closes the connection after a 500
without saying `Connection: close`, and a request sent on it meets a reset. So a connection that
answered 5xx or `Connection: close`, or failed, is closed and never reused; and `call` repeats a
request that is safe to repeat on a fresh connection (its own, closed after) with back-off.
"""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp

# Whatever a call to a worker can raise when the worker, the network or the URL is at fault.
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, ValueError)
_JSON = {"Content-Type": "application/json"}


def reached_worker(error: BaseException) -> bool:
    """Whether a failed request may have reached the worker (False: it certainly did not).

    A refused or failed connect, or a URL that cannot be sent to, never left this process.
    Anything later (a reset, a disconnect, a timeout) may have been delivered and acted on.
    """
    return not isinstance(error, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError,
                                  ValueError))


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


class _ClosingResponse(aiohttp.ClientResponse):
    """Keeps its connection's protocol so that the connection can be closed after the body.

    aiohttp returns a connection to the pool as soon as the body has arrived, before the
    caller sees it; closing the protocol (public `ResponseHandler.close`) makes the pool drop
    it at the next acquire.
    """

    worker_protocol = None

    async def start(self, connection):
        self.worker_protocol = connection.protocol
        return await super().start(connection)

    def discard_connection(self) -> None:
        if self.worker_protocol is not None:
            self.worker_protocol.close()


class WorkerHTTP:
    def __init__(self, timeout_s: float, max_connections: int, keepalive_s: float = 4.0,
                 retry_attempts: int = 6, retry_backoff_s: float = 0.05) -> None:
        # Six attempts, 1.55 s of back-off in all: behind a network that resets 15% of
        # requests, a repeatable call then fails ~3e-5 of the time (four gave ~1e-3, which over
        # a few hundred calls ended a session now and then, a healthy one).
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        # Under uvicorn's default 5 s keep-alive (AgentRL's worker uses it), so that we never
        # send on a connection the worker is closing.
        self.keepalive_s = keepalive_s
        self.retry_attempts = retry_attempts
        self.retry_backoff_s = retry_backoff_s
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    def _session(self, fresh: bool) -> aiohttp.ClientSession:
        # Created on first use: aiohttp binds to the running event loop.
        current = self._fresh if fresh else self._pooled
        if current is None or current.closed:
            connector = (aiohttp.TCPConnector(force_close=True, limit=self.max_connections)
                         if fresh else
                         aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0,
                                              keepalive_timeout=self.keepalive_s))
            current = aiohttp.ClientSession(
                connector=connector, response_class=_ClosingResponse,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=5.0),
                skip_auto_headers=("User-Agent",))
            if fresh:
                self._fresh = current
            else:
                self._pooled = current
        return current

    async def request(self, method: str, url: str, body: bytes | str | None = None,
                      timeout_s: float | None = None, fresh: bool = False) -> Reply:
        """One attempt: pooled (or, `fresh`, on a new connection closed after)."""
        timeout = None if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
        async with self._session(fresh).request(
                method, url, data=body, headers=_JSON if body is not None else None,
                timeout=timeout) as response:
            reply = Reply(response.status, await response.read())
            if response.status >= 500 or response.headers.get("Connection",
                                                              "").lower() == "close":
                assert isinstance(response, _ClosingResponse)  # the session's response_class
                response.discard_connection()
            return reply

    async def post(self, url: str, body: bytes | str, timeout_s: float | None = None,
                   fresh: bool = False) -> Reply:
        return await self.request("POST", url, body, timeout_s, fresh)

    async def get(self, url: str, timeout_s: float | None = None) -> Reply:
        return await self.request("GET", url, None, timeout_s)

    async def call(self, method: str, url: str, body: bytes | str | None = None,
                   timeout_s: float | None = None) -> Reply:
        """A request that is safe to repeat, repeated on fresh connections until one answers.

        Attempt k > 0 waits `retry_backoff_s * 2**(k-1)` first. A timeout is not repeated (the
        worker is slow, not the connection). Raises the last transport error.
        """
        for attempt in range(self.retry_attempts):
            if attempt:
                await asyncio.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            try:
                return await self.request(method, url, body, timeout_s, fresh=attempt > 0)
            except TimeoutError:   # an OSError since Python 3.10: catch it first
                raise
            except TRANSPORT_ERRORS:
                if attempt == self.retry_attempts - 1:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()
        await asyncio.sleep(0)   # lets aiohttp close its transports before the loop ends
