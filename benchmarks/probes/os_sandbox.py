"""Benchmark: what the OS machines' bounds cost and what they hold back (issue #16, item 3).

    sudo .venv/bin/python -m benchmarks.probes.os_sandbox   # ~1 min; results/os_sandbox.json

Runs as host root with the default image (scripts/setup.sh). In the same run, baseline and ours:
  * CPU: a machine runs 4 busy loops for `SPIN_S` seconds; the CPU-seconds they got, without a
    quota (baseline) and with `cpus=0.5`; the headline `cpu_share_ratio` is ours / baseline;
  * a neighbour: while one machine spins, another machine runs 20 `echo`s; the mean round trip
    with the spinner unbounded and bounded, and their ratio;
  * start-up: the mean time to start a machine and run its first command, with the seeded root
    (the image read-only, writable copies of /etc, /var, ...) and with the copy-on-write overlay;
    and the overlay's where the main job's fleet runs the OS worker: a process of its own in a
    private mount namespace (`environments.fleet.PRIVATE_MOUNTS`, `task_worker_placements`).
Figures on a shared machine are only meaningful as same-run ratios; the load is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine_info import RESULTS_DIR, machine_info
from environments.fleet import PRIVATE_MOUNTS, REPO_ROOT
from environments.os_interaction.machine import COMMAND_TIMEOUT_S, Machine, MachineSpec
from environments.sandbox import Limits

IMAGE = str(Path(os.environ.get("AGENTRL_ROOTFS_CACHE", "/var/cache/agentrl_jax/rootfs"))
            / "default")
SPIN_S = 4
SPIN = (f"python3 -c 'import os, time\nfor _ in range(4):\n if os.fork() == 0:\n"
        f"  end = time.time() + {SPIN_S}\n  while time.time() < end: pass\n  os._exit(0)\n"
        "for _ in range(4): os.wait()\nt = os.times(); print(t.children_user + t.children_system)'")


def spec(root: str, cpus: float | None) -> MachineSpec:
    limits = Limits(timeout_s=COMMAND_TIMEOUT_S, cpus=cpus)
    return MachineSpec(image=IMAGE, root=root, scratch_dir="/dev/shm/agentrl_os_bench",
                       limits=limits)


async def spin_and_probe(cpus: float | None, probes: int = 20) -> tuple[float, float]:
    """(CPU-seconds the spinner got, mean echo round trip of a neighbour, s)."""
    spinner, neighbour = (await Machine.start(spec("overlay", cpus)),
                          await Machine.start(spec("overlay", None)))
    try:
        spin = asyncio.create_task(spinner.run(SPIN))
        await asyncio.sleep(0.5)
        start = time.perf_counter()
        for _ in range(probes):
            await neighbour.run("echo hi")
        probe = (time.perf_counter() - start) / probes
        output, _ = await spin
        return float(output.split()[-1]), probe
    finally:
        await spinner.close()
        await neighbour.close()


async def start_time(root: str, n: int = 5) -> float:
    start = time.perf_counter()
    for _ in range(n):
        machine = await Machine.start(spec(root, None))
        await machine.run("true")
        await machine.close()
    return (time.perf_counter() - start) / n


def start_time_in_fleet_placement(root: str) -> float:
    """`start_time(root)` in a process placed as the main job's fleet places the OS worker."""
    done = subprocess.run([*PRIVATE_MOUNTS, sys.executable, "-m", "benchmarks.probes.os_sandbox",
                           "--start-time", root], cwd=REPO_ROOT, check=True,
                          capture_output=True, text=True)
    return float(done.stdout.split()[-1])


async def measure() -> dict[str, float]:
    free_cpu, free_probe = await spin_and_probe(None)
    bounded_cpu, bounded_probe = await spin_and_probe(0.5)
    seeded, overlay = await start_time("seeded"), await start_time("overlay")
    in_fleet = start_time_in_fleet_placement("overlay")
    return {
        "spin_cpu_seconds_baseline": round(free_cpu, 3),
        "spin_cpu_seconds_ours": round(bounded_cpu, 3),
        "cpu_share_ratio": round(bounded_cpu / free_cpu, 3),
        "cpu_quota_over_baseline": round(0.5 * SPIN_S / free_cpu, 3),   # >1: the host gave less
        "neighbour_echo_ms_baseline": round(free_probe * 1e3, 2),
        "neighbour_echo_ms_ours": round(bounded_probe * 1e3, 2),
        "neighbour_echo_ratio": round(bounded_probe / free_probe, 3),
        "machine_start_s_seeded": round(seeded, 3),
        "machine_start_s_overlay": round(overlay, 3),
        "machine_start_ratio": round(overlay / seeded, 3),
        "machine_start_s_overlay_fleet_placement": round(in_fleet, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "os_sandbox.json")
    parser.add_argument("--start-time", choices=("seeded", "overlay"), default=None,
                        help="only print the mean machine start time with this root")
    args = parser.parse_args()
    if args.start_time is not None:
        print(asyncio.run(start_time(args.start_time)))
        return
    load = os.getloadavg()[0]
    figures = asyncio.run(measure())
    result = {**figures, "load_1min_before": round(load, 2),
              "load_1min_after": round(os.getloadavg()[0], 2), **machine_info(),
              "limits_default": json.dumps(dataclasses.asdict(Limits()))}
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
