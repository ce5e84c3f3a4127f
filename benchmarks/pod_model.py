"""Capacity model of pod-scale RL: `python -m benchmarks.pod_model` (no arguments).

A worked estimate, from per-chip figures, of what disaggregated RL yields for Qwen2.5-7B and
Qwen2.5-32B on a TPU v5p slice and on one 8×H100 host, for AgentRL's workload (2048
trajectories per step, up to 20 turns, 8k context): decode tokens/s per sampler replica, the
step time split into sample / train / weight sync, and the sampler/trainer chip split that
minimises the step time. It compares two layouts in the same run:

  leader_only  samplers on process 0's chips only, weights
               all-gathered to process 0's host memory and copied back onto its sampler chips;
  every_host   every host gives `sampler_devices_per_host` chips to samplers,
               and weights go device to device (all-gather in the trainer mesh, then a copy
               from each host's trainer chips to its own sampler chips).

It is a roofline model, not a measurement: decode is bound by HBM bandwidth (weights plus KV
read per step), training by matmul throughput, sync by interconnect bandwidth. Every input is
in `ASSUMED` (hardware data-sheet figures and workload shape: marked as assumptions) or
`measured()` (read from benchmarks/results/*.json, CPU figures of this repository, used only as
efficiency ratios). The JSON records both, so a reader sees what each figure rests on; rerun
with measured accelerator figures in place of the assumed efficiencies when a chip is at hand.
Writes benchmarks/results/pod_model.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

from agentrl_jax.aot import hardware
from agentrl_jax.models.published import published_config

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

# ----------------------------------------------------------------------------- inputs

# Data-sheet figures (assumed: not measured here; no accelerator was available). The v5p's
# memory, bandwidth and peak are `agentrl_jax.aot.hardware`'s, which the compiler checks use.
_V5P = hardware.CHIPS["v5p"]
CHIPS = {
    "v5p": dict(hbm_gb=_V5P.hbm_bytes / 1e9, hbm_gbps=_V5P.hbm_bytes_per_s / 1e9,
                bf16_tflops=_V5P.bf16_flops_per_s / 1e12, ici_gbps=600.0,
                host_link_gbps=25.0, chips_per_host=4),
    "h100": dict(hbm_gb=80.0, hbm_gbps=3350.0, bf16_tflops=989.0, ici_gbps=450.0,
                 host_link_gbps=25.0, chips_per_host=8),
}
# Slices: Cloud TPU names v5p slices by TensorCores (2 per chip): v5p-64 is 32 chips on 8 hosts.
# v5p-128 is 16 hosts × 4 chips.
SLICES = {
    "v5p-64": dict(chip="v5p", chips=32),
    "v5p-128": dict(chip="v5p", chips=64),
    "8xH100": dict(chip="h100", chips=8),
}
def _shape(name: str) -> dict:
    cfg = published_config(name)
    return dict(params=float(cfg.num_params()), layers=cfg.num_layers,
                kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, hidden=cfg.hidden_size)


MODELS = {  # the configs/agentbench_fc shapes (`agentrl_jax.models.published`)
    "qwen25_7b": _shape("Qwen/Qwen2.5-7B-Instruct"),
    "qwen25_32b": _shape("Qwen/Qwen2.5-32B-Instruct"),
}
ASSUMED = dict(
    # workload (AgentRL: 256 prompts × G=8 = 2048 trajectories, <= 20 turns, 8192 tokens)
    trajectories_per_step=2048,
    group_size=8,
    max_turns=20,
    max_context=8192,
    mean_turns=8.0,               # assumed: AgentBench-FC episodes end well before 20 turns
    new_tokens_per_turn=150.0,    # assumed: a tool call with a short thought
    env_tokens_per_turn=300.0,    # assumed: an observation
    prompt_tokens=1500.0,         # assumed: system prompt, tools, task (shared by a group)
    env_latency_s=0.5,            # assumed per-turn environment time (benchmarks/pipeline's)
    # efficiencies (assumed; the train MFU comes from the CPU measurement when present)
    decode_hbm_efficiency=0.6,    # share of HBM bandwidth a decode step reaches
    prefill_mfu=0.5,
    train_mfu=0.4,
    ici_efficiency=0.7,
    # precision as the paper configs run it: sampler weights, compute and KV pages in bf16
    # (`rl.engine.compute_dtype`); `fp32_sampler` is the engine without it.
    sampler_param_bytes=2,
    kv_bytes=2,
    trainer_bytes_per_param=16,   # fp32 weights + Adam moments + fp32 gradient
    # the frozen bf16 KL reference beside them (kl_coef > 0 without LoRA), which the
    # compiler's figures showed this model had left out
    reference_bytes_per_param=2,
    # weight copies a sampler replica holds at once: the current version, the next one
    # placed while requests in flight finish on the current, and cross-policy sampling's
    # stale snapshot (`agentrl_jax.aot.programs`); the compiler's figures showed one
    # copy was an undercount
    sampler_weight_copies=3,
    trainer_activation_share=0.25,  # of trainer HBM kept free for activations (remat on)
    sampler_reserve_share=0.1,    # of sampler HBM kept free (compiled steps, buffers)
    max_batch=256,                # engine decode slots per replica cap
    kl_reference_forward=True,    # the KL term's reference log-probs (kl_coef 1e-4)
)


def measured() -> dict[str, float]:
    """Figures of this repository's CPU benchmarks used as ratios (absent files: skipped)."""
    out = {}
    train = RESULTS / "train_step.json"
    if train.exists():
        data = json.loads(train.read_text())
        out["train_mfu_vs_matmul_cpu"] = float(data["smollm2_135m"]["mfu_vs_adjacent_matmul"])
    pipeline = RESULTS / "pipeline.json"
    if pipeline.exists():
        data = json.loads(pipeline.read_text())
        out["async_vs_sync_wall_cpu"] = float(data["async_vs_sync_wall"])
    sync = RESULTS / "pod_sync.json"
    if sync.exists():
        data = json.loads(sync.read_text())
        out["device_vs_host_sync_cpu"] = float(data["device_vs_host_speedup"])
    return out


