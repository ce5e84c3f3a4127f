"""Out-of-process sampling workers: the wire format, the hub, and real worker processes."""

import asyncio
import os
import signal
import subprocess
import sys

import httpx
import numpy as np
import pytest

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.data import TaskStream
from agentrl_jax.episode import SampleStatus
from agentrl_jax.pipeline import runner
from agentrl_jax.pipeline.buffer import TrajectoryBuffer
from agentrl_jax.pipeline.rollout_hub import HubSettings, RolloutHub
from agentrl_jax.pipeline.sampling_worker import make_spec
from agentrl_jax.pipeline.wire_format import (
    rollout_from_json,
    rollout_to_json,
    weights_from_bytes,
    weights_to_bytes,
)
from agentrl_jax.rl import advantages
from agentrl_jax.sampling import EngineConfig
from tests.support.pipeline_stack import pipeline_configs
from tests.support.rollouts import rollout


def test_rollout_and_weights_survive_the_wire():
    r = rollout(4, 1, reward=0.5, status=SampleStatus.TASK_LIMIT_REACHED, version=3)
    back = rollout_from_json(rollout_to_json(r))
    assert (back.group_id, back.member, back.reward, back.status) == (4, 1, 0.5, r.status)
    for name in ("tokens", "loss_mask", "logprobs", "versions", "policy_ids"):
        np.testing.assert_array_equal(getattr(back, name), getattr(r, name))
    weights = {"embed": np.ones((3, 2), np.float32), "layers": {"q": np.arange(4.0)}}
    got = weights_from_bytes(weights_to_bytes(weights))
    np.testing.assert_array_equal(got["layers"]["q"], weights["layers"]["q"])


def _hub_with_buffer(group_size=2):
    """A hub whose claims open groups in a buffer, and the buffer its rollouts go to."""
    buffer = TrajectoryBuffer(group_size)
    ids = iter(range(100))

    async def claim():
        gid = next(ids)
        buffer.open_group(gid, "t")
        return gid, "t", 0

    return RolloutHub({"name": "test"}, group_size, claim=claim, deliver=buffer.add,
                      lease_timeout_s=5), buffer


def test_hub_protocol_and_bad_input():
    async def go():
        hub, buffer = _hub_with_buffer()
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.post("/claim", json={"worker_id": "w"})).status_code == 409
            await http.post("/heartbeat", json={"worker_id": "w"})
            claim = (await http.post("/claim", json={"worker_id": "w"})).json()
            assert claim == {"group_id": 0, "task": "t", "index": 0}
            # Broken bodies are refused with a clear error and change nothing.
            bad = await http.post("/rollouts", content=b"{not json")
            assert bad.status_code == 422
            bad = await http.post("/rollouts", json={"rollouts": [{"tokens": [1]}]})
            assert bad.status_code == 422 and "malformed" in bad.json()["detail"]
            assert buffer.num_pending == 1 and buffer.num_ready == 0
            good = [rollout_to_json(rollout(0, m)) for m in range(2)]
            assert (await http.post("/rollouts", json={"rollouts": good})).json() == {
                "accepted": 2}
            assert buffer.num_ready == 1
            # A duplicate delivery for a completed group is ignored, not an error.
            assert (await http.post("/rollouts", json={"rollouts": good[:1]})).status_code == 200
            assert (await http.get("/weights")).status_code == 404
            hub.publish("current", 7, {"embed": np.zeros(2, np.float32)})
            response = await http.get("/weights")
            assert response.headers["x-version"] == "7"
        await hub.stop()
    asyncio.run(go())


def test_the_hub_records_every_version_a_worker_served_and_whether_it_was_published():
    """The report holds, per worker and policy, the versions it reported serving under the
    published checksum (as runs) and those it reported under another; repeats count once."""
    async def go():
        hub, _ = _hub_with_buffer()
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            async def serve(policy_pairs):
                await http.post("/heartbeat", json={"worker_id": "w", "serving": policy_pairs})

            for version in range(4):
                hub.publish("current", version, {"x": np.full(2, version, np.float32)})
            hub.publish("stale", 0, {"x": np.zeros(2, np.float32)})
            good = {v: hub.published("current", v) for v in range(4)}
            await serve({"current": [0, good[0]], "stale": [0, hub.published("stale", 0)]})
            await serve({"current": [1, good[1]], "stale": [0, hub.published("stale", 0)]})
            await serve({"current": [1, good[1]]})  # a repeat: nothing new
            await serve({"current": [2, "forged"]})
            await serve({"current": [3, good[3]]})
            assert (await http.post("/claim", json={"worker_id": "w"})).status_code == 200
            await serve({"current": [2, "forged"]})  # refused claims, one record
            assert (await http.post("/claim", json={"worker_id": "w"})).status_code == 409
        await hub.stop()
        return hub.report()["w"]

    report = asyncio.run(go())
    assert report["verified"] == {"current": [[0, 1], [3, 3]], "stale": [[0, 0]]}
    assert report["mismatched"] == ["current v2", "current v2"]
    serving = report["serving"]["current"]
    assert serving["version"] == 2 and serving["checksum"] == "forged"
    assert serving["published"] not in (None, "forged")


