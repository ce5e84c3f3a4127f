"""Benchmark: what the controller costs on top of talking to a task worker directly.

    python -m benchmarks.controller   # ~4 minutes; writes benchmarks/results/controller.json

One echo worker and one controller run as subprocesses (as in production); this process is the
load generator (aiohttp on uvloop, the cheapest client at hand, so that it disturbs the two
servers as little as possible on a small machine). Phases:

1. capacity and memory: open `--sessions` sessions through the controller, prove every one
   alive with an interact, and divide the controller's and worker's RSS growth by the count;
2. saturation: `--concurrent` sessions interact back to back for `--saturation-s`, straight to
   the worker and then through the controller: interacts/s and CPU per interact per process;
3. latency: `--concurrent` sessions each wait an exponential think time (what the LLM takes to
   write the next turn) before every interact, for each mean in `--think-times`; the latency
   the controller adds is p50/p99 through the controller minus p50/p99 straight to the worker
   under the same offered load, measured in alternating windows (the median over window pairs
   of the difference; pooled percentiles are reported too). The headline figure uses the
   middle think time (5 s: 1,000 episodes whose LLM turns take seconds, ~200 interacts/s).

Closed-loop saturation cannot say anything about added latency (it measures queueing: Little's
law makes it concurrency / throughput), which is why phase 3 offers a fixed load instead.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import itertools
import json
import os
import pathlib
import platform
import random
import statistics
import time

import aiohttp
import psutil
import uvloop

from environments.fleet import EnvFleet, ServerProcess

RESULT = pathlib.Path(__file__).parent / "results" / "controller.json"
ECHO = {"role": "assistant", "content": "",
        "tool_calls": [{"id": "0", "type": "function",
                        "function": {"name": "echo", "arguments": "{\"text\": \"ping\"}"}}]}
_direct_ids = itertools.count(9 * 10**15)   # far from the controller's (clock-based) ids


class Target:
    """Starts, steps and ends echo sessions, either through the controller or directly."""

    def __init__(self, http: aiohttp.ClientSession, api: str, direct: bool) -> None:
        self.http, self.api, self.direct = http, api, direct

    async def start(self) -> int:
        if self.direct:
            session_id = next(_direct_ids)
            body = {"index": 0, "session_id": session_id}
        else:
            body = {"name": "echo", "index": 0}
        async with self.http.post(self.api + "/start_sample", json=body) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"start_sample answered {response.status}")
            return int(response.headers["session_id"])

    async def interact(self, session_id: int) -> float:
        """One interact; returns its latency in seconds."""
        if self.direct:
            kwargs = {"json": {"session_id": session_id, "messages": [ECHO]}}
        else:
            kwargs = {"json": {"messages": [ECHO]}, "headers": {"session_id": str(session_id)}}
        began = time.perf_counter()
        async with self.http.post(self.api + "/interact", **kwargs) as response:
            body = await response.read()
        elapsed = time.perf_counter() - began
        if response.status != 200 or b'"running"' not in body:
            raise RuntimeError(f"interact answered {response.status}: {body[:200]!r}")
        return elapsed

    async def end_all(self) -> None:
        params = {} if self.direct else {"force": "true"}
        async with self.http.post(self.api + "/cancel_all", params=params) as response:
            await response.read()


async def bounded(jobs, limit: int) -> list:
    gate = asyncio.Semaphore(limit)

    async def run(job):
        async with gate:
            return await job

    return await asyncio.gather(*(run(job) for job in jobs))


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def rss(process: psutil.Process) -> int:
    return process.memory_info().rss


async def wait_drained(http: aiohttp.ClientSession, worker_api: str) -> None:
    while True:
        async with http.get(worker_api + "/worker_status") as response:
            if (await response.json())["current"] == 0:
                return
        await asyncio.sleep(0.2)


async def capacity(target: Target, worker_api: str, procs: dict, sessions: int) -> dict:
    await asyncio.sleep(1.0)   # let both servers settle before the baseline
    before = {name: rss(p) for name, p in procs.items()}
    began = time.perf_counter()
    ids = await bounded([target.start() for _ in range(sessions)], 64)
    open_s = time.perf_counter() - began
    after = {name: rss(p) for name, p in procs.items()}
    results = await bounded([target.interact(i) for i in ids], 256)   # each one still alive?
    kib = {name: (after[name] - before[name]) / sessions / 1024 for name in procs}
    await target.end_all()
    await wait_drained(target.http, worker_api)
    return {"max_concurrent_sessions": len(results), "sessions_attempted": sessions,
            "session_open_per_s": round(sessions / open_s, 1),
            "idle_session_kib": round(kib["controller"] + kib["worker"], 3),
            "idle_session_kib_controller": round(kib["controller"], 3),
            "idle_session_kib_worker": round(kib["worker"], 3)}


async def saturation(target: Target, worker_api: str, procs: dict, concurrent: int,
                     seconds: float) -> dict:
    ids = await bounded([target.start() for _ in range(concurrent)], 64)
    stop = time.perf_counter() + seconds
    count = 0

    async def loop(session_id: int) -> None:
        nonlocal count
        while time.perf_counter() < stop:
            await target.interact(session_id)
            count += 1

    cpu_before = {name: cpu_s(p) for name, p in procs.items()}
    began = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in ids))
    elapsed = time.perf_counter() - began
    cpu_us = {name: (cpu_s(p) - cpu_before[name]) / count * 1e6 for name, p in procs.items()}
    await target.end_all()
    await wait_drained(target.http, worker_api)
    return {"interacts_per_s": count / elapsed, "cpu_us": cpu_us}


async def paced_window(target: Target, ids: list[int], think_s: float, seconds: float,
                       rng: random.Random) -> list[float]:
    """Each session interacts after exponential think times until the window closes."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def loop(session_id: int) -> None:
        delay = rng.expovariate(1 / think_s)   # memoryless: a steady Poisson stream at once
        while stop - time.perf_counter() > delay:
            await asyncio.sleep(delay)
            latencies.append(await target.interact(session_id))
            delay = rng.expovariate(1 / think_s)

    await asyncio.gather(*(loop(i) for i in ids))
    return latencies


