"""Benchmark: the controller with issue #20's fault handling against the one before, same run.

    python -m benchmarks.controller_faults   # ~3 min; results/controller_faults.json

The baseline is the `agentrl_jax` package at BASELINE_COMMIT (`git archive` into a temporary
directory, run from there); ours is this tree. Both drive the same echo workers (this tree),
as subprocesses on loopback; this process is the load generator. Phases, baseline and ours
alternating:

1. CPU per interact: `--sessions` sessions interact back to back, `--interacts` in all; the
   controller process's CPU seconds divided by the count (what the added validation and the
   connection bookkeeping cost on the hot path). Median over `--rounds` rounds per variant.
2. A resetting network: two workers behind the test support's `ResettingProxy` (requests reset
   unforwarded, connections closed after replies; no fault that harms a session), 80 episodes
   of 4 turns, 12 at a time: how many healthy episodes each controller loses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import aiohttp
import httpx
import psutil

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.episode import SampleStatus
from benchmarks.machine_info import write_result
from environments.fleet import REPO_ROOT, ServerProcess, start_server, wait_ready, worker_argv

sys.path.insert(0, str(REPO_ROOT / "tests" / "controller"))
from controller_fleet import ResettingProxy, echo_call, free_port  # noqa: E402

BASELINE_COMMIT = "f46ac1b75cbaec5b5b601cb8bbb65dd1a03cb1cd"   # before issue #20's changes
CONTROLLER = dict(heartbeat_timeout_s=5.0, liveness_interval_s=0.5, probe_timeout_s=2.0,
                  sync_interval_s=3600.0)


def extract_baseline(into: pathlib.Path) -> None:
    archive = subprocess.run(["git", "archive", BASELINE_COMMIT, "agentrl_jax"], cwd=REPO_ROOT,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def start_controller(root: pathlib.Path) -> ServerProcess:
    """The controller package under `root`; run from there, so that it is the one imported."""
    argv = [sys.executable, "-m", "agentrl_jax.controller", "--port", "0"]
    for key, value in CONTROLLER.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    process = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(root)})
    return wait_ready(argv, process)


@contextlib.contextmanager
def fleet(root: pathlib.Path, workers: int, proxies: list[ResettingProxy] | None = None,
          rounds: int = 100_000):
    controller = start_controller(root)
    started = []
    try:
        for number in range(workers):
            port = free_port()
            api = f"http://127.0.0.1:{port}/api"
            address = proxies[number].forward_to(api) if proxies else api
            started.append(start_server(worker_argv(
                "echo", controller.url, port, concurrency=256, heartbeat_interval=1.0,
                self=address, params=[f"rounds={rounds}"])))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = get_json(controller.url + "/list_workers")
            if sum(w["status"] == "alive" for w in listing.get("echo", [])) == workers:
                break
            time.sleep(0.2)
        yield controller
    finally:
        for server in [*started, controller]:
            server.kill()


def get_json(url: str) -> dict:
    return httpx.get(url, timeout=10).json()


async def cpu_per_interact(url: str, process: psutil.Process, sessions: int,
                           interacts: int) -> float:
    async with aiohttp.ClientSession() as http:
        ids = []
        for _ in range(sessions):
            async with http.post(url + "/start_sample", json={"name": "echo", "index": 0}) as r:
                ids.append(int(r.headers["session_id"]))
        per_session = interacts // sessions

        async def loop(session_id: int) -> None:
            for _ in range(per_session):
                async with http.post(url + "/interact", json={"messages": [echo_call("ping")]},
                                     headers={"session_id": str(session_id)}) as response:
                    body = await response.read()
                    if response.status != 200 or b'"running"' not in body:
                        raise RuntimeError(f"interact answered {response.status}: {body!r}")

        times = process.cpu_times()
        before = times.user + times.system
        await asyncio.gather(*(loop(i) for i in ids))
        times = process.cpu_times()
        return (times.user + times.system - before) / (per_session * sessions)


async def resetting_network(url: str, episodes: int = 80) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    async with ControllerClient(url, start_jitter_s=0.0, retry_backoff_s=0.1) as client:
        gate = asyncio.Semaphore(12)

        async def episode(number: int) -> str:
            async with gate:
                try:
                    sample = await client.start_sample("echo", number % 100)
                    for turn in range(4):
                        step = await client.interact(sample.session_id,
                                                     [echo_call(f"{number}.{turn}")])
                        if step.finish:
                            return step.status.value
                    return "not finished"
                except Exception as error:   # the baseline may fail in any way: count it
                    return f"failed: {type(error).__name__}"

        for status in await asyncio.gather(*(episode(n) for n in range(episodes))):
            outcomes[status] = outcomes.get(status, 0) + 1
    return outcomes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--interacts", type=int, default=6400)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    load_start = psutil.getloadavg()[0]
    figures: dict[str, float | int | str] = {"baseline_commit": BASELINE_COMMIT}
    with tempfile.TemporaryDirectory() as baseline_dir:
        roots = {"baseline": pathlib.Path(baseline_dir), "ours": REPO_ROOT}
        extract_baseline(roots["baseline"])
        cpu: dict[str, list[float]] = {"baseline": [], "ours": []}
        for _ in range(args.rounds):
            for variant, root in roots.items():
                with fleet(root, workers=1) as controller:
                    process = psutil.Process(controller.process.pid)
                    cpu[variant].append(asyncio.run(cpu_per_interact(
                        controller.url, process, args.sessions, args.interacts)))
                print(f"{variant}: {cpu[variant][-1] * 1e6:.0f} us CPU per interact", flush=True)
        for variant in roots:
            figures[f"{variant}_controller_cpu_us_per_interact"] = round(
                statistics.median(cpu[variant]) * 1e6, 1)
        figures["cpu_per_interact_ours_vs_baseline"] = round(
            statistics.median(cpu["ours"]) / statistics.median(cpu["baseline"]), 3)

        for variant, root in roots.items():
            proxies = [ResettingProxy(drop_request=0.15, close_after=0.3, seed=s) for s in (1, 2)]
            try:
                with fleet(root, workers=2, proxies=proxies, rounds=4) as controller:
                    outcomes = asyncio.run(resetting_network(controller.url))
            finally:
                for proxy in proxies:
                    proxy.close()
            print(f"{variant}: resetting network: {outcomes}", flush=True)
            lost = sum(n for status, n in outcomes.items()
                       if status != SampleStatus.COMPLETED.value)
            figures[f"{variant}_healthy_episodes_lost_of_80_behind_resets"] = lost
            figures[f"{variant}_resets_injected"] = sum(p.counts["reset"] for p in proxies)
    figures["load_average_start"] = round(load_start, 2)
    figures["load_average_end"] = round(psutil.getloadavg()[0], 2)
    path = write_result("controller_faults", figures)
    print(f"wrote {path}")
    for key, value in sorted(figures.items()):
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