def test_weights_are_serialised_once_per_downloaded_version_and_never_if_not_downloaded(
        monkeypatch):
    from agentrl_jax.pipeline import rollout_hub

    made = []

    def counting(weights):
        made.append(float(weights["x"][0]))
        return weights_to_bytes(weights)

    monkeypatch.setattr(rollout_hub, "weights_to_bytes", counting)

    async def go():
        hub, _ = _hub_with_buffer()
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            for version in range(3):  # published, nobody downloads
                hub.publish("current", version, {"x": np.full(2, version, np.float32)})
            assert made == []
            for _ in range(2):
                reply = await http.get("/weights")
                assert reply.headers["x-version"] == "2"
                assert weights_from_bytes(reply.content)["x"].tolist() == [2.0, 2.0]
            hub.publish("current", 3, {"x": np.full(2, 3, np.float32)})
            assert weights_from_bytes((await http.get("/weights")).content)["x"][0] == 3
            # Weights on a sampler's devices: published as the function that copies them out.
            hub.publish("current", 4, lambda: {"x": np.full(2, 4, np.float32)}, checksum="c4")
            reply = await http.get("/weights")
            assert reply.headers["x-checksum"] == "c4"
            assert weights_from_bytes(reply.content)["x"][0] == 4
            with pytest.raises(ValueError, match="need their checksum"):
                hub.publish("current", 5, lambda: {})
        await hub.stop()

    asyncio.run(go())
    assert made == [2.0, 3.0, 4.0]


def test_a_failing_worker_loop_ends_every_other_loop_before_serve_raises():
    """`SamplingWorker.serve`: the heartbeat fails while two claim loops are mid-episode; the
    error is raised as it was (not wrapped), and only after both loops finished ending their
    episodes (which need the controller client still open)."""
    from agentrl_jax.pipeline.sampling_worker import SamplingWorker

    ended: list[int] = []

    class Worker(SamplingWorker):
        async def _heartbeat_forever(self, hub, engine):
            await asyncio.sleep(0.05)
            raise httpx.ConnectError("hub gone")

        async def _claim_loop(self, hub, client, engine, agent, group_size):
            try:
                await asyncio.sleep(60)
            finally:  # what play_group does when cancelled: end the session, which takes time
                await asyncio.shield(asyncio.sleep(0.1))
                ended.append(group_size)

    with pytest.raises(httpx.ConnectError, match="hub gone"):
        asyncio.run(Worker("http://127.0.0.1:1/api", concurrency=2).serve(
            None, None, None, None, group_size=4))
    assert ended == [4, 4]


def test_lost_worker_groups_are_failed_not_waited_for():
    hub, buffer = _hub_with_buffer(group_size=3)
    hub._last_seen["w"] = 0.0
    group_id, _, _ = asyncio.run(hub._claim())
    from agentrl_jax.pipeline.rollout_hub import _Lease

    hub._leases[group_id] = _Lease("w", "t", 0)
    hub._deliver(rollout(group_id, 1))
    hub.reap(now=100.0)
    assert hub.lost_workers == ["w"]
    (group,) = buffer.take(current_version=0).groups
    assert [r.status for r in group] == [SampleStatus.TASK_ERROR, SampleStatus.COMPLETED,
                                         SampleStatus.TASK_ERROR]
    assert not group[0].trainable and not group[2].trainable


def test_a_worker_whose_rollouts_keep_failing_is_dropped_from_admission():
    hub, buffer = _hub_with_buffer(group_size=2)
    from agentrl_jax.pipeline.rollout_hub import _Lease

    hub.failed_groups_to_drop = 2
    hub._last_seen.update(bad=0.0, good=0.0)

    def play(worker: str, trainable: bool) -> None:
        group_id, _, _ = asyncio.run(hub._claim())
        hub._leases[group_id] = _Lease(worker, "t", 0)
        for m in range(2):
            hub._deliver(rollout(group_id, m) if trainable else
                         rollout(group_id, m, status=SampleStatus.TASK_ERROR, sampled=0))

    play("bad", False)
    play("bad", True)    # a good group resets the count
    play("bad", False)
    play("good", True)
    assert hub.dropped_workers == []
    play("bad", False)
    assert hub.dropped_workers == ["bad"]

    async def claim(worker: str) -> int:
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            await http.post("/heartbeat", json={"worker_id": worker})
            status = (await http.post("/claim", json={"worker_id": worker})).status_code
        await hub.stop()
        return status

    assert asyncio.run(claim("bad")) == 403
    # The last admitted worker is kept however it fails (the environments are suspect then).
    hub._last_seen.pop("bad")
    for _ in range(3):
        play("good", False)
    assert hub.dropped_workers == ["bad"]


