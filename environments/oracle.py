"""Plays a task's deterministic oracle through a real task worker and reports its success rate.

    python -m environments.oracle --task db --split test [--limit N] [--export demos.jsonl]
                                  [--demonstrator]

Starts `python -m environments.worker --task NAME --param split=SPLIT --port 0` as a subprocess,
plays `environments.<NAME>.oracle.Oracle` on every index of the split over the worker's HTTP API
(`/api/start_sample`, `/api/interact`), several episodes at once, prints the success rate, and
writes `benchmarks/results/oracle_NAME.json`:

    {"task": "db", "split": "test", "oracle_success": 0.996, "episodes": 260, "successes": 259,
     "failures": [{"index": 17, "status": "completed", "reward": 0.0, "reason": "..."}],
     "by_split": {"test": {...the same summary...}, "train": {...}}}

`by_split` keeps the latest summary of every split run so far, so running both splits leaves
both in the file. `--export` writes one JSON line per episode, `{"task", "index", "messages",
"tools", "reward"}` with OpenAI-format messages (the environment's and the oracle's), for
supervised warm starts.

The oracle contract (every task package has `oracle.py`):

    class Oracle:
        def __init__(self, task): ...                     # the Task instance (it may read data)
        def next_message(self, index, history) -> dict:   # next assistant message, deterministic

where `history` is every message of the episode so far, environment and assistant alike.

Demonstrations. The warm start imitates the episodes of each task's *demonstrator*
(`agentrl_jax/experiment/demonstrations.py` runs this module with `--demonstrator`): the
`Oracle`, unless the task's `oracle.py` also defines a class `Demonstrator` with the same
contract; then that one plays (`load_demonstrator`). A task uses it when what the warm start
should teach differs from what proves the task solvable, e.g. tic-tac-toe's demonstrator picks
uniformly among legal moves (the format of a move, no strategy) while its oracle is minimax.
With `--demonstrator` the results go to `benchmarks/results/demonstrator_NAME.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from agentrl_jax import episode
from agentrl_jax.controller.client import ControllerClient, ControllerRequestError
from agentrl_jax.evaluation import protocol
from environments.registry import load_task
from environments.worker.__main__ import task_params

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
_STARTUP_TIMEOUT_S = 300.0   # a worker may build or load its data before it listens
UNKNOWN = episode.SampleStatus.UNKNOWN.value   # what an episode the oracle did not finish reports


@dataclasses.dataclass
class EpisodeRecord:
    """One oracle episode: how it ended and everything that was said."""

    index: Any
    status: str
    reward: float
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    metrics: dict[str, Any]
    error: str | None = None

    @property
    def success(self) -> bool:
        """`episode.is_success`, and the oracle's driver raised nothing."""
        return episode.is_success(self.status, self.reward) and self.error is None

    def reason(self) -> str:
        if self.error:
            return self.error
        detail = {k: v for k, v in self.metrics.items() if k in ("error", "reason", "detail")}
        return f"status={self.status} reward={self.reward}" + (f" {detail}" if detail else "")


# --------------------------------------------------------------------------- worker process


@contextlib.contextmanager
def running_worker(task: str, params: dict[str, Any], concurrency: int | None = None,
                   log_path: Path | None = None) -> Iterator[str]:
    """Starts a task worker subprocess on a free port; yields its API URL (…/api)."""
    argv = [sys.executable, "-m", "environments.worker", "--task", task, "--port", "0",
            "--call-timeout", "600", "--idle-timeout", "0"]
    for key, value in params.items():
        argv += ["--param", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    stderr = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr,
                            text=True, env=env)
    try:
        url = _read_address(proc)
        _wait_until_serving(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if stderr is not subprocess.DEVNULL:
            stderr.close()


def _read_address(proc: subprocess.Popen) -> str:
    """The worker prints `listening on http://HOST:PORT/api` first; anything else is a failure."""
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with status {proc.wait()} before listening "
                               "(run it by hand, or pass --worker-log, to see why)")
        if line.startswith("listening on "):
            return line.split("listening on ", 1)[1].strip()
    raise RuntimeError("worker did not start listening in time")


def _wait_until_serving(api: str, proc: subprocess.Popen) -> None:
    """The port is bound before the server accepts connections; wait for the first answer."""
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while True:
        try:
            httpx.get(f"{api}/worker_status", timeout=10).raise_for_status()
            return
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker at {api} never answered") from None
            time.sleep(0.1)


# --------------------------------------------------------------------------- episodes


def tool_call_message(name: str, arguments: dict[str, Any] | str, content: str = "",
                      call_id: str = "0") -> dict[str, Any]:
    """An OpenAI assistant message calling one tool (`arguments` as a dict or raw JSON text).

    A dict is written as the model writes it: non-ASCII characters as themselves, not as
    `\\u` escapes. The demonstrations are this text, and a name the model can only copy from
    its context ("Chhindwāra") must appear in the call as it appears there.
    """
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": raw}}]}


