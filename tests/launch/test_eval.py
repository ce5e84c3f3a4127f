"""launch/eval.py: aggregation over k passes on real workers, checkpoint resolution, the CLI.

The aggregation test plays a scripted policy (the unit under test is the evaluation driver,
`agentbench.evaluate`, with launch.eval's task names, not a model) through a real controller
and real DB and echo workers (subprocesses, HTTP). The policy
picks its behaviour by sample: the DB oracle's answer, the oracle once then a wrong answer, a
wrong answer, SQL until our turn limit, filler until the context limit; on echo, correct echoes
or no tool call. Every expected figure is therefore known exactly. The CLI test evaluates a
tiny from-scratch model restored from an RL checkpoint of a run directory, end to end.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
from absl import flags

from agentrl_jax.controller.client import ControllerClient
from agentrl_jax.evaluation import agentbench, protocol
from agentrl_jax.experiment import saved_policy
from agentrl_jax.rollout.agent_loop import AgentSpec, EpisodeLimits
from agentrl_jax.sampling.types import FinishReason, GenerationResult, SamplingParams
from environments.db.oracle import Oracle
from environments.db.task import DBTask, user_prompt
from environments.fleet import REPO_ROOT, EnvFleet
from launch import eval as eval_lib

RUNS, LIMIT = 3, 5
LIMITS = EpisodeLimits(max_turns=3, max_context_tokens=2048, max_new_tokens=2048)


def hermes(message: dict) -> str:
    """An OpenAI assistant message as the Hermes text a model would generate."""
    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
             for c in message.get("tool_calls") or []]
    return "".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in calls)


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ScriptedPolicy:
    """A Generator whose replies depend on the (task, index) it recognises in the first prompt.

    DB indices 0..4: 0 the oracle; 1 the oracle on its first episode only, then a wrong answer;
    2 a wrong answer; 3 `SELECT 1` forever (turn limit); 4 filler up to the context limit.
    Echo index i needs i+1 echoes: 0 and 2 echo (completed), 1 and 4 reply without a tool call
    (invalid action), 3 echoes but needs 4 turns (turn limit).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.db = DBTask(split="test")
        self.oracle = Oracle(self.db)
        self.db_prompts = {i: user_prompt(self.db.entry(i)) for i in range(LIMIT)}
        self.sessions: dict[str, tuple[str, int]] = {}
        self.turns: collections.Counter[str] = collections.Counter()
        self.episodes: collections.Counter[tuple[str, int]] = collections.Counter()
        self.first_try: dict[str, bool] = {}

    def recognise(self, prompt: str) -> tuple[str, int]:
        for index, text in self.db_prompts.items():
            if text in prompt:
                return "db", index
        for index in range(LIMIT):
            if f"Call echo {index + 1} times." in prompt:
                return "echo", index
        raise AssertionError(f"unknown prompt: {prompt[-300:]!r}")

    def reply(self, session: str, max_new_tokens: int) -> list[int] | str:
        task, index = self.sessions[session]
        turn = self.turns[session]
        if task == "echo":
            return call("echo", text=f"turn {turn}") if index in (0, 2, 3) else "I am done."
        if index == 4:
            filler = self.tokenizer.encode(" la", add_special_tokens=False)
            return filler * max_new_tokens
        if index == 3:
            return call("execute_sql", query="SELECT 1")
        if index == 0 or (index == 1 and self.first_try[session]):
            history = [{"role": "assistant", "tool_calls": [1]}] if turn else []
            return hermes(self.oracle.next_message(index, history))
        return call("commit_final_answer", answers=["certainly not the answer"])

    async def generate(self, request):
        session = request.session_id
        if session not in self.sessions:
            key = self.recognise(self.tokenizer.decode(list(request.prompt)))
            self.sessions[session] = key
            self.first_try[session] = self.episodes[key] == 0
            self.episodes[key] += 1
        out = self.reply(session, request.params.max_new_tokens)
        self.turns[session] += 1
        if isinstance(out, str):
            ids = self.tokenizer.encode(out, add_special_tokens=False)
            ids = ids[: request.params.max_new_tokens - 1] + [self.tokenizer.eos_token_id]
        else:
            ids = out[: request.params.max_new_tokens]
        return GenerationResult(tokens=ids, logprobs=[-1.0] * len(ids), versions=[0] * len(ids),
                                policy=request.policy, finish_reason=FinishReason.STOP)

    async def end_session(self, session_id):
        pass


