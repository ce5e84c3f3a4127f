"""Our adapters in PEFT's format against transformers + peft (PyTorch, CPU): export, import."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from agentrl_jax.models import lora, peft_io
from agentrl_jax.models.config import LoraConfig
from agentrl_jax.models.hf_io import load_hf
from tests.models.conftest import hf_tiny_model

peft = pytest.importorskip("peft")

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _randomise(model, seed=0, scale=0.2):
    graphdef, adapters, base = lora.split(model)
    keys = iter(jax.random.split(jax.random.key(seed), len(adapters["layers"])))
    adapters = jax.tree.map(lambda x: scale * jax.random.normal(next(keys), x.shape), adapters)
    return nnx.merge(graphdef, lora.combine(base, adapters))


def _logits(ours, tokens):
    n = tokens.shape[1]
    return np.asarray(ours(jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(n), tokens.shape),
                           jnp.ones(tokens.shape, jnp.int32)))


def _torch_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor(tokens, dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_exported_adapter_loads_in_peft_with_equal_logits(family, tmp_path):
    hf = hf_tiny_model(family)
    hf.save_pretrained(tmp_path / "base")
    ours = _randomise(load_hf(tmp_path / "base", lora=LoraConfig(rank=4, alpha=16.0,
                                                                  targets=TARGETS)))
    peft_io.save_adapter(ours, tmp_path / "adapter", base_model=str(tmp_path / "base"))
    peft_model = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    tokens = np.random.default_rng(0).integers(0, 128, (2, 20)).astype(np.int32)
    expected, base = _torch_logits(peft_model, tokens), _logits(lora.without_adapters(ours), tokens)
    got = _logits(ours, tokens)
    assert np.abs(expected - base).max() > 1e-2  # the adapter matters
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_peft_adapter_imports_with_equal_logits(family, tmp_path):
    hf = hf_tiny_model(family)
    hf.save_pretrained(tmp_path / "base")
    config = peft.LoraConfig(r=8, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"],
                             init_lora_weights=False, lora_dropout=0.0)
    torch.manual_seed(1)
    peft_model = peft.get_peft_model(hf, config).eval()
    peft_model.save_pretrained(tmp_path / "adapter")
    ours = peft_io.load_adapter(load_hf(tmp_path / "base"), tmp_path / "adapter")
    assert ours.cfg.lora == LoraConfig(rank=8, alpha=4.0, targets=("q_proj", "v_proj",
                                                                    "down_proj"))
    tokens = np.random.default_rng(1).integers(0, 128, (2, 16)).astype(np.int32)
    assert np.abs(_logits(ours, tokens) - _torch_logits(peft_model, tokens)).max() <= 1e-4


def test_unsupported_peft_adapters_are_refused(tmp_path):
    for extra in (dict(use_rslora=True), dict(use_dora=True), dict(rank_pattern={"q_proj": 2})):
        config = peft.LoraConfig(r=4, target_modules=["q_proj"], **extra)
        peft.get_peft_model(hf_tiny_model("llama"), config).save_pretrained(tmp_path / "a")
        with pytest.raises(ValueError, match="not supported"):
            peft_io.read_config(tmp_path / "a")
    config = peft.LoraConfig(r=4, target_modules=["q_proj"], alpha_pattern={"q_proj": 2})
    peft.get_peft_model(hf_tiny_model("llama"), config).save_pretrained(tmp_path / "b")
    with pytest.raises(ValueError, match="alpha_pattern"):
        peft_io.read_config(tmp_path / "b")


@pytest.mark.parametrize("targets", [TARGETS, ("q_proj", "up_proj")])
def test_glm4_fused_gate_up_adapter_exports_to_peft_and_back(targets, tmp_path):
    hf = hf_tiny_model("glm4")
    hf.save_pretrained(tmp_path / "base")
    ours = _randomise(load_hf(tmp_path / "base", lora=LoraConfig(rank=4, alpha=16.0,
                                                                  targets=targets)))
    peft_io.save_adapter(ours, tmp_path / "adapter", base_model=str(tmp_path / "base"))
    config = json.loads((tmp_path / "adapter" / peft_io.CONFIG_FILE).read_text())
    assert "gate_up_proj" in config["target_modules"]
    assert not {"gate_proj", "up_proj"} & set(config["target_modules"])
    peft_model = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    # One A and one B on the fused module: rank 2r for both projections, r for one.
    fused = peft_model.base_model.model.model.layers[0].mlp.gate_up_proj
    rank = 8 if "gate_proj" in targets else 4
    assert tuple(fused.lora_A["default"].weight.shape) == (rank, 64)
    assert tuple(fused.lora_B["default"].weight.shape) == (2 * hf.config.intermediate_size, rank)
    tokens = np.random.default_rng(0).integers(0, 128, (2, 20)).astype(np.int32)
    expected = _torch_logits(peft_model, tokens)
    assert np.abs(expected - _logits(lora.without_adapters(ours), tokens)).max() > 1e-2
    assert np.abs(_logits(ours, tokens) - expected).max() <= 1e-4
    # And back: our own export imports as the adapters it came from.
    back = peft_io.load_adapter(load_hf(tmp_path / "base"), tmp_path / "adapter")
    assert back.cfg.lora.rank == 4 and back.cfg.lora.scale == ours.cfg.lora.scale
    assert np.abs(_logits(back, tokens) - expected).max() <= 1e-4


def test_glm4_peft_gate_up_adapter_imports_with_equal_logits(tmp_path):
    hf_tiny_model("glm4").save_pretrained(tmp_path / "base")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "gate_up_proj"],
                             init_lora_weights=False, lora_dropout=0.0)
    torch.manual_seed(1)
    peft_model = peft.get_peft_model(hf_tiny_model("glm4"), config).eval()
    peft_model.save_pretrained(tmp_path / "adapter")
    ours = peft_io.load_adapter(load_hf(tmp_path / "base"), tmp_path / "adapter")
    assert ours.cfg.lora == LoraConfig(rank=4, alpha=8.0,
                                       targets=("q_proj", "gate_proj", "up_proj"))
    tokens = np.random.default_rng(1).integers(0, 128, (2, 16)).astype(np.int32)
    assert np.abs(_logits(ours, tokens) - _torch_logits(peft_model, tokens)).max() <= 1e-4
    # A fused adapter of twice the rank that PEFT trained (not block diagonal) has no exact
    # rank-r gate and up adapters: refused.
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["gate_up_proj"],
                             rank_pattern={"gate_up_proj": 8}, init_lora_weights=False)
    peft.get_peft_model(hf_tiny_model("glm4"), config).save_pretrained(tmp_path / "wide")
    with pytest.raises(ValueError, match="block diagonal"):
        peft_io.load_adapter(load_hf(tmp_path / "base"), tmp_path / "wide")


@pytest.mark.slow
def test_smollm2_adapter_in_peft_matches(tmp_path):
    import transformers

    from agentrl_jax.models.zoo import resolve_model_dir

    directory = resolve_model_dir("smollm2-135m-instruct")
    ours = _randomise(load_hf(directory, lora=LoraConfig(rank=16, alpha=32.0)), scale=0.02)
    peft_io.save_adapter(ours, tmp_path / "adapter", base_model=str(directory))
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    peft_model = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    tokens = np.random.default_rng(0).integers(0, 49152, (1, 32)).astype(np.int32)
    expected = _torch_logits(peft_model, tokens)
    assert np.abs(expected - _logits(lora.without_adapters(ours), tokens)).max() > 1e-2
    assert np.abs(_logits(ours, tokens) - expected).max() <= 1e-3