# ----------------------------------------------------------------------------- the model


@dataclasses.dataclass
class Workload:
    tokens_per_trajectory: float  # final context (prompt + turns), capped at max_context
    generated_per_trajectory: float
    prefill_per_group: float  # prompt once per group (prefix cache), env tokens per member

    @classmethod
    def agentrl(cls, a: dict) -> Workload:
        turns = min(a["mean_turns"], a["max_turns"])
        total = min(a["max_context"], a["prompt_tokens"]
                    + turns * (a["new_tokens_per_turn"] + a["env_tokens_per_turn"]))
        generated = turns * a["new_tokens_per_turn"]
        prefill = a["prompt_tokens"] + a["group_size"] * turns * a["env_tokens_per_turn"]
        return cls(total, generated, prefill)


def kv_bytes_per_token(m: dict, a: dict) -> float:
    return 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * a["kv_bytes"]


def replica(chip: dict, m: dict, a: dict, tp: int, w: Workload) -> dict | None:
    """One tensor-parallel sampler replica on `tp` chips of one host: the decode batch its KV
    room holds, and its decode rate at that full batch."""
    weights = m["params"] * a["sampler_param_bytes"]
    kv_room = (tp * chip["hbm_gb"] * 1e9 * (1 - a["sampler_reserve_share"])
               - weights * a["sampler_weight_copies"])
    if kv_room <= 0:
        return None
    batch = min(a["max_batch"], int(kv_room / (kv_bytes_per_token(m, a) * mean_context(a, w))))
    if batch < 1:
        return None
    step_s = decode_step_seconds(chip, m, a, tp, batch, w)
    prefill_tok_s = tp * chip["bf16_tflops"] * 1e12 * a["prefill_mfu"] / (2 * m["params"])
    return dict(tp=tp, batch=batch, decode_step_s=step_s, decode_tok_s=batch / step_s,
                decode_tok_s_per_sequence=1 / step_s, prefill_tok_s=prefill_tok_s,
                weights_gb=weights / 1e9)


def mean_context(a: dict, w: Workload) -> float:
    """The mean context of a sequence in decode, over a trajectory's life."""
    return (a["prompt_tokens"] + w.tokens_per_trajectory) / 2


def decode_step_seconds(chip: dict, m: dict, a: dict, tp: int, batch: int,
                        w: Workload) -> float:
    """One decode step of `batch` sequences: weights plus their KV read from HBM, or the
    matmuls, whichever is slower."""
    weights = m["params"] * a["sampler_param_bytes"]
    kv = batch * mean_context(a, w) * kv_bytes_per_token(m, a)
    memory_s = (weights + kv) / (tp * chip["hbm_gbps"] * 1e9 * a["decode_hbm_efficiency"])
    compute_s = 2 * m["params"] * batch / (tp * chip["bf16_tflops"] * 1e12 * a["prefill_mfu"])
    return max(memory_s, compute_s)


