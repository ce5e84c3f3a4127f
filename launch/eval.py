"""Evaluates a policy on each task's test split: k passes, mean ± std, how episodes ended.

    python -m launch.eval --config.checkpoint=runs/local/final_model        # an HF directory
    python -m launch.eval --config.checkpoint=smollm2-135m-instruct \
        "--config.env.tasks=('db','kg')" --config.eval.runs=3
    python -m launch.eval --config.checkpoint=runs/local --config.step=20   # an RL checkpoint
    python -m launch.eval --config.checkpoint=runs/local --config.eval.subset=validation
    python -m launch.eval --config.checkpoint=DIR --config.env.controller_url=http://host:5020/api

Settings are absl flags over an `ml_collections` config, `configs/eval.py` by default (every key
and its default are described there); `--config=FILE` chooses another. `checkpoint` is one of
  * an HF model directory (weights + tokenizer): ours (`RUN_DIR/final_model`, the cached SFT
    policy) or any Llama / Qwen2 / GLM-4 checkpoint; or a model-zoo name;
  * a run directory of `launch.local`: with `step=N`, the parameters of the RL checkpoint at
    step N (`RUN_DIR/checkpoints`) on the run's model; without, `RUN_DIR/final_model` (or, before
    RL has finished, its latest checkpoint). The run's `config.json` supplies what is left None
    (`env.tasks`, `model.parser`, `eval.per_task`, the episode limits and engine sizes), so a
    run is evaluated as it was trained.

Episodes go through `env.controller_url` (any AgentRL-compatible controller) or, by default, a
fleet started here: a controller and one sandboxed worker per task. Every episode is played by
the evaluation driver `agentrl_jax.evaluation.agentbench.evaluate`, on the indices of the
evaluation protocol (`agentrl_jax/evaluation/protocol.py`): `eval.subset=test` (default),
`eval.per_task` indices spread evenly over each task's `eval.split`; `eval.subset=validation`,
the held-out slice of the train split that RL never draws (its first `demos.per_task` indices,
the demonstrations', excluded). Each index is played `eval.runs` times at `eval.temperature`
(AgentRL: k=3, T=0.8); `out` receives `NAME.json` (per task: success and score per pass,
mean ± std, the success rate's 95% interval, termination fractions, every episode's outcome by
index; the average over tasks; the settings), `NAME.md` (the table of the AgentRL paper's
Table 7 layout) and `NAME_episodes.jsonl` (every episode's transcript, `evaluation/transcripts.py`).
Task names: `db` means the controller's `db-test` (the registry's task key,
with `eval.split=test`); a name the controller knows as it is (e.g. AgentRL's `dbbench-std`)
is used unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections
from absl import app, flags
from ml_collections import config_flags

from agentrl_jax import compile_cache
from agentrl_jax.chat.tool_parsers import get_parser
from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.controller.task_keys import task_key
from agentrl_jax.evaluation import agentbench, protocol
from agentrl_jax.evaluation.transcripts import TranscriptLog
from agentrl_jax.experiment import rl_stage
from agentrl_jax.experiment.saved_policy import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    resolve_checkpoint,
)
from agentrl_jax.rollout.record import Rollout
from environments.registry import AGENTBENCH_FC
from launch import process

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "eval.py"
FLAGS = flags.FLAGS
log = logging.getLogger("launch.eval")


def define_flags(flag_values: flags.FlagValues = FLAGS,
                 sys_argv: Sequence[str] | None = None) -> None:
    """The launcher's flag, `--config` (defined on demand, so importing this module defines
    none); `sys_argv`: the command line, when it is not `sys.argv`."""
    config_flags.DEFINE_config_file("config", str(DEFAULT_CONFIG), "evaluation configuration "
                                    "(configs/eval.py describes every key)",
                                    flag_values=flag_values,
                                    sys_argv=None if sys_argv is None else list(sys_argv))


class EvalError(ValueError):
    """A task or setting that does not exist (reported without a traceback, as a
    `CheckpointError` is)."""


# ----------------------------------------------------------------------------- environments


def start_test_fleet(tasks: Sequence[str], split: str, stack: contextlib.ExitStack, *,
                     sandbox: bool = True, concurrency: int = 64,
                     log_dir: pathlib.Path | None = None,
                     allow_root_fallback: bool = False) -> str:
    """A controller and one `split` worker per task (stopped when `stack` closes); its URL.

    Call it before JAX starts its threads (before loading a model): workers are forked.
    `allow_root_fallback`: see `environments.fleet.task_worker_placements`.
    """
    from environments.fleet import prepare_task_data, start_task_fleet

    if sandbox and log_dir is not None:
        prepare_task_data(tasks, [split], log_dir)
    print(f"environments: starting {len(tasks)} {split}-split workers"
          f"{' (sandboxed)' if sandbox else ''}" + (f"; logs in {log_dir}" if log_dir else ""))
    fleet = stack.enter_context(start_task_fleet(tasks, [split], sandbox=sandbox,
                                                 concurrency=concurrency, log_dir=log_dir,
                                                 allow_root_fallback=allow_root_fallback))
    return fleet.url


def resolve_task_names(known: Sequence[str], tasks: Sequence[str], split: str) -> list[str]:
    """Controller names of `tasks`: the name itself if the controller knows it, else its task
    key for `split` (`agentrl_jax.controller.task_keys.task_key`)."""
    names = []
    for task in tasks:
        if task in known:
            names.append(task)
            continue
        try:
            key = task_key(task, split)
        except ValueError as error:
            raise EvalError(f"the controller serves no task {task!r}, and {error}") from None
        if key not in known:
            raise EvalError(f"the controller serves no task {task!r} (nor {key}); "
                            f"it serves {sorted(known)}")
        names.append(key)
    return names


# ----------------------------------------------------------------------------- evaluation


class ErrorLog:
    """The distinct reasons of `task error` episodes, a few per task: the evaluation's own
    failures (unreachable workers, sampler errors, expired sessions), not the policy's."""

    def __init__(self, per_task: int = 5) -> None:
        self.per_task = per_task
        self.reasons: dict[str, list[str]] = {}

    def __call__(self, rollout: Rollout) -> None:
        if rollout.status not in agentbench.TERMINATIONS["task_error"]:
            return
        reason = rollout.error or str(rollout.metrics.get("error", "")) or rollout.status.value
        reasons = self.reasons.setdefault(rollout.task, [])
        if reason not in reasons and len(reasons) < self.per_task:
            reasons.append(reason)