def test_a_dropped_worker_is_readmitted_when_every_admitted_worker_is_lost():
    hub, _ = _hub_with_buffer(group_size=2)
    hub.dropped_workers.append("bad")

    async def claims() -> list[int]:
        url = await hub.start()
        async with httpx.AsyncClient(base_url=url) as http:
            statuses = []
            for alive in (["bad", "good"], ["bad"]):
                for worker in alive:
                    await http.post("/heartbeat", json={"worker_id": worker})
                statuses.append((await http.post("/claim", json={"worker_id": "bad"})
                                 ).status_code)
                hub.reap(now=hub._last_seen["bad"] + 2 * hub.lease_timeout_s)  # all lost
        await hub.stop()
        return statuses

    assert asyncio.run(claims()) == [403, 200]
    assert hub.dropped_workers == []


def _spawn_worker(hub_url, worker_id, log_dir):
    """A worker process logging to `log_dir/<worker_id>.log` (shown if the test fails)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_dir / f"{worker_id}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agentrl_jax.pipeline.sampling_worker", "--hub", hub_url,
             "--concurrency", "2", "--worker-id", worker_id],
            env=env, stdout=log, stderr=subprocess.STDOUT)


def test_worker_processes_train_and_survive_a_kill(stack, fleet, tokenizer, tmp_path):
    engine, trainer = stack
    pcfg, agent = pipeline_configs(tokenizer, "async", steps=5, max_staleness=1)
    pcfg.rollout_workers = 0  # every rollout comes from the worker processes
    spec = make_spec(trainer.model(trainer.init_state(0).params).cfg, "smollm2-135m-instruct",
                     fleet.url, EngineConfig(max_batch=8, page_size=16, num_pages=256,
                                             max_context=512, prefill_buckets=(256,),
                                             context_buckets=(512,), batch_buckets=(8,),
                                             steps_per_sync=4), agent)
    # Generous: on a loaded 2-core machine a busy worker can miss a few seconds of beats.
    settings = HubSettings(spec, lease_timeout_s=10.0)
    reports, procs, hub = [], {}, None

    async def on_step(report):
        reports.append(report)
        if report.step == 2:  # kill one worker mid-run, start a replacement
            procs["a"].send_signal(signal.SIGKILL)
            procs["c"] = _spawn_worker(hub_url, "c", tmp_path)
        if report.step == 3:
            # Once the hub has written off the killed worker and the replacement is up, kill
            # the other original too: the remaining steps can only come from the replacement.
            for _ in range(1200):
                if "c" in hub._last_seen and "a" in hub.lost_workers:
                    break
                await asyncio.sleep(0.1)
            procs["b"].send_signal(signal.SIGKILL)

    async def go():
        nonlocal hub_url, hub
        async with ControllerClient(fleet.url, start_jitter_s=0) as client:
            stream = TaskStream({"echo": await client.get_indices("echo")}, seed=0)
            pipeline = runner.RLPipeline(
                pcfg, client=client, engine=None, trainer=trainer, agent=agent, stream=stream,
                adv_config=advantages.default_config(), on_step=on_step,
                hub=RolloutHub.of(settings, pcfg.group_size))
            hub = pipeline.hub
            hub_url = await hub.start()
            for worker in "ab":
                procs[worker] = _spawn_worker(hub_url, worker, tmp_path)
            state = await asyncio.wait_for(pipeline.run(trainer.init_state(0)), 300)  # ~50 s
        await hub.stop()
        return state

    hub_url = None
    try:
        state = asyncio.run(go())
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        for log in sorted(tmp_path.glob("*.log")):  # pytest shows this only on failure
            tail = log.read_bytes()[-4096:].decode(errors="replace")
            print(f"--- worker {log.stem} (last 4 KB) ---\n{tail}")
        print("hub:", hub and hub.report(), "lost:", hub and hub.lost_workers)
    assert int(state.step) == 5 and [r.step for r in reports] == [1, 2, 3, 4, 5]
    assert "a" in hub.lost_workers
    assert hub.claims_by_worker.get("c", 0) > 0  # the replacement joined and got work
    trained = [r for rep in reports for r in rep.rollouts]
    # The killed worker's unfinished episodes arrived only as failed, untrainable members.
    lost = [r for r in trained if r.error and "lost" in r.error]
    assert all(not r.trainable for r in lost)
    assert sum(r.trainable for r in trained) >= 5 * pcfg.groups_per_step * pcfg.group_size // 2
    # Tokens were sampled by the remote engines at recent weight versions.
    versions = np.concatenate([r.versions[r.loss_mask > 0] for r in trained if r.trainable])
    assert versions.max() >= 2
