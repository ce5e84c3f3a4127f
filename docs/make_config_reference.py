"""Writes docs/configuration.md from the live configs: every key, its defaults and its meaning.

    python docs/make_config_reference.py           # rewrite docs/configuration.md
    python docs/make_config_reference.py --check   # exit 1 if the page is out of date

The keys and defaults come from the real ConfigDicts (`configs/local_default.py`, its `:fast`
mode, `configs/local_smollm2.py`, `configs/agentbench_fc/*`, `configs/eval.py`), so the page
cannot drift from the code without `--check` noticing; the meanings are the `MEANINGS` and
`EVAL_MEANINGS` tables below. A key without a
meaning is an error: describe it here when you add it to a config.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "docs" / "configuration.md"
sys.path.insert(0, str(REPO_ROOT))

# Optimizer fields, shared by `sft.optimizer` and `rl.trainer.optimizer`.
OPTIMIZER = {
    "learning_rate": "peak learning rate of AdamW",
    "schedule": '"constant" or "cosine" (after the warm-up)',
    "warmup_steps": "linear warm-up from 0 to the peak over this many steps",
    "total_steps": "cosine: steps from 0 to the end of the decay (then held)",
    "end_lr_factor": "cosine: the final learning rate as a fraction of the peak",
    "b1": "Adam β1",
    "b2": "Adam β2",
    "eps": "Adam ε",
    "weight_decay": "decoupled weight decay (AdamW)",
    "max_grad_norm": "global-norm gradient clipping; None or ≤ 0 disables it",
}

# LoRA fields, shared by `sft.lora` and `rl.trainer.lora` (docs/lora.md).
LORA = {
    "enabled": "train low-rank adapters over the frozen model instead of every weight",
    "rank": "adapter rank r (A is [in, r], B is [r, out])",
    "alpha": "adapter scale numerator: outputs are scaled by alpha / rank",
    "targets": "projections that get adapters (q/k/v/o_proj, gate/up/down_proj)",
    "seed": "initialisation of A (B starts at zero: a new adapter changes nothing)",
    "base_dtype": 'e.g. "bfloat16": the frozen base held in this dtype (adapters stay fp32)',
    "peft_adapter": "a PEFT adapter directory to start from instead of fresh adapters",
}

MEANINGS: dict[str, str] = {
    # top level
    "name": "the run's name (model file, or MODEL-ABLATION)",
    "run_dir": "where the run lives: stages, checkpoints, final model, metrics (a local path; "
               "agentbench_fc also takes a bucket URL such as gs://…)",
    "log_dir": 'stage markers, config, metrics, evaluation results, TensorBoard; "" = run_dir '
               "(or runs/NAME when run_dir is a URL; copied to run_dir/logs at the end)",
    "deployment": '"local": one process that warm-starts and trains on one device; "pod": the '
                "policy from model.path, sampler replicas and the trainer mesh over every "
                "process of a pod (launch.tpu_pod; agentrl_jax/experiment/deployment.py)",
    "seed": "seeds evaluation episodes (sampling seeds and order)",
    "game_stage": "run the tic-tac-toe stage (`game`) after the AgentBench stages",
    "game": "the tic-tac-toe stage: a whole job config with the top level's keys, run under "
            "RUN_DIR/tictactoe (configs/local_tictactoe.py; its changes are listed under "
            "Modes and variants)",
    "rollouts": 'who plays the RL episodes: "agent_loop" (the project\'s loop, '
                'rollout/agent_loop.py) or "openai_agent" (the agent program of `openai_agent` '
                "over the OpenAI server, serving/agent_rollouts.py)",
    # env
    "env.controller_url": 'an AgentRL-compatible controller to use; "" (local) starts our own '
                          "sandboxed fleet; required by launch.tpu_pod",
    "env.sandbox": "each task worker in its own bubblewrap sandbox (environments/sandbox)",
    "env.allow_root_fallback": "a launcher that is not host root: start the OS task with the "
                               "seeded root (rlimits only) instead of refusing "
                               "(environments/fleet.py, docs/security.md)",
    "env.tasks": "the tasks trained on (environment folder names; the controller serves "
                 "TASK-SPLIT)",
    "env.concurrency": "episodes one started worker holds at once",
    "env.train_split": "split suffix of the training tasks (controller name TASK-train_split)",
    "env.test_split": "split suffix of the evaluation tasks (controller name TASK-test_split)",
    # model
    "model.source": '"scratch" (new model + BPE trained on the demos), "zoo" (model.name) or '
                    '"hf" (the HF directory model.path)',
    "model.name": "source=zoo: a models.zoo name (e.g. smollm2-135m-instruct)",
    "model.path": "source=hf: an HF checkpoint directory (Qwen2.5, GLM-4, Llama)",
    "model.parser": 'tool-call format of the chat: "hermes", "qwen25" or "glm4"',
    "model.vocab_size": "scratch: BPE vocabulary entries, special tokens included",
    "model.shrink_layers": "zoo/hf, launch.local: keep the first N decoder layers and the "
                           "demonstrations' vocabulary (models/shrink.py); 0 = the whole model",
    "model.shrink_common_tokens": "with shrink_layers: also keep the tokenizer's first N ids "
                                  "(its most frequent tokens), so that names the "
                                  "demonstrations never had encode as in pretraining; at the "
                                  "vocabulary's size nothing is pruned",
    "model.seed": "scratch: parameter initialisation seed",
    "model.architecture": "the published model (`agentrl_jax.models.published`) whose shape "
                          "`launch.tpu_pod --compile_only` builds when model.path has no "
                          "config.json",
    "model.scratch.family": "scratch: decoder family (llama, qwen2, glm4)",
    "model.scratch.hidden_size": "scratch: model width",
    "model.scratch.intermediate_size": "scratch: MLP width",
    "model.scratch.num_layers": "scratch: decoder blocks",
    "model.scratch.num_heads": "scratch: attention heads",
    "model.scratch.num_kv_heads": "scratch: key/value heads (grouped-query attention)",
    "model.scratch.head_dim": "scratch: width of one head",
    "model.scratch.max_position_embeddings": "scratch: longest sequence (RoPE table)",
    "model.scratch.tie_word_embeddings": "scratch: output projection shares the embedding",
    "model.scratch.rope_theta": "scratch: RoPE base",
    # demos, sft
    "demos.per_task": "oracle episodes per task for the warm start (cached)",
    "demos.split": "split the oracle demonstrations are played on",
    "demos.max_tokens": "demonstrations longer than this (tokens) are left out of the warm start",
    "sft.epochs": "passes over the demonstrations",
    "sft.tokens_per_step": "demonstration tokens per optimizer step (before padding)",
    "sft.tokens_per_micro": "tokens per packed micro-batch (gradient accumulation)",
    "sft.seq_buckets": "packed row lengths (each a compiled shape)",
    "sft.auto_buckets": "> 0: that many row lengths chosen from the demonstrations' lengths "
                        "by sft/plan.py's cost model, in place of seq_buckets",
    "sft.seed": "order of the demonstrations",
    "sft.compute_dtype": 'e.g. "bfloat16" (fp32 master weights and Adam); None computes in '
                         "the parameters' fp32; \"auto\": bf16 where the host runs bf16 "
                         "products natively (agentrl_jax/precision.py)",
    "sft.context_loss_weight": "loss weight of the context tokens (prompt, tools, observations); "
                               "the assistant's weigh 1, 0 = assistant tokens only",
    "sft.copy_swap_fraction": "share of the demonstrations trained with their rare copied "
                              "words (entities) swapped for other words of their task, "
                              "consistently through the episode (sft/copy_swap.py); 0 = none",
    "sft.copy.sequences": "copy-forming stage before the demonstrations: synthetic sequences "
                          "whose second part repeats spans of their first, cut from the "
                          "demonstrations' tokens (sft/copy_stage.py); 0 = no stage",
    "sft.copy.length": "copy stage: tokens per sequence",
    "sft.copy.recall_share": "copy stage: share of a sequence that repeats spans of its context "
                             "(the trained part)",
    "sft.copy.min_span": "copy stage: shortest span, in tokens",
    "sft.copy.max_span": "copy stage: longest span, in tokens",
    "sft.copy.tokens_per_step": "copy stage: sequence tokens per optimizer step",
    "sft.copy.learning_rate": "copy stage: peak learning rate (the warm start's schedule)",
    "sft.cache_dir": 'warm-started policies, by config hash; "" = the agentrl_jax cache '
                     "(~/.cache/agentrl_jax/sft)",
    # mesh
    "mesh.sampler_devices": "process 0's first local devices that run the sampling engine "
                            "(tensor parallel); the rest train",
    "mesh.sampler_devices_per_host": "every other process's first local devices that run a "
                                     "sampler of their own (claiming groups from process 0's "
                                     "rollout hub); 0 = they only train",
    "mesh.sampler_devices_by_process": "one sampler device count per process, where hosts "
                                       "differ (e.g. (2, 0, 4, 4)); replaces the two above; () "
                                       "= them",
    "mesh.sampler_tensor_parallel": "devices per sampler replica (tensor parallel within a "
                                    "host); 0 = each process's sampler devices are one replica",
    "mesh.weight_transfer": 'how those samplers get each weight version: "device" (gathered '
                            'layers placed device to device) or "host" (through host memory); '
                            "LoRA adapters always go through host memory",
    "mesh.hub_host": "where process 0's rollout hub for those samplers listens; \"\" = all "
                     "interfaces, reached by process 0's host name",
    "mesh.trainer.data": "trainer mesh: data-parallel axis size (-1 = the remaining devices)",
    "mesh.trainer.fsdp": "trainer mesh: fully-sharded axis size (-1 = the remaining devices)",
    "mesh.trainer.tensor": "trainer mesh: tensor-parallel axis size",
    # rl.pipeline
    "rl.pipeline.mode": '"async" (AgentRL) or "sync" (the baseline: generate, then train)',
    "rl.pipeline.steps": "optimizer steps of the RL stage",
    "rl.pipeline.groups_per_step": "groups (prompts) the trainer waits for each step",
    "rl.pipeline.max_groups_per_step": "cap on the groups taken per step; None takes every "
                                       "complete group (AgentRL drains its buffer)",
    "rl.pipeline.group_size": "samples per prompt, G (GRPO's group)",
    "rl.pipeline.dynamic_sampling": "discard groups whose shaped rewards are all equal and draw "
                                    "others until groups_per_step have variance (DAPO)",
    "rl.pipeline.max_draws_per_step": "dynamic sampling: at most this many groups drawn for one "
                                      "step (then it trains on those with variance)",
    "rl.pipeline.curriculum.enabled": "learnability curriculum: draws prefer train indices whose "
                                      "running pass rate is strictly between 0 and 1",
    "rl.pipeline.curriculum.prefer": "curriculum: probability that a draw goes to a learnable "
                                     "index of its task (tasks keep their share)",
    "rl.pipeline.curriculum.window": "curriculum: groups per index in its running pass rate",
    "rl.pipeline.rollout_workers": "groups in flight at once (× G episodes)",
    "rl.pipeline.max_staleness": "weight versions generation may run ahead of training; older "
                                 "groups are dropped",
    "rl.pipeline.stale_policy_ratio": "cross-policy sampling: share of turns generated by the "
                                      "stale snapshot (0 disables it)",
    "rl.pipeline.stale_every": "steps between refreshes of the stale snapshot",
    "rl.pipeline.seed": "the task stream's shuffles and the episodes' sampling seeds",
    # rl.sampling, rl.limits
    "rl.sampling.temperature": "sampling temperature (AgentRL: 0.8)",
    "rl.sampling.top_p": "nucleus sampling; 1.0 disables it",
    "rl.sampling.top_k": "top-k sampling; 0 disables it",
    "rl.limits.max_turns": "assistant turns per episode; more ends it with `task limit reached`",
    "rl.limits.max_context_tokens": "tokens per episode (prompt + all turns); more ends it with "
                                    "`agent context limit`",
    "rl.limits.max_new_tokens": "tokens per assistant turn",
    # rl.engine
    "rl.engine.max_batch": "sampler decode slots (requests decoding at once)",
    "rl.engine.page_size": "tokens per KV page",
    "rl.engine.num_pages": "pages in the KV pool, shared by all episodes",
    "rl.engine.max_context": "longest sequence the sampler holds (≥ limits.max_context_tokens)",
    "rl.engine.prefill_buckets": "prefill lengths (compiled shapes); a prompt's new tokens "
                                 "are cut into chunks of these, not padded up to one",
    "rl.engine.prefill_call_tokens": "a prefill call's fixed cost in positions, weighed "
                                     "against padding when cutting prompts into chunks; large: "
                                     "as few calls as possible, padded up",
    "rl.engine.context_buckets": "context widths a decode step reads (max_context is added)",
    "rl.engine.decode_call_tokens": "a decode call's fixed cost in row-tokens of context, "
                                    "weighed against padded context when splitting the "
                                    "running rows into calls by context; -1: from the model's "
                                    "bytes; large: one call for all rows",
    "rl.engine.batch_buckets": "decode batch sizes (max_batch is added)",
    "rl.engine.prefix_cache": "share the KV of common prompt prefixes (system prompts, a "
                              "group's prompt) between requests, keyed by weights",
    "rl.engine.steps_per_sync": "decode steps per device call (the host syncs once per chunk)",
    "rl.engine.prefill_batch_buckets": "prompts prefilled together in one device call (rows; "
                                       "capped at max_batch)",
    "rl.engine.max_prefill_tokens": "the most padded tokens (rows x length bucket) one prefill "
                                    "call computes; long chunks go in fewer rows; 0 = no cap",
    "rl.engine.in_flight": 'turns running at a weight update: "finish" on the weights they '
                           'started with, or "abort" (restart on the new ones)',
    "rl.engine.max_stop_ids": "stop token ids per request the device checks",
    "rl.engine.compute_dtype": "the sampler's weights, KV pool and products in this dtype "
                               "(e.g. bfloat16: products accumulate in fp32, logits fp32), "
                               "cast once as weights are installed; None: the model's; "
                               '"auto": bf16 where the host runs bf16 products natively',
    "rl.tasks": "the tasks RL draws episodes from (train splits); empty: every served task. "
                "Evaluation covers every served task either way",
    "rl.engine.seed": "seeds requests that bring none",
    # rl.trainer
    "rl.trainer.temperature": "logits / temperature in the trainer's log-probs; unset: "
                              "`rl.sampling.temperature` (1 when greedy), the distribution "
                              "sampled from; another value is refused",
    "rl.trainer.logprob_chunk": "sequence chunk of the vocabulary projection (memory)",
    "rl.trainer.logprob_keep_bytes": "keep a micro-batch's fp32 logits for the backward pass "
                                     "up to this many bytes (else recomputed; 0: always)",
    "rl.trainer.logprob_min_positions": ("project only the positions the loss reads onto the "
                                         "vocabulary, at least this many per row (0: all)"),
    "rl.trainer.remat": "recompute each block in the backward pass (memory for compute)",
    "rl.trainer.compute_dtype": 'e.g. "bfloat16"; None computes in the parameters\' fp32; '
                                '"auto": bf16 where the host runs bf16 products natively',
    "rl.trainer.seq_buckets": "packed row lengths of a train micro-batch (compiled shapes)",
    "rl.trainer.tokens_per_micro": ("tokens per micro-batch (gradient accumulation); the last "
                                    "one holds only the rows it needs"),
    "rl.trainer.loss.clip_eps_low": "PPO clip: lower ε of the ratio",
    "rl.trainer.loss.clip_eps_high": "PPO clip: upper ε of the ratio",
    "rl.trainer.loss.dual_clip_c": "dual-clip bound c for negative advantages; None or ≤ 1 "
                                   "disables it",
    "rl.trainer.loss.decoupled": "decoupled PPO (AReaL): clip against proximal log-probs when "
                                 "the batch carries them",
    "rl.trainer.loss.tis_cap": "truncated importance sampling: cap on the behaviour weight; "
                               "None disables it",
    "rl.trainer.loss.kl_coef": "weight of the KL term to the frozen reference (0: no "
                               "reference model)",
    "rl.trainer.loss.kl_estimator": '"k1", "k2" or "k3"',
    "rl.trainer.loss.entropy_coef": "entropy bonus weight",
    # rl.advantages, rl.checkpoint
    "rl.advantages.incomplete_penalty": "reward of every episode that does not end `completed`",
    "rl.advantages.penalty_needs_reward": "the penalty only in groups where some completed "
                                          "episode earned a reward (elsewhere giving up early "
                                          "and running out of turns are equal)",
    "rl.advantages.eps": "ε in the GRPO and task normalisation denominators",
    "rl.advantages.task_adv_norm": "task advantage normalisation: z-score the token "
                                   "advantages of each task in the batch",
    "rl.advantages.filter_zero_variance": "drop groups whose rewards are all equal (no GRPO "
                                          "signal)",
    "rl.checkpoint.every": "steps between checkpoints (the last step is always saved)",
    "rl.checkpoint.keep": "checkpoints kept",
    "rl.checkpoint.keep_period": "also keep every checkpoint whose step is a multiple of this (0: "
                                 "none; set from eval.select_every)",
    # eval, export
    "eval.tasks": "tasks evaluated after RL (single-task ablations: all five)",
    "eval.per_task": "test indices per task, spread evenly over the split "
                     "(evaluation/protocol.py); None: all",
    "eval.validation_per_task": "held-out train indices per task (the validation slice, never "
                                "drawn in RL), for decisions",
    "eval.validate": "also evaluate the validation slice before and after RL",
    "eval.select_every": "the final policy is the RL checkpoint, of every N-th step and the "
                         "last, with the best validation success (0: the last step's)",
    "eval.temperature": "sampling temperature of the evaluation (AgentRL: 0.8)",
    "eval.runs": "passes over each task (k; success reported as mean ± std)",
    "eval.concurrency": "evaluation episodes in flight",
    "eval.before_rl": "evaluate the starting policy first",
    "eval.after_rl": "evaluate the trained policy",
    "export.dir": 'where the trained policy is written as an HF directory; "" = '
                  "run_dir/final_model",
    "export.dtype": "dtype of the exported weights",
}
for _field, _meaning in OPTIMIZER.items():
    MEANINGS[f"sft.optimizer.{_field}"] = MEANINGS[f"rl.trainer.optimizer.{_field}"] = _meaning
for _field, _meaning in LORA.items():
    MEANINGS[f"sft.lora.{_field}"] = MEANINGS[f"rl.trainer.lora.{_field}"] = _meaning

# `launch.eval`'s config (configs/eval.py): None takes the evaluated run's value of the key.
EVAL_MEANINGS: dict[str, str] = {
    "checkpoint": "required: an HF model directory, a model-zoo name, or a launch.local run "
                  "directory",
    "step": "with a run directory: the RL checkpoint step whose parameters are evaluated; "
            "None: final_model, else the latest checkpoint",
    "out": 'output directory; "" = RUN_DIR/eval_final or RUN_DIR/eval_step_N for a run, '
           "else runs/eval",
    "name": "file stem of the outputs (NAME.json, NAME.md)",
    "seed": "seeds the episodes' sampling",
    "env.controller_url": 'an AgentRL-compatible controller to use; "" starts a sandboxed '
                          "fleet of eval.split workers",
    "env.tasks": "tasks evaluated (folder names, or a name the controller serves as it is); "
                 "None: the run's, else AgentBench-FC's five",
    "env.sandbox": "each started worker in its own bubblewrap sandbox",
    "env.allow_root_fallback": "a launcher that is not host root: start the OS task with the "
                               "seeded root instead of refusing",
    "env.concurrency": "episodes one started worker holds at once",
    "model.parser": 'tool-call format; None: the run\'s, else "hermes"',
    "eval.subset": '"test" (eval.split, spread evenly) or "validation" (the held-out slice '
                   "of the run's train split)",
    "eval.split": "the split evaluated with subset test (controller name TASK-split)",
    "eval.per_task": "indices per task (evaluation/protocol.py); None: the run's, else every "
                     "test index / protocol.VALIDATION_PER_TASK",
    "eval.runs": "passes over each index (k; success reported as mean ± std)",
    "eval.temperature": "sampling temperature of the evaluation (AgentRL: 0.8)",
    "eval.concurrency": "evaluation episodes in flight",
    "rl.limits.max_turns": "turn limit; None: the run's, else rl_stage's default",
    "rl.limits.max_context_tokens": "tokens per episode; None: the run's, else rl_stage's "
                                    "default",
    "rl.limits.max_new_tokens": "tokens per turn; None: the run's, else rl_stage's default",
    "rl.engine.max_batch": "sampler decode slots; None: the run's, else rl_stage's default",
    "rl.engine.num_pages": "KV pages; None: the run's, else rl_stage's default",
    "rl.engine.prefix_cache": "share prompt-prefix KV between episodes; None: the run's, "
                              "else rl_stage's default (on); False prefills every prompt whole",
    "rl.engine.max_prefill_tokens": "padded tokens of one prefill call, the engine's memory "
                                    "peak; None: the run's, else rl_stage's default (0: no cap)",
}

# Keys whose agentbench_fc value is set by each model file, not by base.py.
PER_MODEL = {"name": "per model file", "model.parser": "per model file",
             "model.architecture": "per model file",
             "run_dir": '`"runs/agentbench_fc/NAME"`'}


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if hasattr(value, "items"):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


class Nested(str):
    """A key whose value is a whole config, described in a row of its own."""


def job_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """A local job config's keys, flat, with its nested game stage (`game`) as one key."""
    keys = {k: v for k, v in flatten(config).items() if not k.startswith("game.")}
    if "game" in config:
        keys["game"] = Nested("a job config")
    return keys


