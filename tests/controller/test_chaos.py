"""Chaos: ~500 concurrent scripted episodes through the controller for a few minutes while
workers (AgentRL's and ours) are SIGKILLed and restarted, connections reset, replies delayed
past the controller's timeout, and malformed agent turns injected.

Invariants, each a failure when broken:
- every episode ends, with exactly one final status (a late interact repeats it, and the
  controller's session table agrees);
- no healthy session ends in `task error` (healthy: its worker was not killed while it ran and
  none of its replies was delayed);
- no 5xx but the documented 503 of a start with no reachable worker;
- when traffic stops, capacity accounting returns to zero, in the controller and in the workers.

Everything is loopback: a controller process, two of our echo workers and two AgentRL
calculator workers (processes), each behind a `ResettingProxy`. CHAOS_SECONDS sets how long
traffic runs (default 150), CHAOS_EPISODES how many run at once (default 500).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import importlib.util
import os
import random
import time
from collections.abc import Callable

import aiohttp
import httpx
import pytest

from environments.fleet import (
    ServerProcess,
    controller_argv,
    spawn_server,
    start_server,
    wait_ready,
    worker_argv,
)
from tests.support.controller_fleet import (
    AgentRLWorker,
    ResettingProxy,
    echo_call,
    free_port,
    multiply_call,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("agentrl") is None,
                       reason="agentrl-worker is not installed"),
]

SECONDS = float(os.environ.get("CHAOS_SECONDS", 150))
EPISODES = int(os.environ.get("CHAOS_EPISODES", 500))
CONTROLLER = dict(interaction_timeout_s=10.0, heartbeat_timeout_s=20.0, liveness_interval_s=0.5,
                  probe_timeout_s=5.0, clean_interval_s=2.0, sync_interval_s=10.0)
DELAY_S = 14.0            # a delayed reply arrives past interaction_timeout_s
KILL_EVERY_S = 20.0
MALFORMED = [[], [{}], [{"role": "user", "content": "hi"}], ["text"],
             [{"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": ""}}]}]]
# Refused by AgentRL's worker itself (a 500 that leaves the session where it stood).
MALFORMED_FOR_AGENTRL = [{"role": "assistant", "content": "?", "audio": "x"}]


@dataclasses.dataclass
class Worker:
    kind: str                       # "ours" or "agentrl"
    proxy: ResettingProxy
    address: str                    # as registered: the proxy's
    api: str                        # the worker's own
    spawn: Callable[[], object]     # starts the process (from the thread that outlives it)
    ready: Callable[[], object]     # waits until it listens
    stop: Callable[[], object]
    kills: list[float] = dataclasses.field(default_factory=list)   # time.monotonic()


@dataclasses.dataclass
class Episode:
    task: str
    started: float
    session_id: int | None = None
    status: str | None = None
    ended: float | None = None
    worker: str | None = None


class Chaos:
    def __init__(self, controller_url: str, workers: list[Worker], seed: int = 0) -> None:
        self.url = controller_url
        self.workers = workers
        self.rng = random.Random(seed)
        self.episodes: list[Episode] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []

    def violation(self, text: str) -> None:
        self.violations.append(text)

    async def request(self, http: aiohttp.ClientSession, path: str, body: dict,
                      session_id: int | None = None) -> tuple[int, dict, dict]:
        headers = {"session_id": str(session_id)} if session_id is not None else {}
        async with http.post(self.url + path, json=body, headers=headers) as response:
            payload = await response.json(content_type=None)
            if response.status >= 500 and not (path == "/start_sample"
                                                and response.status == 503):
                self.violation(f"{path} answered {response.status}: {payload}")
            self.counts[f"{path} {response.status}"] += 1
            return response.status, payload, dict(response.headers)

    async def episode(self, http: aiohttp.ClientSession, number: int) -> None:
        task = "echo" if number % 2 else "calculator"
        episode = Episode(task, time.monotonic())
        for attempt in range(20):   # the fleet may be short of a worker for a while
            status, payload, headers = await self.request(
                http, "/start_sample", {"name": task, "index": number % 5})
            if status == 200:
                break
            if status not in (406, 503):
                self.violation(f"start_sample answered {status}: {payload}")
                return
            await asyncio.sleep(0.5 + self.rng.random() * attempt)
        else:
            self.counts["start given up"] += 1
            return
        self.episodes.append(episode)
        episode.session_id = int(headers["session_id"])
        turns = ([echo_call(f"{number}.{i}") for i in range(3)] if task == "echo" else
                 [multiply_call(number % 5 + 2, 7),
                  {"role": "assistant", "content": str((number % 5 + 2) * 7)}])
        finish, final = payload["finish"], payload["status"]
        for turn in turns:
            if finish:
                break
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))   # the agent thinks
            if self.rng.random() < 0.05:
                bad = self.rng.choice(MALFORMED + ([MALFORMED_FOR_AGENTRL]
                                                   if task == "calculator" else []))
                status, payload, _ = await self.request(http, "/interact", {"messages": bad},
                                                        episode.session_id)
                self.counts["malformed injected"] += 1
                if status == 200 and not payload["finish"]:
                    self.violation(f"malformed turn {bad} was taken: {payload}")
                if status == 200:
                    finish, final = True, payload["status"]
                    break
            status, payload, _ = await self.request(http, "/interact", {"messages": [turn]},
                                                    episode.session_id)
            if status != 200:
                self.violation(f"interact answered {status}: {payload}")
                return
            finish, final = payload["finish"], payload["status"]
        if not finish:
            self.violation(f"session {episode.session_id} did not end after its last turn")
            return
        episode.status, episode.ended = final, time.monotonic()
        # Exactly one final status: a late interact repeats it.
        status, payload, _ = await self.request(http, "/interact",
                                                {"messages": [turns[-1]]}, episode.session_id)
        if status != 200 or not payload["finish"] or payload["status"] != final:
            self.violation(f"session {episode.session_id} ended {final!r}, later {payload}")

    async def traffic(self, seconds: float, concurrency: int) -> None:
        deadline = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=concurrency + 16)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=120)) as http:
            async def loop(slot: int) -> None:
                await asyncio.sleep(self.rng.uniform(0, 5))   # ramp up
                number = slot
                while time.monotonic() < deadline:
                    await self.episode(http, number)
                    number += concurrency

            await asyncio.gather(self.kill_loop(deadline),
                                 *(loop(slot) for slot in range(concurrency)))

    async def kill_loop(self, deadline: float) -> None:
        while time.monotonic() + KILL_EVERY_S < deadline:
            await asyncio.sleep(KILL_EVERY_S * self.rng.uniform(0.5, 1.5))
            worker = self.rng.choice(self.workers)
            worker.kills.append(time.monotonic())
            await asyncio.to_thread(worker.stop)
            await asyncio.sleep(self.rng.uniform(0.0, 1.0))
            worker.spawn()   # here: a worker dies with the thread that started it
            await asyncio.to_thread(worker.ready)
            self.counts[f"kill+restart {worker.kind}"] += 1


def healthy(episode: Episode, workers_by_address: dict[str, Worker],
            delayed: set[int]) -> bool:
    worker = workers_by_address.get(episode.worker)
    killed = worker is not None and any(episode.started - 1.0 <= t <= episode.ended + 1.0
                                        for t in worker.kills)
    return not killed and episode.session_id not in delayed


@pytest.mark.timeout(SECONDS + 600)
def test_chaos(tmp_path):
    controller = start_server(controller_argv(0, **CONTROLLER))
    workers: list[Worker] = []
    try:
        for number in range(2):
            proxy = ResettingProxy(drop_request=0.03, close_after=0.1, delay_reply=0.002,
                                   delay_s=DELAY_S, seed=10 + number)
            port = free_port()
            api = f"http://127.0.0.1:{port}/api"
            argv = worker_argv("echo", controller.url, port, concurrency=200,
                               heartbeat_interval=1.0, self=proxy.forward_to(api),
                               params=["rounds=3"])
            box: dict[str, object] = {}
            workers.append(Worker(
                "ours", proxy, proxy.forward_to(api), api,
                spawn=lambda argv=argv, box=box: box.__setitem__("p", spawn_server(argv)),
                ready=lambda argv=argv, box=box: box.__setitem__(
                    "server", wait_ready(argv, box["p"])),
                stop=lambda box=box: ServerProcess([], box["p"], "").kill()))
        for number in range(2):
            proxy = ResettingProxy(drop_request=0.03, close_after=0.1, delay_reply=0.002,
                                   delay_s=DELAY_S, seed=20 + number)
            agentrl = AgentRLWorker(controller.url, tmp_path, concurrency=100, proxy=proxy)
            workers.append(Worker("agentrl", proxy, agentrl.address, agentrl.api,
                                  spawn=agentrl.start, ready=lambda: None, stop=agentrl.kill))
        for worker in workers:
            worker.spawn()
            worker.ready()
        http = httpx.Client(base_url=controller.url, timeout=30)
        wait_for(lambda: sum(w["status"] == "alive" for ws in http.get("/list_workers").json()
                             .values() for w in ws) == 4, 60)

        chaos = Chaos(controller.url, workers)
        asyncio.run(asyncio.wait_for(chaos.traffic(SECONDS, EPISODES), SECONDS + 300))

        # Traffic has stopped: every slot is free again, in the controller and the workers.
        def drained() -> bool:
            listing = [w for ws in http.get("/list_workers").json().values() for w in ws
                       if w["status"] == "alive"]
            held = [httpx.get(w.api + "/get_sessions", timeout=10).json() for w in workers]
            return (len(listing) == 4 and all(w["current"] == 0 and w["draining"] == 0
                                              for w in listing)
                    and all(not sessions for sessions in held))

        http.post("/sync_all")
        wait_for(drained, 120)

        sessions = {s["session_id"]: s for s in http.get("/list_sessions").json()}
        addresses = {w["id"]: w["address"]
                     for ws in http.get("/list_workers").json().values() for w in ws}
        by_address = {w.address: w for w in workers}
        delayed = set().union(*(w.proxy.delayed_sessions for w in workers))
        outcomes: collections.Counter[str] = collections.Counter()
        for episode in chaos.episodes:
            if episode.status is None:
                continue   # its violation is recorded
            record = sessions.get(episode.session_id)
            if record is None or record["status"] != episode.status:
                chaos.violation(f"session {episode.session_id} ended {episode.status!r}; "
                                f"the controller says {record}")
                continue
            episode.worker = addresses.get(record["worker"])
            ok = healthy(episode, by_address, delayed)
            outcomes[f"{'healthy' if ok else 'faulted'} {episode.status}"] += 1
            if ok and episode.status == "task error":
                metrics = controller_metrics(controller.url, episode.session_id)
                chaos.violation(f"healthy session {episode.session_id} ended in task error "
                                f"({metrics})")
        network = collections.Counter()
        for worker in workers:
            network.update(worker.proxy.counts)
        print(f"\nchaos: {SECONDS:.0f} s, {EPISODES} concurrent, "
              f"{len(chaos.episodes)} episodes started")
        for name, table in (("outcomes", outcomes), ("requests", chaos.counts),
                            ("network", network)):
            print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in sorted(table.items())))
        print(f"  violations: {len(chaos.violations)}")
        for text in chaos.violations[:20]:
            print("   ", text)
        assert not chaos.violations
        assert outcomes["healthy completed"] > 0 and network["reset"] > 0
    finally:
        for worker in workers:
            try:
                worker.stop()
            except (KeyError, AttributeError, ProcessLookupError):
                pass
            worker.proxy.close()
        controller.kill()


def controller_metrics(url: str, session_id: int) -> object:
    """Why a session ended, as far as the controller says (its late interact's metrics)."""
    response = httpx.post(url + "/interact", headers={"session_id": str(session_id)},
                          json={"messages": [{"role": "assistant", "content": "late"}]})
    return response.json().get("metrics")


def wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.5)
