"""Evaluates a policy on each task's test split: k passes, mean ± std, how episodes ended.

    python -m launch.eval --checkpoint runs/local/final_model          # an HF directory
    python -m launch.eval --checkpoint smollm2-135m-instruct --tasks db,kg --runs 3
    python -m launch.eval --checkpoint runs/local --step 20            # an RL checkpoint of a run
    python -m launch.eval --checkpoint runs/local --subset validation  # held-out train indices
    python -m launch.eval --checkpoint DIR --controller_url http://host:5020/api   # any fleet

`--checkpoint` is one of
  * an HF model directory (weights + tokenizer): ours (`RUN_DIR/final_model`, the cached SFT
    policy) or any Llama / Qwen2 / GLM-4 checkpoint; or a model-zoo name;
  * a run directory of `launch.local`: with `--step N`, the parameters of the RL checkpoint at
    step N (`RUN_DIR/checkpoints`) on the run's model; without, `RUN_DIR/final_model` (or, before
    RL has finished, its latest checkpoint). The run's `config.json` supplies the defaults of
    `--tasks`, `--parser` and the episode limits, so a run is evaluated as it was trained.

Episodes go through `--controller_url` (any AgentRL-compatible controller) or, by default, a
fleet started here: a controller and one sandboxed worker per task. Which indices is the
evaluation protocol's (`agentrl_jax/evaluation/protocol.py`): `--subset test` (default),
`--per_task` indices spread evenly over each task's `--split`; `--subset validation`, the
held-out slice of the train split that RL never draws (its first `demos.per_task` indices,
the demonstrations', excluded). A run directory's config supplies `--per_task` (`eval.per_task`
or `eval.validation_per_task`). Each index is played `--runs` times at `--temperature`
(AgentRL: k=3, T=0.8); `--out` receives `eval.json` (per task: success and score per pass,
mean ± std, the success rate's 95% interval, termination fractions, every episode's outcome by
index; the average over tasks; the settings) and `eval.md` (the table of the
AgentRL paper's Table 7 layout). Task names: `db` means the controller's `db-test` (with
`--split test`); a name the controller knows as it is (e.g. AgentRL's `dbbench-std`) is used
unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_collections

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.evaluation import agentbench, protocol
from agentrl_jax.experiment import policy as policy_lib
from agentrl_jax.experiment import rl_stage
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits, Generator
from agentrl_jax.rollout.record import Rollout

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_TASKS = ("alfworld", "db", "kg", "os_interaction", "webshop")
log = logging.getLogger("launch.eval")


class EvalError(ValueError):
    """A checkpoint, step or task that does not exist (reported without a traceback)."""


# ----------------------------------------------------------------------------- what is evaluated


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where the evaluated policy comes from.

    Attributes:
      model_dir: HF directory giving architecture and tokenizer (and the weights, unless `step`).
      step: RL checkpoint step whose parameters replace the directory's weights, or None.
      run_dir: the `launch.local` run directory, when `--checkpoint` named one.
      run_config: that run's config (`RUN_DIR/config.json`), or None.
    """

    model_dir: pathlib.Path
    step: int | None = None
    run_dir: pathlib.Path | None = None
    run_config: ml_collections.ConfigDict | None = None

    def describe(self) -> str:
        if self.run_dir is None:
            return str(self.model_dir)
        return f"{self.run_dir} step {self.step}" if self.step is not None else str(self.model_dir)


def is_run_dir(path: pathlib.Path) -> bool:
    return (path / "stages.json").is_file() or (path / "checkpoints").is_dir()


