"""Our workers behind a network that resets connections: no healthy session is lost."""

from __future__ import annotations

import asyncio

import httpx

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.wire import SampleStatus
from environments.echo import EchoTask
from tests.support.controller_fleet import ResettingProxy, echo_call


def test_resetting_network_loses_no_session(make_fleet):
    fleet = make_fleet()
    proxies = [ResettingProxy(drop_request=0.15, close_after=0.3, seed=seed) for seed in (1, 2)]
    try:
        workers = [fleet.add_worker(EchoTask(rounds=4), concurrency=8, proxy=proxy)
                   for proxy in proxies]

        async def episode(client: ControllerClient, number: int) -> SampleStatus:
            sample = await client.start_sample("echo", number % 100)
            step = None
            for turn in range(4):
                step = await client.interact(sample.session_id, [echo_call(f"{number}.{turn}")])
                if step.finish:
                    break
                assert step.messages[-1]["content"] == f"{number}.{turn}"   # never a stale one
            return step.status

        async def main():
            async with ControllerClient(fleet.url, start_jitter_s=0.0,
                                        retry_backoff_s=0.1) as client:
                limit = asyncio.Semaphore(12)

                async def bounded(number):
                    async with limit:
                        return await episode(client, number)

                return await asyncio.gather(*(bounded(n) for n in range(80)))

        statuses = asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        for proxy in proxies:
            proxy.close()
    counts = {key: sum(p.counts[key] for p in proxies) for key in proxies[0].counts}
    print("proxies", counts)
    assert counts["reset"] > 10 and counts["closed_after"] > 10
    errors = [s.metrics for s in fleet.state.sessions if s.status is SampleStatus.TASK_ERROR]
    assert statuses == [SampleStatus.COMPLETED] * 80, errors
    # Every turn was taken once: a replayed interact would have ended an episode early.
    assert all(s.turns == 4 for s in fleet.state.sessions)
    for worker in workers:
        assert httpx.get(worker.api + "/get_sessions").json() == {}
    assert [w["current"] for w in fleet.list_workers()["echo"]] == [0, 0]
