"""Starts the environment side: one controller and task workers, each a subprocess.

    python -m launch.env_fleet --task echo=2 --task db=4 --port 5020 [--sandbox]

runs a controller on :5020 and, per `--task NAME=COUNT`, COUNT workers of NAME that register
with it; it stops them all on Ctrl-C. With `--sandbox` each worker runs in its own sandbox
(`environments/fleet.py` says how, and how the OS task's worker is placed).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time

from environments.fleet import EnvFleet, task_worker_placements


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m launch.env_fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=5020, help="controller port")
    parser.add_argument("--task", action="append", default=[], metavar="NAME=COUNT",
                        help="start COUNT workers of task NAME (repeatable)")
    parser.add_argument("--concurrency", type=int, default=None, help="per worker")
    parser.add_argument("--sandbox", action="store_true",
                        help="run each worker inside environments.sandbox")
    parser.add_argument("--allow-root-fallback", action="store_true",
                        help="where a task's bounds need host root (the OS task's overlay "
                        "root) and this launcher is not, start it with its weaker fallback "
                        "(root=seeded) instead of refusing")
    args = parser.parse_args(argv)
    settings = {} if args.concurrency is None else {"concurrency": args.concurrency}
    # SIGTERM unwinds like Ctrl-C, so that the fleet's processes are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    counts = [spec.partition("=")[::2] for spec in args.task]
    placements = task_worker_placements(sorted({name for name, _ in counts}), args.sandbox,
                                        args.allow_root_fallback)
    with EnvFleet({"port": args.port}) as fleet:
        print(f"controller {fleet.url}", flush=True)
        for name, count in counts:
            for _ in range(int(count or 1)):
                worker = fleet.add_worker(name, **placements[name], **settings)
                print(f"worker {name} {worker.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while all(s.process.poll() is None for s in [fleet.controller, *fleet.workers]):
                time.sleep(1.0)
        print("stopping", flush=True)


if __name__ == "__main__":
    main()