@pytest.fixture(scope="module")
def db_and_echo(tmp_path_factory):
    """A controller with a DB test-split worker and an echo worker, as subprocesses."""
    with EnvFleet(log_dir=tmp_path_factory.mktemp("fleet_logs")) as fleet:
        fleet.add_workers([dict(task="db", params=["split=test"]), dict(task="echo")])
        fleet.wait_until(lambda listing: {"db-test", "echo"} <= set(listing), timeout_s=120)
        yield fleet.url


def test_k_runs_aggregate_to_exact_means_stds_and_terminations(db_and_echo, tokenizer,
                                                                tmp_path):
    policy = ScriptedPolicy(tokenizer)
    agent = AgentSpec(tokenizer=tokenizer, sampling=SamplingParams(temperature=0.8,
                                                                  max_new_tokens=2048),
                      limits=LIMITS)
    async def evaluate():
        async with ControllerClient(db_and_echo, start_jitter_s=0) as client:
            names = eval_lib.resolve_task_names(list(await client.list_workers()),
                                                ["db", "echo"], "test")
            return await agentbench.evaluate(client, policy, agent, names, runs=RUNS,
                                             select=lambda indices: indices[:LIMIT],
                                             concurrency=6, on_start=started.append)

    started = []
    results = asyncio.run(evaluate())
    assert started == [2 * RUNS * LIMIT]

    assert list(results) == ["db-test", "echo"]
    assert all(n == RUNS for n in policy.episodes.values()) and len(policy.episodes) == 10
    db, echo = results["db-test"], results["echo"]
    # DB: indices 0 and 1 succeed in the pass where index 1 got its one oracle episode, only
    # index 0 in the other two. Which pass that is depends on scheduling; the figures do not.
    assert db.episodes == echo.episodes == RUNS * LIMIT
    assert sorted(db.success_per_run) == pytest.approx([0.2, 0.2, 0.4])
    assert db.success_mean == pytest.approx(4 / 15)
    assert db.success_std == pytest.approx(float(np.std([0.2, 0.2, 0.4])))
    assert db.score_per_run == pytest.approx(db.success_per_run)
    assert db.terminations == pytest.approx(dict(
        completed=9 / 15, task_limit_reached=3 / 15, invalid_action=0.0,
        context_limit=3 / 15, task_error=0.0))
    # Echo: indices 0 and 2 succeed in every pass.
    assert echo.success_per_run == pytest.approx([0.4] * RUNS)
    assert echo.success_std == pytest.approx(0.0, abs=1e-12)
    assert echo.terminations == pytest.approx(dict(
        completed=6 / 15, task_limit_reached=3 / 15, invalid_action=6 / 15,
        context_limit=0.0, task_error=0.0))

    settings = {"checkpoint": "scripted", "runs": RUNS, "temperature": 0.8}
    path, table = eval_lib.write_results(results, tmp_path, settings)
    written = json.loads(path.read_text())
    assert written["settings"] == settings and written["task_errors"] == {}
    assert written["average"]["success_mean"] == pytest.approx((4 / 15 + 0.4) / 2)
    assert written["tasks"]["db-test"]["success_std"] == pytest.approx(db.success_std)
    assert (tmp_path / "eval.md").read_text() == table
    # Wilson intervals of 4/15 and 6/15 episodes.
    assert ("| db-test | 15 | 26.7 ± 9.4 | 26.7 ± 9.4 | [10.9, 52.0] | 60% | 20% | 0% | 20% "
            "| 0% |") in table
    assert ("| echo | 15 | 40.0 ± 0.0 | 40.0 ± 0.0 | [19.8, 64.3] | 40% | 20% | 40% | 0% | "
            "0% |") in table
    assert "| **average** | | 33.3 | 33.3 |" in table


def test_task_names_resolve_against_the_controller():
    known = ["db-test", "db-train", "echo", "dbbench-std"]
    assert eval_lib.resolve_task_names(known, ["db", "echo", "dbbench-std"], "test") == [
        "db-test", "echo", "dbbench-std"]
    assert eval_lib.resolve_task_names(known, ["db"], "train") == ["db-train"]
    with pytest.raises(eval_lib.EvalError, match=r"no task 'kg' \(nor kg-test\)"):
        eval_lib.resolve_task_names(known, ["kg"], "test")
    with pytest.raises(eval_lib.EvalError, match="no task 'db-x'.*cannot be part of a task key"):
        eval_lib.resolve_task_names(known, ["db-x"], "test")