def write_results(results: Mapping[str, agentbench.TaskResult], out: pathlib.Path,
                  settings: Mapping[str, Any], name: str = "eval",
                  task_errors: Mapping[str, list[str]] | None = None
                  ) -> tuple[pathlib.Path, str]:
    """`out/NAME.json` (agentbench's JSON plus settings and task-error reasons) and
    `out/NAME.md`; returns the JSON's path and the table."""
    table = agentbench.write(
        results, out, name,
        title=f"{name}: {settings.get('checkpoint', '')} (k={settings.get('runs')}, "
              f"T={settings.get('temperature')})",
        extra={"settings": dict(settings), "task_errors": dict(task_errors or {})})
    return out / f"{name}.json", table


def check_config(config: ml_collections.ConfigDict) -> None:
    """Refuses settings that cannot run, saying which key to set (before anything starts)."""
    if not config.checkpoint:
        raise EvalError("config.checkpoint is empty: pass --config.checkpoint=DIR (an HF model "
                        "directory, a model-zoo name or a launch.local run directory)")
    if config.eval.subset not in protocol.SUBSETS:
        raise EvalError(f"eval.subset={config.eval.subset!r}; known: "
                        f"{', '.join(protocol.SUBSETS)}")
    if config.eval.runs < 1:
        raise EvalError("eval.runs must be at least 1")
    if config.eval.per_task is not None and config.eval.per_task < 1:
        raise EvalError("eval.per_task must be at least 1")
    if config.model.parser is not None:
        try:
            get_parser(config.model.parser)
        except ValueError as error:
            raise EvalError(f"model.parser: {error}") from None