async def paced(direct: Target, via: Target, worker_api: str, concurrent: int, think_s: float,
                window_s: float, windows: int, seed: int) -> dict[str, dict]:
    """Alternates windows straight to the worker and through the controller.

    Interleaving exposes both paths to the same background load (this machine is shared), so
    their difference is the controller's, not a neighbour's burst.
    """
    rng = random.Random(seed)
    opened = {"direct": (direct, await bounded([direct.start() for _ in range(concurrent)], 64)),
              "controller": (via, await bounded([via.start() for _ in range(concurrent)], 64))}
    latencies: dict[str, list[list[float]]] = {"direct": [], "controller": []}
    for window in range(windows):
        order = ["direct", "controller"] if window % 2 == 0 else ["controller", "direct"]
        for path in order:
            target, ids = opened[path]
            latencies[path].append(await paced_window(target, ids, think_s, window_s, rng))
    await via.end_all()
    await direct.end_all()
    await wait_drained(direct.http, worker_api)

    def percentile_ms(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1] * 1e3

    figures = {}
    for path, per_window in latencies.items():
        pooled = [x for values in per_window for x in values]
        figures[path] = {"p50_ms": percentile_ms(pooled, 50), "p99_ms": percentile_ms(pooled, 99),
                         "interacts_per_s": len(pooled) / (window_s * windows)}
    # A neighbour's burst stalls everything for a while and lands in one window; the median of
    # the per-window-pair differences is what the controller adds, robust to that.
    for q in (50, 99):
        figures[f"added_p{q}_ms"] = statistics.median(
            percentile_ms(c, q) - percentile_ms(d, q)
            for d, c in zip(latencies["direct"], latencies["controller"], strict=True))
    return figures


def cpu_pressure() -> float:
    """% of the last 10 s in which some runnable task waited for a CPU (Linux PSI; -1: n/a).

    With the kernel's autogroup scheduling, every other busy session on a shared machine takes
    an equal share of the CPUs whatever our niceness, so this says how much of the machine the
    benchmark really had.
    """
    try:
        line = pathlib.Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return -1.0


def versions() -> dict[str, str]:
    found = {}
    for package in ("fastapi", "starlette", "uvicorn", "pydantic", "aiohttp", "httpx", "uvloop",
                    "httptools"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def machine() -> dict[str, str | int | float]:
    model = platform.processor()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"machine": platform.machine(), "processor": model, "cpu_count": os.cpu_count() or 0,
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version()}


