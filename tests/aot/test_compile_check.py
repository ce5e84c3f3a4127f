"""Ahead-of-time compilation for a TPU slice on this CPU (libtpu's compiler, no TPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest
from flax import nnx

pytest.importorskip("libtpu", reason="the TPU compiler comes with jax's `tpu` extra")

from agentrl_jax.aot import hardware, programs, report  # noqa: E402
from agentrl_jax.models.config import ModelConfig  # noqa: E402
from agentrl_jax.models.decoder import Decoder  # noqa: E402
from agentrl_jax.sampling.engine import EngineConfig, SamplingEngine  # noqa: E402
from agentrl_jax.sampling.programs import SamplerPrograms  # noqa: E402
from configs.agentbench_fc import base  # noqa: E402

TOPOLOGY = "v5p:2x2x1"  # one host of 4 chips


def tiny_pod_config():
    """A paper-shaped pod config over a scratch model of ~100k parameters: one sampler
    replica over 2 chips (tensor parallel), the trainer FSDP over the other 2."""
    c = base.get_config("tiny", parser="hermes")
    c.model.update(source="scratch", vocab_size=512)
    c.model.scratch.update(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=16)
    c.mesh.update(sampler_devices=2, trainer=dict(data=1, fsdp=-1, tensor=1))
    c.rl.trainer.update(seq_buckets=(256,), tokens_per_micro=1024)
    c.rl.engine.update(max_batch=8, num_pages=64, max_context=256, prefill_buckets=(64, 256),
                       prefill_batch_buckets=(1, 4), context_buckets=(256,),
                       batch_buckets=(8,), prefill_call_tokens=32)
    return c


@pytest.fixture(scope="module")
def lowered():
    c = tiny_pod_config()
    return c, programs.run_programs(c, hardware.topology_devices(TOPOLOGY))


def by_name(items, name):
    return next(p for p in items if p.name == name)


def test_topologies_name_their_chips_and_hosts():
    devices = hardware.topology_devices("v5p:2x2x2")
    assert len(devices) == 8 and {d.process_index for d in devices} == {0, 1}
    assert hardware.chip_of(devices[0]).name == "v5p"
    one = hardware.topology_devices("v6e:1x1")
    assert len(one) == 1 and hardware.chip_of(one[0]).name == "v6e"
    with pytest.raises(ValueError, match="CHIP:SHAPE"):
        hardware.topology_devices("v9x:2x2")


def test_the_train_step_and_the_decode_step_compile_within_a_chip(lowered):
    c, progs = lowered
    names = [p.name for p in progs]
    # 1024 tokens a micro-batch at length 256: 4 rows (a multiple of the 2 FSDP devices)
    assert names[:3] == ["train_gradient_4x256", "train_accumulate_4x256", "train_apply"]
    assert [p.name for p in programs.run_programs(
        c, hardware.topology_devices(TOPOLOGY), every_bucket=False)][:2] == [
        "train_accumulate_4x256", "train_apply"]
    assert {p.role for p in progs} == {programs.TRAINER, programs.SAMPLER}  # one host: no gather
    cfg = programs.model_config(c.model)
    chip = hardware.CHIPS["v5p"]
    gradient = report.analyse(by_name(progs, "train_gradient_4x256"), chip,
                              model_flops=6.0 * cfg.num_params() * 1024)
    # Arguments: at least the parameters' FSDP half (fp32) and the bf16 KL reference's half.
    params_per_chip = cfg.num_params() * (4 + 2) / 2
    assert params_per_chip <= gradient.argument_bytes < 8 * params_per_chip
    assert gradient.output_bytes >= cfg.num_params() * 4 / 2  # the fp32 gradient's half
    assert gradient.temp_bytes > 0 and gradient.fits
    # A forward and backward of 1024 tokens over 2 chips, plus remat's and the reference's
    # forwards: between the 6·N·D model FLOPs and a few times them.
    assert 1.0 <= gradient.flops / (6 * cfg.num_params() * 1024 / 2) < 4.0
    assert 0 < gradient.mfu_bound <= 1.0
    decode = report.analyse(by_name(progs, "decode_8x8step_ctx16p"), chip)
    pool_bytes = 2 * 2 * 64 * 16 * 16 * 4  # k and v, layers, kv heads, slots, head dim, fp32
    assert decode.argument_bytes >= pool_bytes / 2  # the pool's kv heads split over 2 chips
    assert decode.alias_bytes >= pool_bytes / 2  # donated: updated in place
    assert decode.flops > 0 and decode.fits


def test_the_compiled_programs_keep_the_mesh_rules_shardings(lowered):
    _, progs = lowered
    gradient = by_name(progs, "train_gradient_4x256").traced.lower().compile()
    params = jax.tree.map(lambda s: tuple(s.spec), gradient.input_shardings[0][0])
    # sharding.DEFAULT_RULES: vocab, heads and MLP over `tensor`, the model dimension over
    # `fsdp`, the stacked layers' axis and the norms replicated
    assert params["embed"] == ("tensor", "fsdp")
    assert params["final_norm"] == (None,)
    layers = params["layers"]
    for name in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
        assert layers[name] == (None, "fsdp", "tensor"), name
    for name in ("o_proj", "down_proj"):
        assert layers[name] == (None, "tensor", "fsdp"), name
    assert layers["input_norm"] == layers["mlp_norm"] == (None, None)
    mesh = gradient.input_shardings[0][0]["embed"].mesh
    assert dict(mesh.shape) == {"data": 1, "fsdp": 2, "tensor": 1}
    # the batch over the data and FSDP devices; the gradient comes out as the parameters are
    assert tuple(gradient.input_shardings[0][1].tokens.spec)[0] in ("fsdp", ("data", "fsdp"))
    grads = jax.tree.map(lambda s: tuple(s.spec), gradient.output_shardings[0])
    assert grads == params
    # the update hands the state back on the shardings it took: nothing moves between steps
    apply = by_name(progs, "train_apply").traced.lower().compile()
    state_in = jax.tree.map(lambda s: tuple(s.spec), apply.input_shardings[0][0])
    state_out = jax.tree.map(lambda s: tuple(s.spec), apply.output_shardings[0])
    assert state_in == state_out and state_in.params == params
    # the sampler's KV pool: kv heads split over its 2 tensor-parallel chips, donated
    decode = by_name(progs, "decode_8x8step_ctx16p").traced.lower().compile()
    pool = decode.input_shardings[0][1]
    assert tuple(pool.k.spec)[1] == tuple(pool.v.spec)[1] == "tensor"
    assert pool.k.mesh.shape["tensor"] == 2


def test_calls_are_the_shapes_warmup_compiles():
    config = EngineConfig(max_batch=4, num_pages=32, max_context=128, prefill_buckets=(32,),
                          prefill_batch_buckets=(1,), context_buckets=(64,),
                          batch_buckets=(1, 4), steps_per_sync=4)
    model = Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
    engine = SamplingEngine(model, config)
    engine.warmup(constrained=True)
    calls = SamplerPrograms(model.cfg, config, None, None).calls(constrained=True)
    assert engine.num_compiled() == len(calls) == len({call.name for call in calls})


def test_compile_only_fails_naming_the_program_that_does_not_fit(tmp_path):
    # The game's local job, its shapes cut down, on one v5e chip (16 GiB) with a KV pool of
    # 2M pages of 16 slots: 4 layers × 2 kv heads × 32 dims × 2 (k, v) × 4 bytes a slot, 32 GiB.
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    small = ["--config.rl.trainer.seq_buckets=(256,)", "--config.rl.trainer.tokens_per_micro=512",
             "--config.rl.engine.max_context=256", "--config.rl.engine.max_batch=8",
             "--config.rl.engine.prefill_buckets=(64,)", "--config.rl.engine.context_buckets=()",
             "--config.rl.engine.batch_buckets=(8,)", "--config.rl.engine.num_pages=2097152"]
    result = subprocess.run(
        [sys.executable, "-m", "launch.tpu_pod", "--config=configs/local_tictactoe.py",
         "--compile_only", "--topology=v5e:1x1", "--noevery_bucket",
         f"--compile_report={out}", *small],
        capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "does not fit v5e:1x1" in result.stderr
    data = json.loads(out.read_text())
    assert not data["fits"] and data["not_fitting"]
    assert all(name.split(":")[0] in result.stderr for name in data["not_fitting"])
    failing = [r for r in data["program_reports"] if not r["fits"]]
    assert {r["role"] for r in failing} >= {"sampler"}
    assert all(r["total_bytes"] > 16e9 for r in failing)


def test_resident_bytes_pass_over_a_slice_without_compiling():
    from benchmarks.tpu_compile import load, screen

    # Qwen2.5-32B's 2-chip sampler replica holds three bf16 copies of its weights (current,
    # next, stale snapshot): 3 × 32.8e9 × 2 bytes / 2 chips = 92 GiB, over 95 with its KV pool;
    # in fp32 (the engine's compute_dtype unset) they would be twice that.
    reason = screen(load("qwen25_32b"), "v5p:2x2x4")
    assert reason is not None and reason.startswith("resident sampler")
    resident = programs.resident_bytes(load("qwen25_32b"), hardware.topology_devices("v5p:2x2x4"))
    cfg = programs.model_config(load("qwen25_32b").model)
    assert 3 * cfg.num_params() * 2 / 2 < resident["sampler"] < 3 * cfg.num_params() * 4 / 2
    # Qwen2.5-3B on one host: nothing rules it out before compiling
    assert screen(load("qwen25_3b"), "v5p:2x2x1") is None
    # a layout the slice cannot make is named as such
    assert screen(load("qwen25_7b"), "v6e:1x1").startswith("layout")