def parse_flags(*overrides: str):
    """The config as `python -m launch.eval OVERRIDES...` sees it."""
    argv = ["launch.eval", *overrides]
    values = flags.FlagValues()
    eval_lib.define_flags(values, sys_argv=argv)
    values(argv)
    return values.config


def test_command_line_overrides_the_config():
    config = parse_flags("--config.checkpoint=runs/x", "--config.eval.per_task=40",
                         "--config.eval.runs=2", "--config.rl.limits.max_turns=7",
                         "--config.env.tasks=('db','kg')")
    assert (config.checkpoint, config.eval.per_task, config.eval.runs) == ("runs/x", 40, 2)
    assert tuple(config.env.tasks) == ("db", "kg")
    split, select, per_task = eval_lib.index_selection(config, None)
    indices = list(range(260))
    assert (split, per_task) == ("test", 40)
    assert select(indices) == protocol.test_indices(indices, 40)
    # Left unset, the run's values hold; set, the command line's win over the run's.
    run = ml_collections.ConfigDict({"eval": {"per_task": 5}, "demos": {"per_task": 4},
                                     "env": {"train_split": "train"},
                                     "rl": {"sampling": {}, "engine": {},
                                            "limits": {"max_turns": 3, "max_new_tokens": 9}}})
    assert eval_lib.index_selection(config, run)[2] == 40
    assert eval_lib.index_selection(parse_flags(), run)[2] == 5
    rl = eval_lib.rl_config(config, run)
    assert (rl.limits.max_turns, rl.limits.max_new_tokens) == (7, 9)
    assert rl.sampling.temperature == protocol.TEMPERATURE
    assert rl.engine.prefix_cache   # the engine's default, unless the command line says
    uncached = parse_flags("--config.rl.engine.prefix_cache=False")
    assert eval_lib.rl_config(uncached, run).engine.prefix_cache is False
    capped = parse_flags("--config.rl.engine.max_prefill_tokens=2048")
    assert rl.engine.max_prefill_tokens == 0   # a run from before the cap: uncapped
    assert eval_lib.rl_config(capped, run).engine.max_prefill_tokens == 2048
    validation = parse_flags("--config.eval.subset=validation")
    split, select, per_task = eval_lib.index_selection(validation, run)
    assert (split, per_task) == ("train", protocol.VALIDATION_PER_TASK)
    assert select(indices) == protocol.validation_indices(indices, 4)
    with pytest.raises(Exception, match="per_tsk"):   # locked: a typo is an error
        parse_flags("--config.eval.per_tsk=40")
    with pytest.raises(eval_lib.EvalError, match="config.checkpoint is empty"):
        eval_lib.check_config(parse_flags())
    with pytest.raises(eval_lib.EvalError, match="unknown tool parser"):
        eval_lib.check_config(parse_flags("--config.checkpoint=x", "--config.model.parser=x"))


# ----------------------------------------------------------------------------- checkpoints


@dataclasses.dataclass
class TinyRun:
    run_dir: object
    sft_dir: object
    saved_params: dict
    step: int


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> TinyRun:
    """A `launch.local`-shaped run directory: config.json, stages.json naming the warm-started
    policy (a tiny scratch model), and an RL checkpoint whose parameters differ from it."""
    import jax
    from flax import nnx

    from agentrl_jax.checkpoint import CheckpointManager
    from agentrl_jax.experiment import policy as policy_lib
    from agentrl_jax.parallel.mesh import single_device_mesh
    from agentrl_jax.rl import train_step
    from configs import local_default
    from environments.db.task import SYSTEM_PROMPT, TOOLS

    root = tmp_path_factory.mktemp("tiny_run")
    config = local_default.get_config("fast")
    config.env.tasks = ("db",)
    config.rl.limits.update(max_turns=2, max_new_tokens=8)
    texts = [SYSTEM_PROMPT, json.dumps(TOOLS)] + [
        user_prompt(DBTask(split="test").entry(i)) for i in range(3)]
    policy = policy_lib.new_scratch_policy(config.model, texts)
    sft_dir = policy_lib.save_policy(policy, root / "sft_policy")

    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(config.to_json(indent=1, sort_keys=True))
    (run_dir / "stages.json").write_text(json.dumps({"sft": {"policy_dir": str(sft_dir)}}))
    trainer = train_step.Trainer(policy.model, config.rl.trainer, single_device_mesh())
    state = trainer.init_state()
    state = dataclasses.replace(state, params=jax.tree.map(lambda x: x * 0.5 + 0.01,
                                                           state.params))
    with CheckpointManager(run_dir / "checkpoints") as manager:
        manager.save(2, state, force=True)
        manager.wait_until_finished()
    saved = nnx.to_pure_dict(nnx.state(trainer.model(jax.device_get(state.params))))
    return TinyRun(run_dir, sft_dir, jax.tree.map(np.asarray, saved), 2)