def replicas_that_fit(chip: dict, m: dict, a: dict, w: Workload) -> list[dict]:
    """Replicas of each tensor-parallel size (a power of two within a host) that fit the model
    with a decode batch of at least 8."""
    out, tp = [], 1
    while tp < chip["chips_per_host"] or (tp == 1 and chip["chips_per_host"] == 1):
        r = replica(chip, m, a, tp, w)
        if r is not None and r["batch"] >= 8:
            out.append(r)
        tp *= 2
    return out


def sample_seconds(chip: dict, m: dict, r: dict, replicas: int, a: dict,
                   w: Workload) -> tuple[float, int]:
    """A step's rollouts and the decode batch per replica: the step's trajectories spread over
    the replicas (at most `r["batch"]` at once each); bound by aggregate throughput, or by the
    longest trajectory's own turns in sequence (`max_turns`), whichever is longer."""
    n = a["trajectories_per_step"]
    batch = min(r["batch"], math.ceil(n / replicas))
    step_s = decode_step_seconds(chip, m, a, r["tp"], batch, w)
    decode = n * w.generated_per_trajectory * step_s / (batch * replicas)
    prefill = n / a["group_size"] * w.prefill_per_group / (r["prefill_tok_s"] * replicas)
    latency = a["max_turns"] * (a["new_tokens_per_turn"] * step_s + a["env_latency_s"])
    return max(decode + prefill, latency), batch


def train_seconds(chip: dict, m: dict, a: dict, chips: int, w: Workload,
                  mfu: float) -> float | None:
    need = m["params"] * (a["trainer_bytes_per_param"] + a["reference_bytes_per_param"])
    have = chips * chip["hbm_gb"] * 1e9 * (1 - a["trainer_activation_share"])
    if chips < 1 or need > have:
        return None
    tokens = a["trajectories_per_step"] * w.tokens_per_trajectory
    flops = 6 * m["params"] * tokens + (2 * m["params"] * tokens if a["kl_reference_forward"]
                                        else 0)
    return flops / (chips * chip["bf16_tflops"] * 1e12 * mfu)


def sync_figures(chip: dict, m: dict, a: dict, trainer_chips: int, sampler_hosts: int,
                 sampler_chips_per_host: int, layout: str) -> dict:
    """Seconds and bytes per host of one weight sync (current policy)."""
    weights = m["params"] * a["sampler_param_bytes"]
    ici = chip["ici_gbps"] * 1e9 * a["ici_efficiency"]
    # per-layer all-gather in the trainer mesh: each trainer chip receives (N-1)/N of weights
    gather_s = weights * (trainer_chips - 1) / max(trainer_chips, 1) / ici
    if layout == "leader_only":
        # one host: device -> host memory, then host -> its sampler chips, over the host link
        link = chip["host_link_gbps"] * 1e9
        copy_s = 2 * weights / link
        return dict(sync_s=gather_s + copy_s, host_memory_bytes_leader=weights,
                    device_bytes_per_sampler_host=weights, hosts_receiving=1)
    # every host: its trainer chips hold the gathered layer; copy to its own sampler chips
    # (each sampler chip takes its 1/tp shard), device to device
    copy_s = weights / (ici * max(sampler_chips_per_host, 1))
    return dict(sync_s=gather_s + copy_s, host_memory_bytes_leader=0.0,
                device_bytes_per_sampler_host=weights, hosts_receiving=sampler_hosts)


