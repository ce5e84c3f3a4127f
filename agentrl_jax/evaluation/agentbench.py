"""Evaluation on the AgentBench-FC tasks through any AgentRL-compatible controller.

For each task, `runs` passes over its test indices (temperature sampling, so passes differ):

    success_r = mean over indices of [status == completed and reward >= 1]    (pass r)
    score_r   = mean over indices of reward                 (WebShop's reward is fractional)
    report    mean ± std over r of success_r and score_r, per task and averaged over tasks

plus how episodes ended (the AgentRL paper's Table 7): completed, task limit reached (turn
limit), invalid action (including failed tool-call validation), context limit, task error,
and a 95% interval of the success rate (`intervals.wilson` over all episodes). Every episode's
outcome is kept by index, so that two evaluations of the same indices (before and after RL)
give a paired difference (`paired_comparison`).

`evaluate` is the one evaluation driver (`launch.local`, `launch.tpu_pod` and `launch.eval`
call it): which indices it plays is the protocol's (`evaluation.protocol.selection`). Episodes
are played by the same `rollout.run_episode` as training, so evaluation sees exactly the
training-time prompt, parser and limits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agentrl_jax import episode
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.episode import SampleIndex, SampleStatus
from agentrl_jax.evaluation import intervals
from agentrl_jax.rollout.agent_loop import AgentSpec, Generator, run_episode
from agentrl_jax.rollout.record import Rollout

# Table 7's columns; validation failures count as invalid actions, as in the paper, and the ends
# training masks (not the agent's doing, `episode.MASKED_STATUSES`) are the task errors.
TERMINATIONS = {
    "completed": (SampleStatus.COMPLETED,),
    "task_limit_reached": (SampleStatus.TASK_LIMIT_REACHED,),
    "invalid_action": (SampleStatus.AGENT_INVALID_ACTION, SampleStatus.AGENT_VALIDATION_FAILED),
    "context_limit": (SampleStatus.AGENT_CONTEXT_LIMIT,),
    "task_error": tuple(sorted(episode.MASKED_STATUSES)),
}


@dataclasses.dataclass
class TaskResult:
    task: str
    episodes: int
    success_per_run: list[float]
    score_per_run: list[float]
    terminations: dict[str, float]  # fraction of all episodes of the task
    # One per episode: {"index", "run", "success" (0/1), "score", "status"}.
    outcomes: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def success_interval(self) -> intervals.Interval:
        """Wilson's 95% interval of the success rate over every episode of every pass."""
        return intervals.wilson(sum(int(o["success"]) for o in self.outcomes), len(self.outcomes))

    @property
    def success_mean(self) -> float:
        return float(np.mean(self.success_per_run))

    @property
    def success_std(self) -> float:
        return float(np.std(self.success_per_run))

    @property
    def score_mean(self) -> float:
        return float(np.mean(self.score_per_run))

    @property
    def score_std(self) -> float:
        return float(np.std(self.score_per_run))


def summarize_task(task: str, runs: Sequence[Sequence[Rollout]]) -> TaskResult:
    """One task's result from its episodes, grouped by pass."""
    episodes = [r for run in runs for r in run]
    passed = [[episode.is_success(r.status, r.reward) for r in run] for run in runs]
    terminations = {
        name: float(np.mean([r.status in statuses for r in episodes])) if episodes else 0.0
        for name, statuses in TERMINATIONS.items()
    }
    return TaskResult(
        task=task,
        episodes=len(episodes),
        success_per_run=[float(np.mean(run)) if run else 0.0 for run in passed],
        score_per_run=[float(np.mean([r.reward for r in run])) if run else 0.0 for run in runs],
        terminations=terminations,
        outcomes=[{"index": r.index, "run": k, "success": int(ok),
                   "score": float(r.reward), "status": str(r.status)}
                  for k, run in enumerate(runs) for r, ok in zip(run, passed[k], strict=True)],
    )