def test_run_directory_step_restores_the_checkpoint_parameters(tiny_run):
    import jax
    from flax import nnx

    checkpoint = saved_policy.resolve_checkpoint(str(tiny_run.run_dir), tiny_run.step)
    assert checkpoint.model_dir == tiny_run.sft_dir and checkpoint.step == tiny_run.step
    assert checkpoint.run_config.model.parser == "hermes"
    policy = saved_policy.load_checkpoint(checkpoint, "hermes")
    restored = jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(policy.model)))
    jax.tree.map(np.testing.assert_array_equal, restored, tiny_run.saved_params)
    # Without --step (and no final_model yet): the latest checkpoint.
    assert saved_policy.resolve_checkpoint(str(tiny_run.run_dir)).step == tiny_run.step


def test_a_step_restores_into_a_model_holding_host_arrays(tiny_run):
    """As RL leaves the policy (its weights handed back as host arrays), when the job's
    `select` stage compares checkpoints."""
    import jax
    from flax import nnx

    from agentrl_jax.experiment import policy as policy_lib

    policy = policy_lib.load_policy(tiny_run.sft_dir, "hermes")
    state = nnx.state(policy.model)
    nnx.update(policy.model, jax.tree.map(np.asarray, state))
    saved_policy.restore_step(policy, tiny_run.run_dir / "checkpoints", tiny_run.step)
    restored = nnx.to_pure_dict(nnx.state(policy.model))
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(restored))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, restored),
                 tiny_run.saved_params)


def test_bad_checkpoints_are_reported(tiny_run, tmp_path):
    with pytest.raises(saved_policy.CheckpointError,
                       match=r"no RL checkpoint at step 7; it has \[2\]"):
        saved_policy.resolve_checkpoint(str(tiny_run.run_dir), 7)
    with pytest.raises(saved_policy.CheckpointError, match="--step needs a run directory"):
        saved_policy.resolve_checkpoint(str(tiny_run.sft_dir), 3)
    with pytest.raises(saved_policy.CheckpointError, match="neither a model-zoo name"):
        saved_policy.resolve_checkpoint(str(tmp_path / "nothing"))


def test_cli_evaluates_a_run_checkpoint_end_to_end(tiny_run, tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "launch.eval", f"--config.checkpoint={tiny_run.run_dir}",
            f"--config.step={tiny_run.step}", "--config.eval.runs=2",
            "--config.eval.per_task=2", f"--config.out={out}"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    written = json.loads((out / "eval.json").read_text())
    assert list(written["tasks"]) == ["db-test"]   # the run's tasks, on the test split
    db = written["tasks"]["db-test"]
    assert db["episodes"] == 4 and len(db["success_per_run"]) == 2
    assert sum(db["terminations"].values()) == pytest.approx(1.0)
    assert db["terminations"]["task_error"] == 0.0, written["task_errors"]
    settings = written["settings"]
    assert settings["step"] == tiny_run.step and settings["runs"] == 2
    assert settings["limits"]["max_turns"] == 2   # the run's limits
    assert settings["temperature"] == 0.8
    # The protocol's subset: 2 indices spread evenly over the 260 of DB's test split.
    assert settings["per_task"] == 2 and settings["subset"] == "test"
    assert sorted({o["index"] for o in db["outcomes"]}) == [65, 195]
    assert "| db-test | 4 |" in (out / "eval.md").read_text()
    assert (out / "logs").is_dir()
    # Every episode's transcript, in task and index order, ending as eval.json says it did.
    episodes = [json.loads(line) for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert [e["index"] for e in episodes] == [65, 65, 195, 195]
    assert all(e["messages"] and e["messages"][0]["role"] in ("system", "user") for e in episodes)
    assert (sorted(e["reward"] for e in episodes)
            == sorted(o["score"] for o in db["outcomes"]))
