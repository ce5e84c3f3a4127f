"""Every AgentBench-FC config loads (as `--config=FILE[:ARG]` does), carries the paper's
settings, passes the launcher's checks and fits the launcher's pieces; the ablations differ from
their model's config in exactly what they ablate. No weights are loaded."""

import pathlib

import ml_collections
import pytest

from agentrl_jax.chat.tool_parsers import get_parser
from agentrl_jax.dataclass_config import dataclass_from
from agentrl_jax.experiment import pod_job
from agentrl_jax.models.published import published_config
from agentrl_jax.pipeline import pod_layout, trainer_driver
from agentrl_jax.rl import optimizer as optimizer_lib
from agentrl_jax.rollout.agent_loop import EpisodeLimits
from agentrl_jax.sampling import EngineConfig, SamplingParams
from configs.agentbench_fc import ablations
from environments.registry import AGENTBENCH_FC
from tests.support.config_files import load_config

REPO = pathlib.Path(__file__).resolve().parents[2]
FOLDER = REPO / "configs" / "agentbench_fc"
MODELS = {"qwen25_3b": "qwen25", "qwen25_7b": "qwen25", "qwen25_14b": "qwen25",
          "qwen25_32b": "qwen25", "glm4_9b": "glm4"}


def load(spec: str, *overrides: str) -> ml_collections.ConfigDict:
    """The config as `launch.tpu_pod --config=SPEC OVERRIDES...` sees it."""
    return load_config(FOLDER / spec, *overrides)