def play_one(api: str, agent: Any, index: Any, session_id: int = 1,
             max_turns: int = 64, name: str | None = None) -> EpisodeRecord:
    """Plays one episode synchronously (for tests and notebooks); `name`: as for `play_all`."""
    async def run() -> EpisodeRecord:
        if name is not None:
            async with ControllerClient(api, timeout_s=900.0, start_jitter_s=0.0) as controller:
                return await play_controller_episode(controller, name, agent, index, max_turns)
        async with httpx.AsyncClient(timeout=httpx.Timeout(900.0)) as client:
            return await play_episode(client, api, agent, index, session_id, max_turns)
    return asyncio.run(run())


async def play_episode(client: httpx.AsyncClient, api: str, oracle: Any, index: Any,
                       session_id: int, max_turns: int = 64) -> EpisodeRecord:
    """Plays one episode of `oracle` against the worker at `api`; never raises."""
    async def start() -> dict[str, Any]:
        response = await client.post(f"{api}/start_sample",
                                     json={"index": index, "session_id": session_id})
        response.raise_for_status()
        return response.json()

    async def step(message: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(f"{api}/interact",
                                     json={"session_id": session_id, "messages": [message]})
        response.raise_for_status()
        return response.json()["env_out"]

    async def cancel() -> None:
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{api}/cancel", json={"session_id": session_id})

    return await _play(start, step, cancel, oracle, index, max_turns)


async def play_controller_episode(controller: ControllerClient, name: str, agent: Any,
                                  index: Any, max_turns: int = 64) -> EpisodeRecord:
    """Plays one episode of `agent` on task `name` (e.g. `os_interaction-train`) through a
    controller, as the trainer's rollouts do; never raises.

    A worker registered with a controller must be played this way: the controller cancels, on
    that worker, the sessions it did not start (`reconcile`, every `sync_interval_s`)."""
    session: list[int] = []

    async def start() -> dict[str, Any]:
        started = await controller.start_sample(name, index)
        session.append(started.session_id)
        return {"messages": started.messages, "tools": started.tools, "finish": started.finish,
                "status": started.status.value, "reward": started.reward,
                "metric": started.metrics}

    async def step(message: dict[str, Any]) -> dict[str, Any]:
        out = await controller.interact(session[0], [message])
        return {"messages": out.messages, "finish": out.finish, "status": out.status.value,
                "reward": out.reward, "metric": out.metrics}

    async def cancel() -> None:
        if session:
            with contextlib.suppress(httpx.HTTPError, ControllerRequestError):
                await controller.cancel(session[0])

    return await _play(start, step, cancel, agent, index, max_turns)


async def _play(start: Callable[[], Awaitable[dict[str, Any]]],
                step: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
                cancel: Callable[[], Awaitable[None]], oracle: Any, index: Any,
                max_turns: int) -> EpisodeRecord:
    """The episode loop: `start()` and `step(message)` answer in the worker API's `env_out`
    shape (`messages`, `finish`, `status`, `reward`, `metric`); never raises."""
    history: list[dict[str, Any]] = []
    tools = None
    try:
        out = await start()
        tools = out.get("tools")
        for _ in range(max_turns):
            history.extend(out.get("messages") or [])
            if out.get("finish"):
                return EpisodeRecord(index, out.get("status", UNKNOWN),
                                     float(out.get("reward", 0.0)), history, tools,
                                     out.get("metric") or {})
            message = oracle.next_message(index, history)
            history.append(message)
            out = await step(message)
        await cancel()
        return EpisodeRecord(index, UNKNOWN, 0.0, history, tools, {},
                             error=f"oracle did not finish within {max_turns} turns")
    except Exception as error:  # one broken episode must not end the run
        await cancel()
        return EpisodeRecord(index, UNKNOWN, 0.0, history, tools, {},
                             error=f"{type(error).__name__}: {error}")


async def play_all(api: str, oracle: Any, indices: list[Any], concurrency: int,
                   progress: bool = True, name: str | None = None) -> list[EpisodeRecord]:
    """Plays every index with at most `concurrency` episodes in flight; keeps index order.

    With `name`, `api` is a controller's and the episodes are its task `name`'s
    (`play_controller_episode`); else `api` is a worker's."""
    semaphore = asyncio.Semaphore(concurrency)
    records: list[EpisodeRecord | None] = [None] * len(indices)
    done = 0
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with contextlib.AsyncExitStack() as stack:
        if name is None:
            client = await stack.enter_async_context(
                httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits))
        else:
            controller = await stack.enter_async_context(ControllerClient(
                api, timeout_s=900.0, start_jitter_s=0.0, max_connections=concurrency + 4))

        async def one(position: int, index: Any) -> None:
            nonlocal done
            async with semaphore:
                records[position] = await (
                    play_episode(client, api, oracle, index, session_id=position + 1)
                    if name is None else
                    play_controller_episode(controller, name, oracle, index))
            done += 1
            if progress and (done % 25 == 0 or done == len(indices)):
                wins = sum(r.success for r in records if r is not None)
                print(f"  {done}/{len(indices)} episodes, {wins} successes", file=sys.stderr,
                      flush=True)

        await asyncio.gather(*(one(i, index) for i, index in enumerate(indices)))
    return [r for r in records if r is not None]


