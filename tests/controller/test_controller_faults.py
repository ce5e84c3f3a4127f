"""Faults with real processes: kill -9 and SIGSTOP workers that hold live sessions."""

from __future__ import annotations

import asyncio
import signal
import socket

import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.wire import SampleStatus
from environments.fleet import EnvFleet
from tests.support.controller_fleet import ThreadFleet, echo_call

CONTROLLER = dict(heartbeat_timeout_s=2.0, liveness_interval_s=0.1, probe_timeout_s=1.0,
                  clean_interval_s=0.5, sync_interval_s=1.0)
WORKER = dict(heartbeat_interval=0.3, concurrency=8, params=["rounds=1000"])
HANG_GUARD_S = 60.0   # only so that a regression fails instead of hanging the suite


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fleet():
    with EnvFleet(CONTROLLER) as env_fleet:
        yield env_fleet


def sessions_by_worker(fleet: EnvFleet) -> dict[int, dict]:
    import httpx
    return {s["session_id"]: s for s in httpx.get(fleet.url + "/list_sessions").json()}


def worker_ids(fleet: EnvFleet) -> dict[str, str]:
    """address → controller worker id"""
    import httpx
    return {w["address"]: w["id"] for w in httpx.get(fleet.url + "/list_workers").json()["echo"]}


def test_kill_9_worker_with_live_sessions(fleet):
    victim = fleet.add_worker("echo", port=free_port(), **WORKER)
    survivor = fleet.add_worker("echo", **WORKER)
    fleet.wait_until(lambda ws: len([w for w in ws.get("echo", []) if w["status"] == "alive"])
                     == 2)
    ids = worker_ids(fleet)

    async def main():
        async with ControllerClient(fleet.url, start_jitter_s=0.0) as client:
            samples = [await client.start_sample("echo", 0) for _ in range(6)]
            placed = sessions_by_worker(fleet)
            on_victim = [s.session_id for s in samples
                         if placed[s.session_id]["worker"] == ids[victim.url]]
            assert len(on_victim) == 3   # most-free-first balances 3 and 3

            victim.kill(signal.SIGKILL)
            ThreadFleet.wait_for(lambda: all(
                sessions_by_worker(fleet)[sid]["status"] == "task error" for sid in on_victim))
            survivors = [s.session_id for s in samples if s.session_id not in on_victim]
            assert all(sessions_by_worker(fleet)[sid]["status"] == "running"
                       for sid in survivors)

            # The trainer learns it at its next interact, at once and with a definite status.
            step = await client.interact(on_victim[0], [echo_call("anyone?")])
            assert step.finish and step.status is SampleStatus.TASK_ERROR
            step = await client.interact(survivors[0], [echo_call("still here")])
            assert not step.finish and step.messages[-1]["content"] == "still here"

            fresh = [await client.start_sample("echo", 0) for _ in range(3)]
            placed = sessions_by_worker(fleet)
            assert all(placed[s.session_id]["worker"] == ids[survivor.url] for s in fresh)

            # The restarted worker (same port, so same address) registers again and serves.
            restarted = fleet.restart_worker(victim)
            assert restarted.url == victim.url
            fleet.wait_until(lambda ws: any(w["address"] == victim.url and w["status"] == "alive"
                                            for w in ws["echo"]))
            again = await client.start_sample("echo", 0)
            assert sessions_by_worker(fleet)[again.session_id]["worker"] == ids[victim.url]

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD_S))


def test_hung_worker_does_not_hang_interact(fleet):
    hung = fleet.add_worker("echo", **WORKER)
    fleet.wait_until(lambda ws: any(w["status"] == "alive" for w in ws.get("echo", [])))

    async def main():
        async with ControllerClient(fleet.url, start_jitter_s=0.0) as client:
            sample = await client.start_sample("echo", 0)
            hung.kill(signal.SIGSTOP)   # accepts connections (kernel backlog), never answers
            try:
                step = await client.interact(sample.session_id, [echo_call("hello?")])
            finally:
                hung.kill(signal.SIGCONT)
            assert step.finish and step.status is SampleStatus.TASK_ERROR
            assert "worker died" in step.metrics["error"]

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD_S))