def plan(slice_name: str, model_name: str, layout: str, a: dict, mfu: float) -> dict:
    """Every feasible sampler/trainer split of one slice; the best one by step time."""
    s = SLICES[slice_name]
    chip = CHIPS[s["chip"]]
    m = MODELS[model_name]
    w = Workload.agentrl(a)
    hosts = max(1, s["chips"] // chip["chips_per_host"])
    fitting = replicas_that_fit(chip, m, a, w)
    if not fitting:
        return dict(feasible=False, reason="no sampler replica fits one host")
    options = []
    # a host keeps at least one trainer chip (it takes part in every step)
    for r, per_host in ((f, n) for f in fitting
                        for n in range(f["tp"], chip["chips_per_host"], f["tp"])):
        sampler_hosts = hosts if layout == "every_host" else 1
        sampler_chips = per_host * sampler_hosts
        trainer_chips = s["chips"] - sampler_chips
        train = train_seconds(chip, m, a, trainer_chips, w, mfu)
        if train is None:
            continue
        replicas = sampler_chips // r["tp"]
        sample, batch = sample_seconds(chip, m, r, replicas, a, w)
        sync = sync_figures(chip, m, a, trainer_chips, sampler_hosts, per_host, layout)
        # asynchronous pipeline: sampling overlaps training; sync follows each step
        step = max(sample, train + sync["sync_s"])
        options.append(dict(replica=r, sampler_chips_per_host=per_host, sampler_chips=sampler_chips,
                            trainer_chips=trainer_chips, replicas=replicas,
                            decode_batch_per_replica=batch, sample_s=sample,
                            train_s=train, **sync, step_s=step,
                            trajectories_per_hour=a["trajectories_per_step"] * 3600 / step))
    if not options:
        return dict(feasible=False, reason="the trainer's fp32 weights and Adam moments do not "
                    "fit the chips left after one sampler replica")
    best = min(options, key=lambda o: o["step_s"])
    return dict(feasible=True, replica=best["replica"], best=best, splits_considered=len(options),
                hosts=hosts)


def main() -> None:
    from benchmarks.machine_info import machine_info

    figures = measured()
    # The CPU train step reaches this share of its own matmul peak; an accelerator's MFU is
    # lower than that (communication, attention); the assumed figure is capped by it.
    mfu = min(ASSUMED["train_mfu"], figures.get("train_mfu_vs_matmul_cpu", 1.0))
    out: dict = {"assumed": ASSUMED, "chips_assumed": CHIPS, "slices": SLICES,
                 "models": MODELS, "measured_cpu": figures, "train_mfu_used": mfu,
                 "workload": dataclasses.asdict(Workload.agentrl(ASSUMED)),
                 "machine": machine_info()}
    headline: dict[str, float] = {}
    out["headline"] = headline
    variants = {"bf16_sampler": ASSUMED, "fp32_sampler": {**ASSUMED, "sampler_param_bytes": 4}}
    for variant, a in variants.items():
        for slice_name in SLICES:
            for model_name in MODELS:
                key = f"{variant}/{slice_name}/{model_name}"
                layouts = {lay: plan(slice_name, model_name, lay, a, mfu)
                           for lay in ("leader_only", "every_host")}
                out[key] = layouts
                lead, every = layouts["leader_only"], layouts["every_host"]
                if lead.get("feasible") and every.get("feasible"):
                    out[key]["every_host_vs_leader_only_step"] = (lead["best"]["step_s"]
                                                                  / every["best"]["step_s"])
                    headline[f"{key}/every_host_vs_leader_only_step"] = (
                        out[key]["every_host_vs_leader_only_step"])
                if every.get("feasible"):
                    best = every["best"]
                    for name in ("step_s", "sample_s", "train_s", "sync_s",
                                 "sampler_chips_per_host", "trainer_chips"):
                        headline[f"{key}/every_host/{name}"] = best[name]
                    headline[f"{key}/decode_tok_s_per_replica"] = every["replica"]["decode_tok_s"]
                    headline[f"{key}/replica_tp"] = every["replica"]["tp"]
    summary(out)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pod_model.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def summary(out: dict) -> None:
    print(f"{'case':44} {'layout':12} {'tp':>3} {'batch':>5} {'tok/s/rep':>9} "
          f"{'samp/host':>9} {'train':>5} {'sample_s':>8} {'train_s':>7} {'sync_s':>6} "
          f"{'step_s':>7}")
    for key, layouts in out.items():
        if "/" not in key or key == "headline":
            continue
        for layout in ("leader_only", "every_host"):
            p = layouts[layout]
            if not p.get("feasible"):
                print(f"{key:44} {layout:12} infeasible: {p['reason']}")
                continue
            r, b = p["replica"], p["best"]
            print(f"{key:44} {layout:12} {r['tp']:>3} {r['batch']:>5} {r['decode_tok_s']:>9.0f} "
                  f"{b['sampler_chips_per_host']:>9} {b['trainer_chips']:>5} "
                  f"{b['sample_s']:>8.1f} {b['train_s']:>7.1f} {b['sync_s']:>6.2f} "
                  f"{b['step_s']:>7.1f}")
        ratio = layouts.get("every_host_vs_leader_only_step")
        if ratio is not None and not math.isnan(ratio):
            print(f"{'':44} every_host is {ratio:.2f}x faster per step")


if __name__ == "__main__":
    main()