async def evaluate(
    client: ControllerClient,
    generator: Generator,
    agent: AgentSpec,
    tasks: Sequence[str],
    *,
    select: Callable[[list[SampleIndex]], list[SampleIndex]] | None = None,
    runs: int = 1,
    concurrency: int = 32,
    seed: int = 0,
    on_start: Callable[[int], None] | None = None,
    on_episode: Callable[[Rollout], None] | None = None,
    finished: Sequence[Rollout] = (),
) -> dict[str, TaskResult]:
    """The evaluation of every launcher: each controller task of `tasks` (its name there,
    e.g. `db-test`) on `select(its indices)` (default: all of them), `runs` passes; results
    keyed by task name.

    `select` is the protocol's (`protocol.selection`), so every launcher evaluates the same
    indices for the same settings. `on_start(total_episodes)` is called once the indices are
    known (for a progress bar), `on_episode(rollout)` after each episode played. `finished`:
    episodes an interrupted pass of this same evaluation played (`transcripts.TranscriptLog`'s
    journal), counted as they are and not played again.
    """
    task_indices = {}
    for task in tasks:
        indices = list(await client.get_indices(task))
        task_indices[task] = indices if select is None else select(indices)
    if on_start is not None:
        on_start(runs * sum(map(len, task_indices.values())))
    return await play(client, generator, agent, task_indices, runs=runs,
                      concurrency=concurrency, seed=seed, on_episode=on_episode,
                      finished=finished)


def round_robin(task_indices: Mapping[str, Sequence[SampleIndex]]
                ) -> list[tuple[str, SampleIndex]]:
    """Every (task, index), one index of each task in turn (tasks sorted, each in its order).

    Queued so, the episodes in flight mix the tasks: queued task by task, the first ones were
    all one task's, and 32 of ALFWorld's ~3k-token contexts overflowed the sampler's KV pool,
    which then re-prefilled evicted contexts every turn (docs/warm_start.md).
    """
    tasks = sorted(task_indices)
    longest = max((len(task_indices[t]) for t in tasks), default=0)
    return [(t, task_indices[t][i]) for i in range(longest) for t in tasks
            if i < len(task_indices[t])]


async def play(
    client: ControllerClient,
    generator: Generator,
    agent: AgentSpec,
    task_indices: Mapping[str, Sequence[SampleIndex]],
    *,
    runs: int = 1,
    concurrency: int = 32,
    seed: int = 0,
    on_episode: Callable[[Rollout], None] | None = None,
    finished: Sequence[Rollout] = (),
) -> dict[str, TaskResult]:
    """Plays every (task, index) `runs` times, `concurrency` episodes at once, but for those in
    `finished` (by task, pass and index), which are taken as they are."""
    limit = asyncio.Semaphore(concurrency)
    rng = random.Random(seed)
    jobs = [(task, run, index, rng.getrandbits(32))   # every seed drawn, played or not
            for run in range(runs) for task, index in round_robin(task_indices)]
    order = {(task, run, repr(index)): k for k, (task, run, index, _) in enumerate(jobs)}
    kept = {(r.task, r.group_id, repr(r.index)): r for r in finished
            if (r.task, r.group_id, repr(r.index)) in order}
    jobs = [job for job in jobs if (job[0], job[1], repr(job[2])) not in kept]

    async def play(task: str, run: int, index: SampleIndex, episode_seed: int):
        async with limit:
            rollout = await run_episode(client, generator, agent, task, index,
                                        group_id=run, rng=random.Random(episode_seed))
        if on_episode is not None:
            on_episode(rollout)
        return task, run, rollout

    async with asyncio.TaskGroup() as playing:  # waits for every episode, even cancelled
        tasks = [playing.create_task(play(*job)) for job in jobs]
    played = [task.result() for task in tasks]
    played += [(task, run, rollout) for (task, run, _), rollout in kept.items()]
    played.sort(key=lambda p: order[(p[0], p[1], repr(p[2].index))])   # as if played in one go
    results = {}
    for task in sorted(task_indices):
        per_run = [[r for t, k, r in played if t == task and k == run] for run in range(runs)]
        results[task] = summarize_task(task, per_run)
    return results