async def run(args: argparse.Namespace, controller: ServerProcess, worker: ServerProcess) -> dict:
    procs = {"controller": psutil.Process(controller.process.pid),
             "worker": psutil.Process(worker.process.pid), "loadgen": psutil.Process()}
    def client() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=args.concurrent + 64, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=600))

    async with client() as to_controller, client() as to_worker:
        via = Target(to_controller, controller.url, direct=False)
        direct = Target(to_worker, worker.url, direct=True)
        # This machine may be shared: how loaded it was is part of the result.
        figures: dict = {"load_average_start": round(os.getloadavg()[0], 2),
                         "cpu_pressure_start": cpu_pressure(), "process_niceness": os.nice(0)}

        print(f"capacity: opening {args.sessions} sessions through the controller", flush=True)
        figures.update(await capacity(via, worker.url, procs, args.sessions))
        print(f"  {figures['max_concurrent_sessions']} alive, "
              f"{figures['idle_session_kib']:.2f} KiB per idle session", flush=True)

        print(f"saturation: {args.concurrent} sessions back to back", flush=True)
        sat_direct = await saturation(direct, worker.url, procs, args.concurrent,
                                      args.saturation_s)
        sat_via = await saturation(via, worker.url, procs, args.concurrent, args.saturation_s)
        figures.update({
            "direct_interacts_per_s": round(sat_direct["interacts_per_s"], 1),
            "controller_interacts_per_s": round(sat_via["interacts_per_s"], 1),
            "controller_vs_direct_throughput": round(
                sat_via["interacts_per_s"] / sat_direct["interacts_per_s"], 3),
            "controller_cpu_us_per_interact": round(sat_via["cpu_us"]["controller"], 1),
            "worker_cpu_us_per_interact": round(sat_direct["cpu_us"]["worker"], 1),
            "loadgen_cpu_us_per_interact": round(sat_direct["cpu_us"]["loadgen"], 1),
        })
        print(f"  direct {sat_direct['interacts_per_s']:.0f}/s, through the controller "
              f"{sat_via['interacts_per_s']:.0f}/s; controller CPU "
              f"{sat_via['cpu_us']['controller']:.0f} us per interact", flush=True)

        think_times = [float(t) for t in args.think_times.split(",")]
        for level, think in enumerate(think_times):
            print(f"latency: {args.concurrent} sessions, mean think time {think:g} s", flush=True)
            both = await paced(direct, via, worker.url, args.concurrent, think, args.window_s,
                               args.windows, seed=level)
            lat_direct, lat_via = both["direct"], both["controller"]
            tag = f"at_{args.concurrent}_think_{think:g}s"
            level_figures = {
                f"offered_interacts_per_s_{tag}": round(lat_via["interacts_per_s"], 1),
                f"direct_p50_ms_{tag}": round(lat_direct["p50_ms"], 2),
                f"direct_p99_ms_{tag}": round(lat_direct["p99_ms"], 2),
                f"controller_p50_ms_{tag}": round(lat_via["p50_ms"], 2),
                f"controller_p99_ms_{tag}": round(lat_via["p99_ms"], 2),
                f"added_latency_p50_ms_{tag}": round(both["added_p50_ms"], 2),
                f"added_latency_p99_ms_{tag}": round(both["added_p99_ms"], 2),
            }
            figures.update(level_figures)
            print("  " + ", ".join(f"{k.split('_' + tag)[0]} {v}"
                                   for k, v in level_figures.items()), flush=True)
        headline = f"at_{args.concurrent}_think_{think_times[len(think_times) // 2]:g}s"
        figures[f"added_latency_p50_ms_at_{args.concurrent}"] = \
            figures[f"added_latency_p50_ms_{headline}"]
        figures[f"added_latency_p99_ms_at_{args.concurrent}"] = \
            figures[f"added_latency_p99_ms_{headline}"]
        figures["headline_think_time_s"] = think_times[len(think_times) // 2]
        figures["load_average_end"] = round(os.getloadavg()[0], 2)
        figures["cpu_pressure_end"] = cpu_pressure()
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--concurrent", type=int, default=1_000)
    parser.add_argument("--saturation-s", type=float, default=10.0)
    parser.add_argument("--think-times", default="10,5,2",
                        help="mean seconds between a session's interacts, comma-separated")
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--windows", type=int, default=6, help="per path and think time")
    parser.add_argument("--out", type=pathlib.Path, default=RESULT)
    args = parser.parse_args()

    capacity_needed = max(args.sessions, args.concurrent) + 64
    # No reconciliation during the run: it would (rightly) cancel the sessions this benchmark
    # opens straight on the worker, which the controller has never heard of.
    with EnvFleet({"max_connections": 4096, "sync_interval_s": 3600.0}) as fleet:
        worker = fleet.add_worker("echo", concurrency=capacity_needed, heartbeat_interval=2.0,
                                  params=["rounds=1000000000", "num_samples=1"])
        fleet.wait_until(lambda ws: any(w["status"] == "alive" for w in ws.get("echo", [])))
        figures = uvloop.run(run(args, fleet.controller, worker))

    result = {**figures, "sessions_flag": args.sessions, "concurrent_flag": args.concurrent,
              "loadgen": "aiohttp+uvloop, in the benchmark process",
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), **machine(),
              **{f"version_{k}": v for k, v in versions().items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: result[k] for k in (
        "max_concurrent_sessions", f"added_latency_p99_ms_at_{args.concurrent}",
        "controller_vs_direct_throughput", "idle_session_kib")}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