def runnable(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict(config.to_dict())
    config.env.controller_url = "http://127.0.0.1:5020/api"
    config.model.path = "/models/any"
    return config


@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_configs_hold_the_papers_settings(model):
    c = load(f"{model}.py")
    assert c.name == model and c.run_dir == f"runs/agentbench_fc/{model}"
    assert (c.model.source, c.model.parser) == ("hf", MODELS[model])
    assert c.env.tasks == AGENTBENCH_FC and c.eval.tasks == AGENTBENCH_FC
    p = c.rl.pipeline
    assert (p.mode, p.groups_per_step, p.group_size, p.steps) == ("async", 256, 8, 1000)
    assert p.max_groups_per_step is None  # every complete group, as AgentRL
    assert not p.dynamic_sampling and not p.curriculum.enabled  # not in the paper
    assert (p.stale_policy_ratio, p.stale_every) == (0.25, 25)
    assert c.rl.sampling.temperature == trainer_driver.trainer_config(c.rl).temperature == 0.8
    assert dict(c.rl.limits) == dict(max_turns=20, max_context_tokens=8192, max_new_tokens=1024)
    assert c.rl.advantages.incomplete_penalty == -0.2 and c.rl.advantages.task_adv_norm
    assert not c.rl.advantages.penalty_needs_reward   # the penalty on every group, as AgentRL
    opt = c.rl.trainer.optimizer
    assert (opt.learning_rate, opt.weight_decay, opt.schedule) == (1e-6, 0.0, "constant")
    loss = c.rl.trainer.loss
    assert (loss.clip_eps_low, loss.dual_clip_c, loss.kl_coef, loss.entropy_coef) == (
        0.2, 3.0, 1e-4, 0.0)
    assert c.rl.trainer.tokens_per_micro == 16384
    assert max(c.rl.trainer.seq_buckets) >= c.rl.limits.max_context_tokens
    assert c.rl.engine.max_context >= c.rl.limits.max_context_tokens
    assert c.eval.runs == 4 and c.eval.after_rl


@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_configs_fit_the_launcher(model):
    c = runnable(load(f"{model}.py"))
    pod_job.check_config(c)
    get_parser(c.model.parser)
    dataclass_from(c.rl.limits, EpisodeLimits)
    SamplingParams(max_new_tokens=c.rl.limits.max_new_tokens, **c.rl.sampling.to_dict())
    dataclass_from(c.rl.engine, EngineConfig)
    optimizer_lib.make_optimizer(c.rl.trainer.optimizer)
    # The device split on the smallest slice of several hosts the model files are sized
    # for (v5p, 4 chips a host): a sampler replica on each host, the trainer on the rest.
    pytest.importorskip("libtpu", reason="TPU topologies come with jax's `tpu` extra")
    from agentrl_jax.aot.hardware import topology_devices

    devices = topology_devices("v5p:2x2x2")
    layout = pod_layout.build_layout(c.mesh, devices, process_index=0)
    (sampler,) = layout.samplers
    assert len(sampler.devices.flat) == c.mesh.sampler_devices
    assert layout.replicas_by_process == (1, 1)
    assert set(sampler.devices.flat).isdisjoint(layout.trainer.devices.flat)
    assert layout.trainer.size + 2 * sampler.size == len(devices)
    # FSDP divides the model dimension, so the parameters are sharded, not replicated
    hidden = published_config(c.model.architecture).hidden_size
    assert layout.trainer.shape["fsdp"] > 1 and hidden % layout.trainer.shape["fsdp"] == 0


def test_overrides_on_the_command_line():
    c = load("qwen25_7b.py", "--config.rl.trainer.optimizer.learning_rate=2e-6",
             "--config.run_dir=gs://bucket/agentrl/q7",
             "--config.env.tasks=('alfworld','dbbench')")
    assert c.rl.trainer.optimizer.learning_rate == 2e-6
    assert c.run_dir == "gs://bucket/agentrl/q7"
    assert tuple(c.env.tasks) == ("alfworld", "dbbench")
    with pytest.raises(Exception, match="learning_rat"):  # locked: a typo is an error
        load("qwen25_7b.py", "--config.rl.trainer.optimizer.learning_rat=2e-6")


def test_launcher_checks_say_what_to_set():
    c = load("qwen25_3b.py")
    with pytest.raises(ValueError, match="controller_url"):
        pod_job.check_config(c)
    c = runnable(c)
    c.model.path = ""
    with pytest.raises(ValueError, match="model.path"):
        pod_job.check_config(c)
    c = runnable(load("qwen25_3b.py"))
    c.model.shrink_layers = 4   # needs launch.local's demonstrations
    with pytest.raises(ValueError, match="shrink"):
        pod_job.check_config(c)
    c = runnable(load("qwen25_3b.py"))
    c.rl.trainer.temperature = 1.0   # the sampler draws at 0.8
    with pytest.raises(ValueError, match="trainer.temperature"):
        pod_job.check_config(c)
    c = runnable(load("qwen25_3b.py"))
    c.mesh.sampler_devices = 8  # leaves process 0 nothing to train on
    with pytest.raises(ValueError, match="keep at least one"):
        pod_layout.build_layout(c.mesh)


def _flat(config: ml_collections.ConfigDict) -> dict:
    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = tuple(value) if isinstance(value, list) else value

    walk("", config.to_dict())
    return out


def _difference(a: ml_collections.ConfigDict, b: ml_collections.ConfigDict) -> dict:
    fa, fb = _flat(a), _flat(b)
    return {k: (fa.get(k), fb.get(k)) for k in fa.keys() | fb.keys()
            if fa.get(k) != fb.get(k) and k not in ("name", "run_dir")}


def test_ablations_change_exactly_what_they_ablate():
    full = load("qwen25_14b.py")  # the paper's ablation model, the default
    assert _difference(full, load("ablations.py:no_cross_policy")) == {
        "rl.pipeline.stale_policy_ratio": (0.25, 0.0)}
    assert _difference(full, load("ablations.py:no_task_adv_norm")) == {
        "rl.advantages.task_adv_norm": (True, False)}
    assert _difference(full, load("ablations.py:lora")) == {
        "rl.trainer.lora.enabled": (False, True),
        "rl.trainer.lora.base_dtype": (None, "bfloat16"),
        "rl.trainer.optimizer.learning_rate": (1e-6, 1e-5)}
    for task in AGENTBENCH_FC:
        specialist = load(f"ablations.py:single_task_{task}")
        assert _difference(full, specialist) == {"env.tasks": (AGENTBENCH_FC, (task,))}
        assert specialist.eval.tasks == AGENTBENCH_FC  # tested on all five (Table 4)
    runs = {load(f"ablations.py:{a}").run_dir for a in ablations.ablations()}
    assert len(runs) == len(ablations.ablations())  # every ablation writes its own run
    assert full.run_dir not in runs


def test_ablation_of_another_model():
    c = load("ablations.py:no_task_adv_norm,glm4_9b")
    assert _difference(load("glm4_9b.py"), c) == {"rl.advantages.task_adv_norm": (True, False)}
    assert c.name == "glm4_9b-no_task_adv_norm" and c.model.parser == "glm4"


@pytest.mark.parametrize("arg", ["", "no_such_thing", "no_cross_policy,llama", "single_task_x"])
def test_unknown_ablations_are_refused(arg):
    with pytest.raises(ValueError, match="unknown"):
        ablations.get_config(arg)


def test_local_default_holds_the_evaluation_protocol_and_the_levers():
    from agentrl_jax.evaluation import protocol
    from configs import local_default

    c = local_default.get_config()
    assert c.eval.per_task >= 40 and c.eval.temperature == 0.8 and c.eval.runs >= 1
    assert c.eval.validation_per_task == protocol.VALIDATION_PER_TASK
    assert c.rl.pipeline.dynamic_sampling and c.rl.pipeline.curriculum.enabled
    assert c.rl.pipeline.max_draws_per_step > c.rl.pipeline.groups_per_step
    assert c.rl.advantages.penalty_needs_reward   # giving up early must not pay (#29)
    fast = local_default.get_config("fast")   # CI: one index per task
    assert fast.eval.per_task == 1 and fast.rl.pipeline.steps <= 2


def test_local_smollm2_lora_variant_trains_adapters_in_both_stages():
    from agentrl_jax.rl import train_step
    from configs import local_smollm2

    main, lora = local_smollm2.get_config(), local_smollm2.get_config("lora")
    assert train_step.lora_of(main.rl.trainer) is None
    for trainer in (lora.sft, lora.rl.trainer):
        assert train_step.lora_of(trainer) == train_step.LoraConfig(rank=16, alpha=32.0)
    assert lora.rl.trainer.optimizer.learning_rate == 10 * main.rl.trainer.optimizer.learning_rate
    assert lora.run_dir != main.run_dir


def test_local_smollm2_reports_on_what_it_trains():
    """The claim the run makes (test success of each trained task, paired, before and after)
    needs the protocol's 40 test indices of exactly those tasks, and validation for decisions."""
    from agentrl_jax.evaluation import protocol
    from agentrl_jax.experiment import evaluation_stage
    from configs import local_smollm2

    c = local_smollm2.get_config()
    assert c.eval.per_task == protocol.TEST_PER_TASK and c.eval.validate and c.eval.before_rl
    trained = set(c.rl.tasks)
    assert "alfworld" not in trained
    for subset in ("test", "validation"):
        evaluated = evaluation_stage.evaluated_tasks(c, subset)
        assert {key.rsplit("-", 1)[0] for key in evaluated} == trained
    assert c.rl.checkpoint.every == 1
    # the final policy chosen on validation at steps 5 and 10, whose checkpoints are kept
    from agentrl_jax.experiment import run_config, selection

    resolved = run_config.resolve(c)
    assert selection.candidate_steps(c.rl.pipeline.steps, c.eval.select_every) == [5, 10]
    assert resolved.rl.checkpoint.keep_period == 5
    run_config.resolve(local_smollm2.get_config("lora"))   # LoRA keeps the last step's