def average(results: Mapping[str, TaskResult]) -> dict[str, float]:
    """The unweighted average over tasks (every task counts the same, as in AgentBench)."""
    return {
        "success_mean": float(np.mean([r.success_mean for r in results.values()])),
        "score_mean": float(np.mean([r.score_mean for r in results.values()])),
    }


def to_json(results: Mapping[str, TaskResult]) -> dict[str, Any]:
    out: dict[str, Any] = {"average": average(results), "tasks": {}}
    for task, r in results.items():
        out["tasks"][task] = {
            **dataclasses.asdict(r),
            "success_mean": r.success_mean, "success_std": r.success_std,
            "score_mean": r.score_mean, "score_std": r.score_std,
            "success_interval": r.success_interval.to_json(),
        }
    return out


def success_by_index(task_json: Mapping[str, Any]) -> dict[str, float]:
    """Index (as its JSON text) -> success rate over the passes, from a task of `to_json`."""
    by_index: dict[str, list[int]] = {}
    for outcome in task_json["outcomes"]:
        by_index.setdefault(json.dumps(outcome["index"]), []).append(int(outcome["success"]))
    return {index: float(np.mean(values)) for index, values in by_index.items()}


def paired_comparison(before: Mapping[str, Mapping[str, Any]],
                      after: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """After minus before on the same indices: per task and the mean over tasks, with 95%
    intervals (`intervals`); `before`/`after` are the `tasks` parts of two `to_json` records.

    Returns {"tasks": {task: Interval JSON}, "mean": Interval JSON,
             "significant": whether the mean's interval excludes 0}.
    """
    if set(before) != set(after):
        raise ValueError(f"before and after evaluated different tasks: {sorted(before)} vs "
                         f"{sorted(after)}")
    diffs = {task: intervals.paired_differences(success_by_index(before[task]),
                                                success_by_index(after[task]))
             for task in sorted(after)}
    mean = intervals.mean_of_task_means(list(diffs.values()))
    return {"tasks": {task: intervals.mean_interval(d).to_json() for task, d in diffs.items()},
            "mean": mean.to_json(), "significant": mean.excludes_zero()}


def format_interval(interval: Mapping[str, Any], scale: float = 100.0) -> str:
    """`[low, high]` in percent, or `[–]` when undefined (fewer than two observations)."""
    if interval.get("low") is None or interval.get("high") is None:
        return "[–]"
    return f"[{scale * interval['low']:.1f}, {scale * interval['high']:.1f}]"


def to_markdown(results: Mapping[str, TaskResult], title: str | None = None) -> str:
    """A table: success and score (mean ± std over passes) and how episodes ended."""
    cols = list(TERMINATIONS)
    lines = [f"### {title}", ""] if title else []
    lines += ["| task | episodes | success | score | success 95% CI | " + " | ".join(cols) + " |",
              "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for task, r in results.items():
        ends = " | ".join(f"{100 * r.terminations[c]:.0f}%" for c in cols)
        lines.append(f"| {task} | {r.episodes} | {100 * r.success_mean:.1f} ± "
                     f"{100 * r.success_std:.1f} | {100 * r.score_mean:.1f} ± "
                     f"{100 * r.score_std:.1f} | "
                     f"{format_interval(r.success_interval.to_json())} | {ends} |")
    avg = average(results)
    lines.append(f"| **average** | | {100 * avg['success_mean']:.1f} | "
                 f"{100 * avg['score_mean']:.1f} | | " + " | ".join("" for _ in cols) + " |")
    return "\n".join(lines) + "\n"


def write(results: Mapping[str, TaskResult], directory: str | pathlib.Path, name: str, *,
          title: str | None = None, extra: Mapping[str, Any] | None = None) -> str:
    """`name.json` (`to_json`, plus the fields of `extra`) and `name.md` (the table titled
    `title`, default `name`) in `directory`; returns the table."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    record = {**to_json(results), **(extra or {})}
    table = to_markdown(results, title=name if title is None else title)
    tmp = directory / f"{name}.json.tmp"   # whole or absent: a resumed run reads it
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    tmp.replace(directory / f"{name}.json")
    (directory / f"{name}.md").write_text(table)
    return table
