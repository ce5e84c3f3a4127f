"""Does a cheap prior make a scratch model copy? Mimetic attention and a copy curriculum.

Issue #29 asks for two priors for the main job's scratch model (hidden 256, 4 layers, FF 768,
4 heads over 2 key-value groups, tied, vocabulary 4,096), kept only if the copy probe
(`agentrl_jax/evaluation/copy_probe.py`: NLL on random-token repeats at a random offset,
held-out sequences) falls below 1 nat within the budget. Four arms, same run, same data:

  normal             the default initialisation (N(0, 0.02))
  mimetic            `models/mimetic.py`: W_Q W_Kᵀ ≈ +I, W_V W_O ≈ −I per head
  curriculum         the default initialisation; sequences grow from 4 spans' length to the
                     probe's over the first half of the steps (short offsets first)
  mimetic+curriculum both

Each trains only on repeat tokens of fresh random-offset sequences (a seed range the probe never
uses), Adam at `--lr`, and is probed on the held-out batch every `--probe-every` steps. The
default budget is the warm start's token count (~1.9M tokens). Writes
benchmarks/results/copy_prior.json: each arm's final probe NLL, its best, and the first step at
which it fell below 1 nat (0 if never).

    python -m benchmarks.probes.copy_prior [--steps 600] [--batch 16] [--length 192]
"""

from __future__ import annotations

import argparse
import math
import time

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from agentrl_jax import compile_cache
from agentrl_jax.evaluation import copy_probe
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.models.logprobs import token_logprobs
from agentrl_jax.models.mimetic import mimetic_attention
from benchmarks.machine_info import write_result
from benchmarks.model_shapes import scratch_default

ARMS = ("normal", "mimetic", "curriculum", "mimetic+curriculum")
SPAN = 24
TRAIN_SEED = 1_000   # training batches use seeds TRAIN_SEED + step; the probe's is PROBE_SEED


def scratch_model(mimetic: bool, seed: int = 0) -> Decoder:
    """The main job's default scratch shape (configs/local_default.py)."""
    model = Decoder(scratch_default(), rngs=nnx.Rngs(seed))
    return mimetic_attention(model, seed=seed) if mimetic else model


def curriculum_length(step: int, steps: int, length: int) -> int:
    """4 spans' worth at step 0, growing linearly to `length` at half the steps, in 8s."""
    start = 4 * SPAN
    grown = start + (length - start) * min(1.0, step / max(1, steps // 2))
    return int(grown) // 8 * 8


def _loss(params, graphdef, tokens, mask):
    model = nnx.merge(graphdef, params)
    n, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
    targets = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
    logp, _ = token_logprobs(model, tokens, positions, jnp.ones_like(tokens), targets,
                             entropy_grad=False)
    scored = mask[:, 1:]   # the mask marks targets; logp[:, t] predicts tokens[:, t + 1]
    return -(logp[:, :-1] * scored).sum() / scored.sum()


def train_arm(arm: str, steps: int, batch: int, length: int, lr: float, probe_every: int,
              vocab: tuple[int, int]) -> dict[str, float]:
    model = scratch_model("mimetic" in arm)
    graphdef, params = nnx.split(model)
    opt = optax.adam(lr)
    opt_state = opt.init(params)

    @jax.jit
    def step_fn(params, opt_state, tokens, mask):
        loss, grads = jax.value_and_grad(_loss)(params, graphdef, tokens, mask)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    held_out = copy_probe.probe_batch(vocab, num_sequences=32, length=length, span=SPAN)

    def probe(params) -> float:
        logp = copy_probe.decoder_log_probs(nnx.merge(graphdef, params), held_out.tokens)
        return copy_probe.copy_nll(logp, held_out)

    history = [(0, probe(params))]
    started = time.perf_counter()
    for step in range(1, steps + 1):
        t = curriculum_length(step, steps, length) if "curriculum" in arm else length
        data = copy_probe.probe_batch(vocab, num_sequences=batch, length=t, span=SPAN,
                                      seed=TRAIN_SEED + step)
        params, opt_state, loss = step_fn(params, opt_state, jnp.asarray(data.tokens),
                                          jnp.asarray(data.target_mask))
        if step % probe_every == 0 or step == steps:
            history.append((step, probe(params)))
            print(f"  {arm:>19} step {step:4d}: train {float(loss):.3f}, "
                  f"probe {history[-1][1]:.3f}", flush=True)
    below = [s for s, nll in history if nll < 1.0]
    return {"final": round(history[-1][1], 4), "best": round(min(n for _, n in history), 4),
            "initial": round(history[0][1], 4), "first_step_below_1": below[0] if below else 0,
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=192)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--probe-every", type=int, default=50)
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    compile_cache.enable()
    vocab = (0, 4096)
    figures: dict[str, float | int | str] = {
        "steps": args.steps, "tokens_per_step": args.batch * args.length, "lr": args.lr,
        "ln_v": round(math.log(vocab[1]), 4)}
    for arm in args.arms.split(","):
        print(f"{arm}: {args.steps} steps of {args.batch} x {args.length} tokens")
        result = train_arm(arm, args.steps, args.batch, args.length, args.lr,
                           args.probe_every, vocab)
        for key, value in result.items():
            figures[f"{arm}_{key}"] = value
    print("\narm                  initial   final    best  first step < 1 nat")
    for arm in args.arms.split(","):
        print(f"{arm:<19} {figures[f'{arm}_initial']:8.3f} {figures[f'{arm}_final']:7.3f} "
              f"{figures[f'{arm}_best']:7.3f}  {figures[f'{arm}_first_step_below_1'] or 'never'}")
    print(f"chance (ln V) = {figures['ln_v']}")
    write_result("copy_prior", figures)


if __name__ == "__main__":
    main()
