"""Test support: an in-process fleet (a controller and task workers, each uvicorn in a thread),
and a loopback proxy that breaks a worker's connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

import httpx

from agentrl_jax.controller.app import create_controller_app
from agentrl_jax.controller.config import ControllerConfig
from environments.echo import EchoTask
from environments.fleet import ServerThread
from environments.worker.server import WorkerConfig, create_worker_app
from environments.worker.task import Task

# Short enough for fast tests, long enough that a busy 2-core machine never misses a beat.
FAST_CONTROLLER = dict(heartbeat_timeout_s=2.0, liveness_interval_s=0.1, probe_timeout_s=1.0,
                       clean_interval_s=0.2, sync_interval_s=3600.0)


class ThreadFleet:
    def __init__(self, **controller_settings) -> None:
        config = ControllerConfig(**{**FAST_CONTROLLER, **controller_settings})
        self.controller = ServerThread(create_controller_app(config)).start()
        self.http = httpx.Client(base_url=self.controller.api, timeout=30)
        self.workers: list[ServerThread] = []

    @property
    def url(self) -> str:
        return self.controller.api

    @property
    def state(self):
        return self.controller.app.state.controller

    def add_worker(self, task: Task | None = None, concurrency: int | None = 4,
                   proxy: ResettingProxy | None = None, **settings) -> ServerThread:
        """Starts a worker; behind `proxy` it registers the proxy's address as its own."""
        task = task or EchoTask(rounds=3)
        registered: list[str] = []

        def make_app(api: str):
            registered.append(proxy.forward_to(api) if proxy else api)
            return create_worker_app(task, WorkerConfig(
                controller_api=self.url, self_api=registered[0], concurrency=concurrency,
                heartbeat_interval_s=0.2, **settings))

        worker = ServerThread(make_app=make_app).start()
        self.workers.append(worker)
        self.wait_for(lambda: any(w["address"] == registered[0] and w["status"] == "alive"
                                  for ws in self.list_workers().values() for w in ws))
        return worker

    def list_workers(self) -> dict:
        return self.http.get("/list_workers").json()

    def sessions(self) -> dict[int, dict]:
        return {s["session_id"]: s for s in self.http.get("/list_sessions").json()}

    def worker_record(self, worker: ServerThread) -> dict:
        return next(w for ws in self.list_workers().values() for w in ws
                    if w["address"] == worker.api)

    @staticmethod
    def wait_for(predicate, timeout_s: float = 30.0) -> None:
        """Polls until `predicate()`; the bound only keeps a broken build from hanging."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached")
            time.sleep(0.05)

    def close(self) -> None:
        self.http.close()
        for server in [*self.workers, self.controller]:
            server.stop()


AGENTRL_TASKS = pathlib.Path(__file__).parent / "agentrl_tasks"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AgentRLWorker:
    """AgentRL's own task worker (`python -m agentrl.worker calculator`) as a subprocess.

    It listens on `port` and registers `address` (its own API, or a proxy's). AgentRL's worker
    beats every 8 s (fixed) and sends no worker id.
    """

    def __init__(self, controller_url: str, tmp_dir: pathlib.Path, concurrency: int = 4,
                 proxy: ResettingProxy | None = None) -> None:
        self.controller_url = controller_url
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.address = proxy.forward_to(self.api) if proxy else self.api
        self.config = tmp_dir / f"calculator-{self.port}.yaml"
        self.config.write_text("calculator:\n  module: calculator.CalculatorTask\n"
                               f"  parameters:\n    concurrency: {concurrency}\n")
        self.process: subprocess.Popen | None = None

    def start(self) -> AgentRLWorker:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentrl.worker", "calculator", "-c", str(self.config),
             "--controller", self.controller_url, "--self", self.address,
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "ERROR"],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(AGENTRL_TASKS), os.environ.get("PYTHONPATH", "")])},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def multiply_call(a: int, b: int, call_id: str = "call-0") -> dict:
    """The calculator task's first agent turn."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "multiply",
                                         "arguments": json.dumps({"a": a, "b": b})}}]}


