"""The evaluation stages of a run: the test subset (and the validation slice) before and after
RL, written to the run's directory, and the copy probe of the policy at each checkpoint.

Every episode is played by `evaluation.agentbench.evaluate` on the indices of the evaluation
protocol (`evaluation/protocol.py`) at the evaluation's sampling settings (`eval.sampling` of
the resolved config, `experiment/run_config.py`). `OUT/NAME.json` and `OUT/NAME.md` hold the
results, `OUT/NAME_episodes.jsonl` the transcripts, and, where the run played demonstrations,
`OUT/NAME_first_calls.json` how the first calls compare with the oracle's.

While it runs, each finished episode is journaled in `OUT/NAME_journal.jsonl`, so a stopped
evaluation (on a 2-core CPU one takes most of an hour) resumes with the episodes it had played,
when the run's config is the same (`journal_key`); the journal goes once the results are
written.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import ml_collections
from tqdm import tqdm

from agentrl_jax import stage_clock
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.task_keys import parse_task_key, task_key
from agentrl_jax.evaluation import agentbench, copy_probe, first_call, protocol
from agentrl_jax.evaluation.transcripts import TranscriptLog, finished_rollouts
from agentrl_jax.experiment import report, rl_stage
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.experiment.policy import Policy
from agentrl_jax.sft import demos as demos_lib


def evaluated_tasks(config: ml_collections.ConfigDict, subset: str) -> list[str]:
    """The controller tasks `subset` evaluates: `eval.tasks` (default every served task) on
    the test split for "test", on the train split (its validation slice) for "validation"."""
    split = config.env.test_split if subset == "test" else config.env.train_split
    return [task_key(task, split) for task in config.eval.get("tasks") or config.env.tasks]


def _task_of(key: str) -> str:
    return parse_task_key(key).task


async def evaluate(config: ml_collections.ConfigDict, policy: Policy, engine: Any,
                   client: ControllerClient, name: str, out: pathlib.Path, *,
                   subset: str = "test", demo_files: Sequence[str | pathlib.Path] = (),
                   metrics: MetricsLog | None = None, step: int = 0) -> dict[str, Any]:
    """Plays `subset` (`eval.per_task` test indices, or `eval.validation_per_task` held-out
    train indices past the `demos.per_task` demonstrations') with the sampler `engine` already
    serving `policy`; writes the results under `out` as `NAME.*`, and their averages to
    `metrics` under `name` at `step`; returns agentbench's JSON of them."""
    per_task = (config.eval.per_task if subset == "test"
                else config.eval.get("validation_per_task"))
    demos = config.get("demos")
    agent = rl_stage.agent_spec(config.rl, policy, sampling=config.eval.sampling)
    bar = tqdm(desc=name, unit="episode")
    journal = out / f"{name}_journal.jsonl"
    transcripts = TranscriptLog(journal, journal_key(config, name, subset, step))
    finished = finished_rollouts(transcripts.resume())

    def on_start(total: int) -> None:
        bar.total = total
        bar.update(len(finished))
        bar.refresh()

    def on_episode(rollout) -> None:
        with stage_clock.span("eval_bookkeeping"):
            bar.update(1)
            transcripts(rollout)

    results = await agentbench.evaluate(
        client, engine, agent, evaluated_tasks(config, subset),
        select=protocol.selection(subset, per_task,
                                  reserved=demos.per_task if demos is not None else 0),
        runs=config.eval.runs, concurrency=config.eval.concurrency, seed=config.seed,
        on_start=on_start, on_episode=on_episode, finished=finished)
    bar.close()
    with stage_clock.span("eval_bookkeeping"):
        print(agentbench.write(results, out, name), flush=True)
        transcripts.write(out, name)
        journal.unlink(missing_ok=True)   # the results and transcripts hold it all now
        if demo_files:
            write_first_calls(out, name, transcripts.episodes, demo_files)
        if metrics is not None:
            metrics.write(name, step, {**agentbench.average(results),
                                       **{f"{t}/success": r.success_mean
                                          for t, r in results.items()}})
        return agentbench.to_json(results)


def journal_key(config: ml_collections.ConfigDict, name: str, subset: str, step: int) -> str:
    """What an evaluation's journal is a journal of: the run's whole config (its policy and
    every setting), the evaluation's name, subset and RL step."""
    material = json.dumps([config.to_json(sort_keys=True), name, subset, step])
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def write_first_calls(out: pathlib.Path, name: str, episodes: list[dict[str, Any]],
                      demo_files: Sequence[str | pathlib.Path]) -> None:
    """OUT/NAME_first_calls.json: per task, the first calls' format, whether they start as
    the oracle does, and the copy rate of the arguments (`evaluation.first_call.summarize`)."""
    demos = demos_lib.read_demos(demo_files)
    tools, first_tools = first_call.demo_tools(demos, _task_of)
    summary = first_call.summarize(episodes, tools, first_tools, _task_of)
    (out / f"{name}_first_calls.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(report.first_call_table(name, summary))


def probe_copying(model: Any, tokenizer: Any) -> dict[str, float]:
    """The copy probe of `model` (evaluation/copy_probe.py) over its tokenizer's ordinary
    tokens."""
    high = min(len(tokenizer), model.cfg.vocab_size)
    low, _ = copy_probe.probe_vocab(high, set(tokenizer.all_special_ids))
    return copy_probe.run_probe(model, (low, high))


class CopyProbeRecord:
    """RUN_DIR/copy_probe.json: the copy probe after the warm start and at each RL checkpoint
    (`{"warm_start": {...}, "rl_step_10": {...}}`), each entry written once."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def entries(self) -> dict[str, dict[str, float]]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def add(self, name: str, figures: dict[str, float]) -> None:
        entries = {**self.entries(), name: figures}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1) + "\n")
        tmp.replace(self.path)
        print(f"copy probe ({name}): NLL {figures['copy_probe_nll']:.3f} on random-token "
              f"repeats (ln V = {figures['copy_probe_ln_v']:.2f})")