def show(value: Any) -> str:
    if isinstance(value, Nested):
        return str(value)
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, float):
        return f"`{value:.6g}`"   # 5e-06, not 4.9999999999999996e-06
    if isinstance(value, list | tuple):
        return "`(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")`"
    return f"`{value}`"


def section_of(key: str) -> str:
    return key.rsplit(".", 1)[0] if "." in key else ""


def diff(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in other.items() if k not in base or base[k] != v}


def agentbench_fc() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """base.py's keys, and each model file's changes to them ({} when the folder is absent)."""
    folder = REPO_ROOT / "configs" / "agentbench_fc"
    if not (folder / "base.py").exists():
        return {}, []
    base = importlib.import_module("configs.agentbench_fc.base")
    models = sorted(p.stem for p in folder.glob("*.py")
                    if p.stem not in ("__init__", "base", "ablations"))
    rows = []
    for model in models:
        config = importlib.import_module(f"configs.agentbench_fc.{model}").get_config()
        reference = flatten(base.get_config(config.name, config.model.parser))
        rows.append((f"`agentbench_fc/{model}.py`", diff(reference, flatten(config))))
    return flatten(base.get_config("NAME", "PARSER")), rows


def render() -> str:
    from configs import eval as eval_config
    from configs import local_default, local_openai_agent, local_smollm2

    main_job = local_default.get_config()
    game = flatten(main_job.game)
    local = job_keys(main_job)
    fc, model_rows = agentbench_fc()
    evaluation = flatten(eval_config.get_config())
    missing = sorted([k for k in {*local, *fc} if k not in MEANINGS]
                     + [f"{k} (configs/eval.py)" for k in evaluation if k not in EVAL_MEANINGS])
    if missing:
        raise SystemExit("keys without a meaning in docs/make_config_reference.py: "
                         + ", ".join(missing))

    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python docs/make_config_reference.py` from the live configs; edit "
        "the meanings there, not here. -->",
        "",
        "Runs are configured by `ml_collections` config files under `configs/`, chosen and "
        "overridden with flags:",
        "",
        "```bash",
        "python -m launch.local --config=configs/local_default.py          # the default",
        "python -m launch.local --config=configs/local_default.py:fast     # a mode (CI)",
        "python -m launch.local --config.rl.pipeline.steps=60 --config.run_dir=runs/longer",
        "python -m launch.local \"--config.env.tasks=('db','kg')\"            # tuples: literals",
        "python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\",
        "    --config.model.path=/models/Qwen2.5-7B-Instruct --config.env.controller_url=URL",
        "python -m launch.eval --config.checkpoint=runs/local --config.eval.per_task=40",
        "```",
        "",
        "Two families of configs exist:",
        "",
        "- **local** (`configs/local_default.py`, `configs/local_smollm2.py`, "
        "`configs/local_openai_agent.py`): the main job "
        "`launch.local` on one machine: its own sandboxed fleet, oracle demonstrations, a warm "
        "start, async multi-task RL, evaluation before and after. A run's `config.json` also "
        "gives `launch.eval` its defaults (tasks, parser, limits, engine).",
        "- **agentbench_fc** (`configs/agentbench_fc/`): the AgentRL paper's runs on a TPU pod "
        "with `launch.tpu_pod` ([tpu_pod.md](tpu_pod.md)): HF models, an external environment "
        "fleet, multi-host meshes, export.",
        "",
        "In the tables, *local* is `configs/local_default.py` and *agentbench_fc* is "
        "`configs/agentbench_fc/base.py` before a model file's changes (listed at the end); "
        "— means the family has no such key; `None` is an unset placeholder.",
    ]
    keys = sorted({*local, *fc}, key=lambda k: (section_of(k) != "", section_of(k), k))
    current = None
    for key in keys:
        section = section_of(key)
        if section != current:
            current = section
            out += ["", f"## `{section}`" if section else "## Top level", "",
                    "| key | local | agentbench_fc | meaning |", "| --- | --- | --- | --- |"]
        local_value = show(local[key]) if key in local else "—"
        fc_value = "—" if key not in fc else PER_MODEL.get(key, show(fc[key]))
        out.append(f"| `{key.rsplit('.', 1)[-1]}` | {local_value} | {fc_value} | "
                   f"{MEANINGS[key]} |")

    fast = job_keys(local_default.get_config("fast"))
    rows = [("`local_default.py:fast`", diff(local, fast)),
            ("`local_default.py` `game`", diff(local, game)),
            ("`local_smollm2.py`", diff(local, flatten(local_smollm2.get_config()))),
            ("`local_openai_agent.py` (over `:fast`)",
             diff(fast, flatten(local_openai_agent.get_config()))),
            *model_rows]
    out += ["", "## Modes and variants", "", "Each changes a few keys of its base config:", "",
            "| config | changes |", "| --- | --- |"]
    for name, changes in rows:
        out.append(f"| {name} | " + ", ".join(f"`{k}` = {show(v)}"
                                              for k, v in sorted(changes.items())) + " |")
    if fc:
        out += ["", "`configs/agentbench_fc/ablations.py:ABLATION[,MODEL]` (default model "
                "`qwen25_14b`) changes one thing of a model file: `no_cross_policy` sets "
                "`rl.pipeline.stale_policy_ratio` = 0; `no_task_adv_norm` sets "
                "`rl.advantages.task_adv_norm` = False; `single_task_TASK` trains on "
                "`env.tasks` = (TASK,) and still evaluates on all five; each gets its own "
                "`run_dir`."]
    out += ["", "## `launch.eval` (`configs/eval.py`)", "",
            "The evaluation of any checkpoint (docs/evaluation.md). A key that is `None` here "
            "takes the evaluated run's value of the same key (its `config.json`) when "
            "`checkpoint` is a `launch.local` run directory, else the default named.", "",
            "| key | default | meaning |", "| --- | --- | --- |"]
    for key in sorted(evaluation, key=lambda k: (section_of(k) != "", section_of(k), k)):
        out.append(f"| `{key}` | {show(evaluation[key])} | {EVAL_MEANINGS[key]} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/configuration.md differs from a fresh render")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            raise SystemExit(f"{OUTPUT} is out of date: run python docs/make_config_reference.py")
        print(f"{OUTPUT} is up to date")
        return
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