def echo_call(text: str, call_id: str = "0") -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "echo", "arguments": json.dumps({"text": text})}}]}


class ResettingProxy:
    """A loopback HTTP/1.1 proxy in front of one worker that breaks connections at random.

    Per request, with probability `drop_request`, the client's connection is reset (RST) and
    the request never forwarded; after a response, with probability `close_after`, the
    connection is closed without `Connection: close` (what uvicorn does after a 500), so a
    client that sends on it again meets a reset. The worker only ever sees requests whose
    answers reach the client, so these faults are the network's, never a session's.

    With probability `delay_reply`, the reply to a start_sample or interact is held `delay_s`
    (past the controller's timeout, to make one); that session's id joins `delayed_sessions`:
    unlike the others, this fault does cost the session.
    Requests and responses must carry Content-Length (aiohttp's and uvicorn's do).
    """

    def __init__(self, drop_request: float = 0.1, close_after: float = 0.2,
                 delay_reply: float = 0.0, delay_s: float = 0.0, seed: int = 0) -> None:
        self.drop_request = drop_request
        self.close_after = close_after
        self.delay_reply = delay_reply
        self.delay_s = delay_s
        self.delayed_sessions: set[int] = set()
        self.counts = {"requests": 0, "reset": 0, "closed_after": 0, "delayed": 0}
        self._rng = random.Random(seed)
        self._upstream: tuple[str, int] | None = None
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def forward_to(self, api: str) -> str:
        """Points the proxy at the worker whose API is `api`; returns the proxy's API URL."""
        url = urllib.parse.urlsplit(api)
        self._upstream = (url.hostname, url.port)
        return f"http://127.0.0.1:{self.port}{url.path}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, sock=self._sock))
        ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        self._server.close()
        relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    async def _relay(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        upstream = None
        try:
            while True:
                request = await _read_message(client_in)
                if request is None:
                    return
                self.counts["requests"] += 1
                if self._rng.random() < self.drop_request:
                    self.counts["reset"] += 1
                    _reset(client_out)
                    return
                if upstream is None:
                    upstream = await asyncio.open_connection(*self._upstream)
                upstream[1].write(request)
                await upstream[1].drain()
                response = await _read_message(upstream[0])
                if response is None:
                    _reset(client_out)
                    return
                if self.delay_reply and self._rng.random() < self.delay_reply:
                    delayed = _session_of(request)
                    if delayed is not None:
                        self.delayed_sessions.add(delayed)
                        self.counts["delayed"] += 1
                        await asyncio.sleep(self.delay_s)
                client_out.write(response)
                await client_out.drain()
                if self._rng.random() < self.close_after:
                    self.counts["closed_after"] += 1
                    return
        except (OSError, asyncio.IncompleteReadError, ValueError):
            _reset(client_out)
        except asyncio.CancelledError:   # the proxy is closing
            pass
        finally:
            client_out.close()
            if upstream is not None:
                upstream[1].close()


async def _read_message(stream: asyncio.StreamReader) -> bytes | None:
    """One HTTP/1.1 message (head and Content-Length body); None at a clean end of stream."""
    try:
        head = await stream.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as eof:
        if eof.partial:
            raise
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head + await stream.readexactly(length)


def _session_of(request: bytes) -> int | None:
    """The session id of a start_sample or interact request to a worker, else None."""
    head, _, body = request.partition(b"\r\n\r\n")
    path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
    if not path.endswith((b"/interact", b"/start_sample")):
        return None
    try:
        return int(json.loads(body)["session_id"])
    except (ValueError, KeyError, TypeError):
        return None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with a TCP reset rather than a FIN."""
    if writer.transport.is_closing():   # the peer went first
        return
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
