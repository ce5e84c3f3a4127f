"""The controller end to end over loopback HTTP: our client → controller → echo workers."""

from __future__ import annotations

import asyncio

import pytest

from agentrl_jax.controller.client import ControllerClient, ControllerRequestError
from agentrl_jax.controller.wire import SampleStatus
from environments.echo import EchoTask
from environments.worker.task import EpisodeResult, Task
from tests.support.controller_fleet import echo_call


def client(fleet, **kwargs) -> ControllerClient:
    return ControllerClient(fleet.url, start_jitter_s=0.0, retry_backoff_s=0.0, **kwargs)


def test_episode_through_client(make_fleet):
    fleet = make_fleet()
    fleet.add_worker(EchoTask(rounds=2))

    async def main():
        async with client(fleet) as c:
            assert (await c.version())["variant"] == "nova"
            assert await c.get_indices("echo") == list(range(100))
            sample = await c.start_sample("echo", 4)
            assert sample.status is SampleStatus.RUNNING and not sample.finish
            assert sample.messages[0]["content"] == "Call echo 2 times."
            assert sample.tools[0]["function"]["name"] == "echo"
            step = await c.interact(sample.session_id, [echo_call("hi", "c7")])
            assert step.messages == [{"role": "tool", "tool_call_id": "c7", "content": "hi"}]
            assert not step.finish and step.status is SampleStatus.RUNNING
            step = await c.interact(sample.session_id, [echo_call("there")])
            assert step.finish and step.status is SampleStatus.COMPLETED and step.reward == 1.0
            assert step.metrics == {"turns": 2}
            # A finished session keeps answering with its outcome, and adds nothing new.
            again = await c.interact(sample.session_id, [echo_call("late")])
            assert again.finish and again.status is SampleStatus.COMPLETED and again.messages == []
            return sample.session_id

    session_id = asyncio.run(main())
    assert fleet.sessions()[session_id]["status"] == "completed"
    assert fleet.worker_record(fleet.workers[0])["current"] == 0


def test_routes_to_worker_with_most_free_capacity(make_fleet):
    fleet = make_fleet()
    small, large = fleet.add_worker(concurrency=2), fleet.add_worker(concurrency=6)

    async def main():
        async with client(fleet, start_retries=0) as c:
            for _ in range(8):
                await c.start_sample("echo", 0)
            with pytest.raises(ControllerRequestError) as full:
                await c.start_sample("echo", 0)
            assert full.value.status_code == 406

    asyncio.run(main())
    # Most-free-first fills the large worker down to the small one's level, then alternates.
    assert fleet.worker_record(small)["current"] == 2
    assert fleet.worker_record(large)["current"] == 6


def test_stale_worker_gets_no_new_sessions(make_fleet):
    fleet = make_fleet()
    drained, other = fleet.add_worker(), fleet.add_worker()
    drained_id = fleet.worker_record(drained)["id"]

    async def main():
        async with client(fleet) as c:
            await c.mark_stale("echo", drained_id, True)
            for _ in range(3):
                await c.start_sample("echo", 0)
            await c.mark_stale("echo", drained_id, False)

    asyncio.run(main())
    assert fleet.worker_record(drained)["current"] == 0
    assert fleet.worker_record(other)["current"] == 3
    assert fleet.http.post("/mark_stale", json={"name": "echo", "worker_id": "nope"}
                           ).status_code == 404


def test_cancel_ends_session_and_frees_the_worker(make_fleet):
    fleet = make_fleet()
    worker = fleet.add_worker()

    async def main():
        async with client(fleet) as c:
            sample = await c.start_sample("echo", 0)
            await c.cancel(sample.session_id)
            step = await c.interact(sample.session_id, [echo_call("x")])
            assert step.finish and step.status is SampleStatus.CANCELLED
            await c.cancel(sample.session_id)   # idempotent

    asyncio.run(main())
    fleet.wait_for(lambda: fleet.worker_record(worker)["current"] == 0)
    import httpx
    assert httpx.get(worker.api + "/get_sessions").json() == {}


