"""Tunix's sampler on an HF Llama-family checkpoint: the baseline side of `benchmarks/sampler.py`.

Runs in Tunix's own environment (`.venv-tunix`, made by `scripts/setup_tunix.sh` from
`benchmarks/tunix_requirements.txt`): Tunix pins `safetensors<0.8`, which the project's pins
exclude, so the two cannot share one environment. It imports nothing from agentrl_jax.

Reads a JSON request from argv[1]:

    {"model_dir": DIR, "prompts": [[token ids], ...], "new_tokens": N, "repeats": R}

builds Tunix's Llama3 model from DIR's `config.json` and safetensors (float32, tied embeddings
as the checkpoint says), and times Tunix's whole `Sampler.__call__` (tokenising, prefill,
decode, detokenising) on the prompts as one batch, greedy, with no stop token so every row
generates N tokens, after one untimed call that compiles. Tunix 0.1.7's Llama attention calls
`apply_rope` without the config's `rope_theta` (so at its default, 1e6; SmolLM2's is 1e5), which
computes another model and diverges from HF by the third token; `main` binds the checkpoint's
theta first, which changes no cost, so that both samplers run the same function. The prompts
are token ids: a tokenizer that reads ids back from their decimal text hands Tunix exactly the
tokens the project's engine gets. Prints one JSON line: tokens per second of the fastest of R
calls, the generated tokens of the last call, and Tunix's version.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from importlib import metadata

import jax.numpy as jnp
import numpy as np


class IdTokenizer:
    """Token ids as decimal text: encode("5 17 3") == [5, 17, 3]; no BOS, no EOS.

    Tunix masks every prompt token equal to the pad id, so `pad` is an id no prompt holds.
    """

    def __init__(self, pad: int):
        self.pad = pad

    def encode(self, text: str, **_) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids, **_) -> str:
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self) -> int:
        return 0   # falsy: Tunix prepends no BOS

    def eos_id(self) -> int:
        return -1  # never generated

    def pad_id(self) -> int:
        return self.pad


def tunix_config(hf: dict):
    from tunix.models.llama3 import model as llama3

    return llama3.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        num_kv_heads=hf["num_key_value_heads"], rope_theta=int(hf["rope_theta"]),
        norm_eps=hf["rms_norm_eps"], weight_tying=bool(hf.get("tie_word_embeddings", False)))


def main() -> None:
    from tunix.generate import sampler as sampler_lib
    from tunix.models.llama3 import model as llama3
    from tunix.models.llama3 import params

    request = json.loads(open(sys.argv[1]).read())
    hf = json.loads(open(f"{request['model_dir']}/config.json").read())
    cfg = tunix_config(hf)
    llama3.apply_rope = functools.partial(llama3.apply_rope, rope_theta=cfg.rope_theta)
    model = params.create_model_from_safe_tensors(request["model_dir"], cfg, dtype=jnp.float32)
    prompts = request["prompts"]
    prompt_len, new = max(len(p) for p in prompts), int(request["new_tokens"])
    used = {t for p in prompts for t in p}
    tokenizer = IdTokenizer(pad=next(i for i in range(1, cfg.vocab_size) if i not in used))
    sampler = sampler_lib.Sampler(model, tokenizer, sampler_lib.CacheConfig(
        cache_size=prompt_len + new, num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim))
    texts = [tokenizer.decode(p) for p in prompts]

    def call():
        return sampler(texts, max_generation_steps=new, max_prompt_length=prompt_len,
                       temperature=0.0, eos_tokens=[-1])

    call()   # compiles
    best, out = float("inf"), None
    for _ in range(int(request.get("repeats", 1))):
        start = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - start)
    tokens = [np.asarray(t).tolist()[:new] for t in out.tokens]
    print(json.dumps({"tok_s": len(prompts) * new / best, "seconds": best, "tokens": tokens,
                      "tunix_version": metadata.version("google-tunix")}))


if __name__ == "__main__":
    main()