# --------------------------------------------------------------------------- reporting


def summarize(task: str, split: str, records: list[EpisodeRecord]) -> dict[str, Any]:
    successes = sum(r.success for r in records)
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {
        "task": task,
        "split": split,
        "oracle_success": successes / len(records) if records else 0.0,
        "episodes": len(records),
        "successes": successes,
        "statuses": statuses,
        "failures": [{"index": r.index, "status": r.status, "reward": r.reward,
                      "reason": r.reason()} for r in records if not r.success],
    }


def write_results(summary: dict[str, Any], path: Path) -> None:
    """Writes `summary` to `path`, keeping other splits' summaries under `by_split`."""
    by_split: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(ValueError, OSError):
            by_split = json.loads(path.read_text()).get("by_split", {})
    by_split[summary["split"]] = {k: v for k, v in summary.items() if k != "by_split"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**summary, "by_split": by_split}, indent=1) + "\n")


def export_episodes(records: list[EpisodeRecord], task_name: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps({"task": task_name, "index": r.index, "messages": r.messages,
                                "tools": r.tools, "reward": r.reward}) + "\n")


def _players(task_name: str) -> Any:
    return importlib.import_module(f"environments.{task_name.replace('-', '_')}.oracle")


def load_oracle(task_name: str, task: Any) -> Any:
    """The task's `Oracle` (the deterministic solver that proves it solvable) for `task`."""
    return _players(task_name).Oracle(task)


def load_demonstrator(task_name: str, task: Any) -> Any:
    """The player whose episodes are the warm start's demonstrations: the task's
    `Demonstrator` where its oracle.py defines one, else its `Oracle`."""
    module = _players(task_name)
    return getattr(module, "Demonstrator", module.Oracle)(task)


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m environments.oracle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, help="environment folder name, e.g. db")
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--limit", type=int, default=None, help="play only the first N indices")
    parser.add_argument("--spread", type=int, default=None, metavar="N",
                        help="play N indices spread evenly over the split (the warm start's "
                             "demonstrations: agentrl_jax.evaluation.protocol.demo_indices)")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes in flight")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="extra task constructor argument (as for the worker)")
    parser.add_argument("--export", type=Path, default=None,
                        help="write the episodes as OpenAI-format message lists (JSONL)")
    parser.add_argument("--demonstrator", action="store_true",
                        help="play the task's demonstrator (its `Demonstrator`, where oracle.py "
                             "defines one, else its `Oracle`): the warm start's player")
    parser.add_argument("--output", type=Path, default=None,
                        help="results JSON (default benchmarks/results/oracle_TASK.json, or "
                             "demonstrator_TASK.json with --demonstrator)")
    parser.add_argument("--worker-log", type=Path, default=None,
                        help="file for the worker's stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    params = {**task_params(args.param), "split": args.split}
    task = load_task(args.task, **params)
    player = "demonstrator" if args.demonstrator else "oracle"
    oracle = (load_demonstrator if args.demonstrator else load_oracle)(args.task, task)
    started = time.monotonic()
    with running_worker(args.task, params, concurrency=max(args.concurrency, 1),
                        log_path=args.worker_log) as api:
        indices = httpx.get(f"{api}/get_indices", timeout=60).json()
        if args.limit is not None:
            indices = indices[:args.limit]
        if args.spread is not None:
            indices = protocol.demo_indices(indices, args.spread)
        print(f"{task.name}: playing the {player} on {len(indices)} episodes", file=sys.stderr)
        records = asyncio.run(play_all(api, oracle, indices, args.concurrency))
    summary = summarize(args.task, args.split, records)
    summary["seconds"] = round(time.monotonic() - started, 1)
    if args.limit is not None:
        summary["limit"] = args.limit
    if args.spread is not None:
        summary["spread"] = args.spread
    if args.demonstrator:
        summary["player"] = player
    write_results(summary, args.output or RESULTS_DIR / f"{player}_{args.task}.json")
    if args.export:
        export_episodes(records, task.name, args.export)
    print(f"{task.name}: {player} success {summary['oracle_success']:.4f} "
          f"({summary['successes']}/{summary['episodes']})")
    for failure in summary["failures"][:20]:
        print(f"  failed {failure['index']}: {failure['reason']}"[:300])
    return summary


if __name__ == "__main__":
    main()