def checkpoint_steps(run_dir: pathlib.Path) -> list[int]:
    """The RL checkpoint steps saved in `run_dir/checkpoints` (Orbax's step folders)."""
    directory = run_dir / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def resolve_checkpoint(checkpoint: str, step: int | None = None) -> Checkpoint:
    """Interprets `--checkpoint` (and `--step`); raises EvalError when it names nothing usable."""
    path = pathlib.Path(checkpoint).expanduser()
    if not is_run_dir(path):
        if step is not None:
            raise EvalError(f"--step needs a run directory (with checkpoints/), not {checkpoint}")
        from agentrl_jax.models.zoo import resolve_model_dir

        try:
            return Checkpoint(pathlib.Path(resolve_model_dir(checkpoint)))
        except ValueError as error:
            raise EvalError(str(error)) from None

    run_dir = path.resolve()
    config = None
    if (run_dir / "config.json").is_file():
        config = ml_collections.ConfigDict(json.loads((run_dir / "config.json").read_text()))
    final = run_dir / "final_model"
    steps = checkpoint_steps(run_dir)
    if step is None and (final / "config.json").is_file():
        return Checkpoint(final, None, run_dir, config)
    if step is None:
        if not steps:
            raise EvalError(f"{run_dir} has neither final_model/ nor RL checkpoints yet")
        step = steps[-1]
    if step not in steps:
        raise EvalError(f"{run_dir} has no RL checkpoint at step {step}; it has {steps}")
    # The architecture and tokenizer RL started from: the warm-started policy of the run's
    # `sft` stage (RUN_DIR/sft_model links to it), or the final model (same architecture) if
    # that cache has been cleared.
    stages = json.loads((run_dir / "stages.json").read_text()) if (
        run_dir / "stages.json").is_file() else {}
    candidates = [pathlib.Path(stages.get("sft", {}).get("policy_dir", "")),
                  run_dir / "sft_model", final]
    base = next((c for c in candidates if (c / "config.json").is_file()), None)
    if base is None:
        raise EvalError(f"{run_dir}: the model RL started from is gone (no sft policy_dir in "
                         "stages.json, no final_model/); cannot rebuild the architecture")
    return Checkpoint(base, step, run_dir, config)


def restore_step(policy: policy_lib.Policy, checkpoints_dir: pathlib.Path, step: int) -> None:
    """Replaces `policy.model`'s weights with `state.params` of the RL checkpoint at `step`.

    Only the parameters are read (not the optimizer state), onto the model's own shardings.
    """
    import jax
    from flax import nnx

    from agentrl_jax.checkpoint import CheckpointManager

    state = nnx.state(policy.model)
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        nnx.to_pure_dict(state))
    with CheckpointManager(checkpoints_dir) as manager:
        params = manager.restore_params(target, step=step)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(policy.model, state)


def load_checkpoint(checkpoint: Checkpoint, parser: str) -> policy_lib.Policy:
    policy = policy_lib.load_policy(checkpoint.model_dir, parser)
    if checkpoint.step is not None:
        assert checkpoint.run_dir is not None
        restore_step(policy, checkpoint.run_dir / "checkpoints", checkpoint.step)
    return policy


# ----------------------------------------------------------------------------- environments


def start_test_fleet(tasks: Sequence[str], split: str, stack: contextlib.ExitStack, *,
                     sandbox: bool = True, concurrency: int = 64,
                     log_dir: pathlib.Path | None = None) -> str:
    """A controller and one `split` worker per task (stopped when `stack` closes); its URL.

    Call it before JAX starts its threads (before loading a model): workers are forked.
    """
    from launch.env_fleet import prepare_task_data, start_task_fleet

    if sandbox and log_dir is not None:
        prepare_task_data(tasks, [split], log_dir)
    print(f"environments: starting {len(tasks)} {split}-split workers"
          f"{' (sandboxed)' if sandbox else ''}" + (f"; logs in {log_dir}" if log_dir else ""))
    fleet = stack.enter_context(start_task_fleet(tasks, [split], sandbox=sandbox,
                                                 concurrency=concurrency, log_dir=log_dir))
    return fleet.url


def resolve_task_names(known: Sequence[str], tasks: Sequence[str], split: str) -> list[str]:
    """Controller names of `tasks`: the name itself if the controller knows it, else NAME-SPLIT."""
    names = []
    for task in tasks:
        for candidate in (task, f"{task}-{split}"):
            if candidate in known:
                names.append(candidate)
                break
        else:
            raise EvalError(f"the controller serves no task {task!r} (nor {task}-{split}); "
                             f"it serves {sorted(known)}")
    return names


# ----------------------------------------------------------------------------- evaluation