def test_second_concurrent_interact_is_400(make_fleet):
    fleet = make_fleet()
    fleet.add_worker(EchoTask(rounds=3, step_delay_s=0.5))

    async def main():
        async with client(fleet) as c:
            sample = await c.start_sample("echo", 0)
            first = asyncio.create_task(c.interact(sample.session_id, [echo_call("a")]))
            await asyncio.sleep(0.1)
            with pytest.raises(ControllerRequestError) as busy:
                await c.interact(sample.session_id, [echo_call("b")])
            assert busy.value.status_code == 400
            assert (await first).messages[-1]["content"] == "a"

    asyncio.run(main())


def test_bad_requests(make_fleet):
    fleet = make_fleet()
    fleet.add_worker()
    http = fleet.http
    assert http.post("/interact", headers={"session_id": "123"},
                     json={"messages": []}).status_code == 404
    assert http.post("/interact", json={"messages": []}).status_code == 400
    assert http.post("/interact", headers={"session_id": "x"}, json={}).status_code == 400
    assert http.post("/cancel", headers={"session_id": "5"}).status_code == 404
    assert http.post("/start_sample", json={"name": "nope", "index": 0}).status_code == 404
    assert http.post("/start_sample", json={"name": "echo"}).status_code == 422
    assert http.post("/start_sample", content=b"{not json").status_code == 422
    assert http.get("/get_indices", params={"name": "nope"}).status_code == 404
    assert http.get("/get_indices").status_code == 422


def test_cancel_all_needs_a_name_with_several_tasks(make_fleet):
    fleet = make_fleet()
    worker = fleet.add_worker()
    fleet.add_worker(LettersTask())

    async def main():
        async with client(fleet) as c:
            for _ in range(3):
                await c.start_sample("echo", 0)
            with pytest.raises(ControllerRequestError) as refused:
                await c.cancel_all()
            assert refused.value.status_code == 403
            assert (await c.cancel_all("echo"))["cancelled"] == 3

    asyncio.run(main())
    assert all(s["status"] == "cancelled" for s in fleet.sessions().values())
    fleet.wait_for(lambda: fleet.worker_record(worker)["current"] == 0)


class LettersTask(Task):
    """String indices, which the controller shows the trainer as 0..n-1."""

    name = "letters"

    def indices(self):
        return ["a", "b", "c"]

    async def episode(self, index, session):
        session.inject({"role": "user", "content": f"index {index}"})
        await session.action()
        return EpisodeResult(reward=1.0)


def test_string_indices_are_mapped_to_ints(make_fleet):
    fleet = make_fleet()
    fleet.add_worker(LettersTask())

    async def main():
        async with client(fleet) as c:
            assert await c.get_indices("letters") == [0, 1, 2]
            sample = await c.start_sample("letters", 2)
            assert sample.messages[0]["content"] == "index c"
            with pytest.raises(ControllerRequestError) as bad:
                await c.start_sample("letters", 3)
            assert bad.value.status_code == 404

    asyncio.run(main())


def test_heartbeats_must_agree_on_indices(make_fleet):
    fleet = make_fleet()
    fleet.add_worker()
    beat = {"name": "echo", "address": "http://127.0.0.1:1/api", "concurrency": 4,
            "indices": [1, 2, 3]}
    assert fleet.http.post("/receive_heartbeat", json=beat).status_code == 400


def test_unreachable_worker_is_skipped_and_declared_dead(make_fleet):
    fleet = make_fleet()
    real = fleet.add_worker()
    # A registered worker with the most capacity that refuses connections (port 9 on loopback).
    beat = {"name": "echo", "address": "http://127.0.0.1:9/api", "concurrency": 100,
            "indices": list(range(100))}
    assert fleet.http.post("/receive_heartbeat", json=beat).status_code == 200

    async def main():
        async with client(fleet) as c:
            sample = await c.start_sample("echo", 0)
            assert not sample.finish

    asyncio.run(main())
    assert fleet.worker_record(real)["current"] == 1
    fleet.wait_for(lambda: any(w["address"].endswith(":9/api") and w["status"] == "dead"
                               for w in fleet.list_workers()["echo"]))