def rl_config(config: ml_collections.ConfigDict, run_config: ml_collections.ConfigDict | None
              ) -> ml_collections.ConfigDict:
    """The `rl` config section that builds the agent and the engine: the run's, or defaults,
    with the evaluation's temperature and the limits and engine sizes it sets on top."""
    rl = rl_stage.default_config()
    if run_config is not None and "rl" in run_config:
        for section in ("sampling", "limits", "engine"):
            rl[section].update(run_config.rl[section].to_dict())
    rl.sampling.temperature = config.eval.temperature
    for section in ("limits", "engine"):
        rl[section].update({key: value for key, value in config.rl[section].items()
                            if value is not None})
    # The engine must hold a whole episode: its context is the limit, rounded up to pages.
    engine = rl.engine
    pages = -(-rl.limits.max_context_tokens // engine.page_size)
    engine.max_context = max(engine.max_context, pages * engine.page_size)
    return rl


def index_selection(config: ml_collections.ConfigDict,
                    run_config: ml_collections.ConfigDict | None
                    ) -> tuple[str, Callable[[list], list], int | None]:
    """(split, index selection, indices per task) of `eval.subset` and `eval.per_task`."""
    run_eval_config = run_config.get("eval", {}) if run_config is not None else {}
    if config.eval.subset == "validation":
        reserved = int(run_config.demos.per_task) if run_config is not None else 0
        count = config.eval.per_task or int(run_eval_config.get(
            "validation_per_task", protocol.VALIDATION_PER_TASK))
        split = run_config.env.train_split if run_config is not None else "train"
        return split, protocol.selection("validation", count, reserved), count
    count = config.eval.per_task or run_eval_config.get("per_task")
    count = None if count is None else int(count)
    return config.eval.split, protocol.selection("test", count), count


def output_dir(config: ml_collections.ConfigDict, checkpoint: Checkpoint) -> pathlib.Path:
    """`out`, or RUN_DIR/eval_final or RUN_DIR/eval_step_N for a run, else runs/eval."""
    if config.out:
        out = pathlib.Path(config.out)
    elif checkpoint.run_dir is not None:
        step = "final" if checkpoint.step is None else f"step_{checkpoint.step}"
        out = checkpoint.run_dir / f"eval_{step}"
    else:
        out = pathlib.Path("runs/eval")
    return out.resolve()


def run_eval(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Everything `main` does; returns the JSON written to `out`."""
    check_config(config)
    checkpoint = resolve_checkpoint(config.checkpoint, config.step)
    run_config = checkpoint.run_config
    tasks = list(config.env.tasks or (run_config.env.tasks if run_config is not None
                                      else AGENTBENCH_FC))
    parser = config.model.parser or (run_config.model.parser if run_config is not None
                                     else "hermes")
    rl = rl_config(config, run_config)
    split, select, per_task = index_selection(config, run_config)
    out = output_dir(config, checkpoint)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = dict(
        checkpoint=checkpoint.describe(), model_dir=str(checkpoint.model_dir),
        step=checkpoint.step, tasks=tasks, split=split, subset=config.eval.subset,
        runs=config.eval.runs, temperature=config.eval.temperature, per_task=per_task,
        parser=parser, seed=config.seed, limits=rl.limits.to_dict(),
        controller_url=config.env.controller_url or "(started here)")

    started = time.monotonic()
    errors = ErrorLog()
    transcripts = TranscriptLog()
    with contextlib.ExitStack() as stack:
        url = config.env.controller_url or start_test_fleet(
            tasks, split, stack, sandbox=config.env.sandbox,
            concurrency=config.env.concurrency, log_dir=out / "logs",
            allow_root_fallback=config.env.allow_root_fallback)
        print(f"policy: {checkpoint.describe()} (parser {parser})")
        policy = load_checkpoint(checkpoint, parser)
        agent = rl_stage.agent_spec(rl, policy)
        engine = stack.enter_context(rl_stage.make_engine(rl, policy))
        from tqdm import tqdm

        bar = stack.enter_context(tqdm(desc="evaluation", unit="episode"))

        def on_start(total: int) -> None:
            bar.total = total
            bar.refresh()

        def on_episode(rollout: Rollout) -> None:
            errors(rollout)
            transcripts(rollout)
            bar.update(1)

        async def evaluate() -> dict[str, agentbench.TaskResult]:
            async with ControllerClient(url) as client:
                names = resolve_task_names(list(await client.list_workers()), tasks, split)
                return await agentbench.evaluate(
                    client, engine, agent, names, select=select, runs=config.eval.runs,
                    concurrency=config.eval.concurrency, seed=config.seed, on_start=on_start,
                    on_episode=on_episode)

        results = asyncio.run(evaluate())
    settings["seconds"] = round(time.monotonic() - started, 1)
    path, table = write_results(results, out, settings, config.name, errors.reasons)
    episodes = transcripts.write(out, config.name)
    print("\n" + table + f"\nwrote {path}, {path.with_suffix('.md')} and {episodes}")
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str]) -> None:
    process.begin(argv)
    compile_cache.enable()
    try:
        run_eval(FLAGS.config)
    except (EvalError, CheckpointError) as error:   # names nothing that exists: say so
        raise SystemExit(f"launch.eval: {error}") from None


if __name__ == "__main__":
    define_flags()
    app.run(main)