async def evaluate_tasks(
    controller_url: str,
    generator: Generator,
    agent: AgentSpec,
    tasks: Sequence[str],
    *,
    split: str = "test",
    runs: int = 3,
    select: Callable[[list], list] | None = None,
    concurrency: int = 32,
    seed: int = 0,
    start_jitter_s: float = 3.0,
    on_start: Callable[[int], None] | None = None,
    on_episode: Callable[[Rollout], None] | None = None,
) -> dict[str, agentbench.TaskResult]:
    """Plays `select(indices)` of each task (default all) `runs` times; results keyed by task
    name.

    `on_start(total_episodes)` is called once the indices are known (for a progress bar).
    """
    async with ControllerClient(controller_url, start_jitter_s=start_jitter_s) as client:
        names = resolve_task_names(list(await client.list_workers()), tasks, split)
        indices = {}
        for name in names:
            indices[name] = list(await client.get_indices(name))
            if select is not None:
                indices[name] = select(indices[name])
        if on_start is not None:
            on_start(runs * sum(map(len, indices.values())))
        return await agentbench.evaluate(client, generator, agent, indices, runs=runs,
                                         concurrency=concurrency, seed=seed,
                                         on_episode=on_episode)


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
    out.mkdir(parents=True, exist_ok=True)
    table = agentbench.to_markdown(results, title=f"{name}: {settings.get('checkpoint', '')}"
                                   f" (k={settings.get('runs')}, T={settings.get('temperature')})")
    record = {**agentbench.to_json(results), "settings": dict(settings),
              "task_errors": dict(task_errors or {})}
    (out / f"{name}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (out / f"{name}.md").write_text(table)
    return out / f"{name}.json", table


def rl_config(args: argparse.Namespace, run_config: ml_collections.ConfigDict | None
              ) -> ml_collections.ConfigDict:
    """The `rl` config section that builds the agent and the engine: the run's, or defaults,
    with the command line's sampling settings and limits on top."""
    config = rl_stage.default_config()
    if run_config is not None and "rl" in run_config:
        for section in ("sampling", "limits", "engine"):
            config[section].update(run_config.rl[section].to_dict())
    config.sampling.temperature = args.temperature
    for key in ("max_turns", "max_context_tokens", "max_new_tokens"):
        if getattr(args, key) is not None:
            config.limits[key] = getattr(args, key)
    engine = config.engine
    if args.max_batch is not None:
        engine.max_batch = args.max_batch
    if args.num_pages is not None:
        engine.num_pages = args.num_pages
    # The engine must hold a whole episode: its context is the limit, rounded up to pages.
    pages = -(-config.limits.max_context_tokens // engine.page_size)
    engine.max_context = max(engine.max_context, pages * engine.page_size)
    return config


def index_selection(args: argparse.Namespace, run_config: ml_collections.ConfigDict | None
                    ) -> tuple[str, Callable[[list], list], int | None]:
    """(split, index selection, indices per task) of `--subset` and `--per_task`."""
    run_eval_config = run_config.get("eval", {}) if run_config is not None else {}
    if args.subset == "validation":
        reserved = int(run_config.demos.per_task) if run_config is not None else 0
        count = args.per_task or int(run_eval_config.get("validation_per_task",
                                                         protocol.VALIDATION_PER_TASK))
        split = run_config.env.train_split if run_config is not None else "train"
        return split, lambda ix: protocol.validation_indices(ix, reserved, count), count
    count = args.per_task or run_eval_config.get("per_task")
    if count is None:
        return args.split, list, None
    return args.split, lambda ix: protocol.test_indices(ix, int(count)), int(count)


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """Everything `main` does; returns the JSON written to `--out`."""
    checkpoint = resolve_checkpoint(args.checkpoint, args.step)
    run_config = checkpoint.run_config
    tasks = args.tasks or (list(run_config.env.tasks) if run_config is not None
                           else list(DEFAULT_TASKS))
    parser = args.parser or (run_config.model.parser if run_config is not None else "hermes")
    config = rl_config(args, run_config)
    split, select, per_task = index_selection(args, run_config)
    if args.out:
        out = pathlib.Path(args.out)
    elif checkpoint.run_dir is not None:
        step = "final" if checkpoint.step is None else f"step_{checkpoint.step}"
        out = checkpoint.run_dir / f"eval_{step}"
    else:
        out = pathlib.Path("runs/eval")
    out = out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = dict(
        checkpoint=checkpoint.describe(), model_dir=str(checkpoint.model_dir),
        step=checkpoint.step, tasks=tasks, split=split, subset=args.subset, runs=args.runs,
        temperature=args.temperature, per_task=per_task, parser=parser, seed=args.seed,
        limits=config.limits.to_dict(), controller_url=args.controller_url or "(started here)")

    started = time.monotonic()
    errors = ErrorLog()
    with contextlib.ExitStack() as stack:
        url = args.controller_url or start_test_fleet(
            tasks, split, stack, sandbox=args.sandbox,
            concurrency=args.worker_concurrency, log_dir=out / "logs")
        print(f"policy: {checkpoint.describe()} (parser {parser})")
        policy = load_checkpoint(checkpoint, parser)
        agent = rl_stage.agent_spec(config, policy)
        engine = stack.enter_context(rl_stage.make_engine(config, policy))
        from tqdm import tqdm

        bar = stack.enter_context(tqdm(desc="evaluation", unit="episode"))

        def on_start(total: int) -> None:
            bar.total = total
            bar.refresh()

        def on_episode(rollout: Rollout) -> None:
            errors(rollout)
            bar.update(1)

        results = asyncio.run(evaluate_tasks(
            url, engine, agent, tasks, split=split, runs=args.runs, select=select,
            concurrency=args.concurrency, seed=args.seed, on_start=on_start,
            on_episode=on_episode))
    settings["seconds"] = round(time.monotonic() - started, 1)
    path, table = write_results(results, out, settings, args.name, errors.reasons)
    print("\n" + table + f"\nwrote {path} and {path.with_suffix('.md')}")
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m launch.eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True,
                   help="HF model directory, model-zoo name, or launch.local run directory")
    p.add_argument("--step", type=int, default=None,
                   help="with a run directory: the RL checkpoint step to evaluate "
                        "(default: final_model, else the latest checkpoint)")
    p.add_argument("--controller_url", default="",
                   help="an AgentRL-compatible controller (default: start a test-split fleet)")
    p.add_argument("--tasks", type=lambda s: [t for t in s.split(",") if t], default=None,
                   help="comma-separated task names (default: the run's tasks, else all five "
                        "AgentBench-FC tasks)")
    p.add_argument("--split", default="test", help="the split evaluated (default: test)")
    p.add_argument("--runs", type=int, default=3, help="passes over each task, k (default: 3)")
    p.add_argument("--temperature", type=float, default=protocol.TEMPERATURE,
                   help="sampling temperature")
    p.add_argument("--subset", default="test", choices=("test", "validation"),
                   help="test: indices of --split spread evenly; validation: the held-out "
                        "slice of the train split (default: test)")
    p.add_argument("--per_task", type=int, default=None,
                   help="indices per task, spread evenly over the split (default: the run's "
                        "eval.per_task or eval.validation_per_task, else every test index / "
                        f"{protocol.VALIDATION_PER_TASK} validation indices)")
    p.add_argument("--parser", default=None, choices=("hermes", "qwen25", "glm4"),
                   help="tool-call format (default: the run's, else hermes)")
    p.add_argument("--max_turns", type=int, default=None,
                   help=f"turn limit (default: the run's, else {EpisodeLimits.max_turns})")
    p.add_argument("--max_context_tokens", type=int, default=None,
                   help=f"tokens per episode (default: the run's, else "
                        f"{EpisodeLimits.max_context_tokens})")
    p.add_argument("--max_new_tokens", type=int, default=None,
                   help=f"tokens per turn (default: the run's, else "
                        f"{EpisodeLimits.max_new_tokens})")
    p.add_argument("--concurrency", type=int, default=32, help="episodes in flight")
    p.add_argument("--max_batch", type=int, default=None,
                   help="sampling engine decode slots (default: the run's, else 32)")
    p.add_argument("--num_pages", type=int, default=None,
                   help="sampling engine KV pages of 16 tokens (default: the run's, else 4096)")
    p.add_argument("--no_sandbox", dest="sandbox", action="store_false",
                   help="run the started workers unsandboxed (default: each in bubblewrap)")
    p.add_argument("--worker_concurrency", type=int, default=64,
                   help="episodes per started worker")
    p.add_argument("--seed", type=int, default=0, help="seeds the episodes' sampling")
    p.add_argument("--out", default=None,
                   help="output directory (default: RUN_DIR/eval_final or RUN_DIR/eval_step_N "
                        "for a run, else runs/eval)")
    p.add_argument("--name", default="eval", help="file stem of the outputs (default: eval)")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.per_task is not None and args.per_task < 1:
        p.error("--per_task must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)   # a line per request otherwise
    try:
        return run_eval(args)
    except EvalError as error:   # a checkpoint or task that does not exist: say so, no trace
        raise SystemExit(f"launch.eval: {error}") from None


if __name__ == "__main__":
    main()