def test_idle_sessions_expire_and_finished_ones_are_collected(make_fleet):
    fleet = make_fleet(idle_session_timeout_s=0.3, finished_session_ttl_s=0.5)
    worker = fleet.add_worker()

    async def main():
        async with client(fleet) as c:
            return (await c.start_sample("echo", 0)).session_id

    session_id = asyncio.run(main())
    fleet.wait_for(lambda: fleet.sessions().get(session_id, {}).get("status") == "cancelled")
    fleet.wait_for(lambda: fleet.worker_record(worker)["current"] == 0)
    fleet.wait_for(lambda: session_id not in fleet.sessions())
    assert fleet.http.post("/interact", headers={"session_id": str(session_id)},
                           json={"messages": []}).status_code == 404


def test_reconciliation_both_ways(make_fleet):
    import httpx
    fleet = make_fleet()
    worker = fleet.add_worker()

    async def main():
        async with client(fleet) as c:
            return (await c.start_sample("echo", 0)).session_id

    ours = asyncio.run(main())
    # The worker loses our session behind the controller's back ...
    assert httpx.post(worker.api + "/cancel", json={"session_id": ours}).status_code == 200
    # ... and holds one the controller never started.
    assert httpx.post(worker.api + "/start_sample",
                      json={"index": 0, "session_id": 42}).status_code == 200
    assert fleet.http.post("/sync_all").status_code == 200
    assert fleet.sessions()[ours]["status"] == "task error"
    fleet.wait_for(lambda: httpx.get(worker.api + "/get_sessions").json() == {})


def test_worker_shutdown_ends_its_sessions_with_task_error(make_fleet):
    fleet = make_fleet()
    doomed, survivor = fleet.add_worker(concurrency=8), fleet.add_worker(concurrency=8)

    async def main():
        async with client(fleet) as c:
            samples = [await c.start_sample("echo", 0) for _ in range(4)]
            doomed.stop()
            results = await asyncio.gather(*(c.interact(s.session_id, [echo_call("x")])
                                             for s in samples))
            lost = [r for r in results if r.finish]
            assert lost and all(r.status is SampleStatus.TASK_ERROR for r in lost)
            for _ in range(4):   # new sessions all go to the survivor
                await c.start_sample("echo", 0)

    asyncio.run(main())
    fleet.wait_for(lambda: fleet.worker_record(doomed)["status"] == "dead")
    assert fleet.worker_record(survivor)["current"] == 6


def test_restart_ends_the_old_sessions_but_not_ones_the_new_process_started(make_fleet):
    import httpx
    fleet = make_fleet()
    worker = fleet.add_worker()

    async def main():
        async with client(fleet) as c:
            return (await c.start_sample("echo", 0)).session_id, \
                (await c.start_sample("echo", 0)).session_id

    old, new = asyncio.run(main())
    # As after a fast restart: the new process does not hold `old`, and has already started
    # `new` before its first heartbeat (with a new worker id) reaches the controller.
    assert httpx.post(worker.api + "/cancel", json={"session_id": old}).status_code == 200
    beat = {"name": "echo", "address": worker.api, "concurrency": 4,
            "indices": list(range(100)), "worker_id": "a-new-process"}
    assert fleet.http.post("/receive_heartbeat", json=beat).status_code == 200
    fleet.wait_for(lambda: fleet.sessions()[old]["status"] == "task error")
    assert fleet.sessions()[new]["status"] == "running"
    step = fleet.http.post("/interact", headers={"session_id": str(new)},
                           json={"messages": [echo_call("alive")]})
    assert step.status_code == 200 and step.json()["messages"][0]["content"] == "alive"
