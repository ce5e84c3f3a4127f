"""launch.serve's `build` in process: a checkpoint and a LoRA adapter, each its own model name."""

import asyncio

import jax.numpy as jnp
import numpy as np

from agentrl_jax.experiment.policy import Policy, save_policy
from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.config import LoraConfig
from agentrl_jax.models.peft_io import save_adapter
from agentrl_jax.sampling import (
    AsyncSamplingEngine,
    GenerateRequest,
    SamplingEngine,
    SamplingParams,
)
from launch.serve import build
from tests.serving.conftest import ENGINE, RunningServer

ASK = [{"role": "user", "content": "hi"}]


def test_an_adapter_is_served_as_its_own_model(stack, tmp_path):
    model_dir = save_policy(Policy(stack.text_model, stack.tokenizer, "hermes"), tmp_path / "m")
    # An adapter on the output projection of the logits' row: it changes what is said.
    tuned = lora_lib.with_adapters(stack.text_model, LoraConfig(rank=2, alpha=2.0,
                                                                targets=("o_proj",)))
    b = tuned.layers.o_proj_lora_b
    b.set_value(jnp.asarray(np.random.default_rng(0).normal(size=b[...].shape) * 50.0,
                            jnp.float32))
    save_adapter(tuned, tmp_path / "adapter")
    sizes = dict(max_context=ENGINE.max_context, num_pages=ENGINE.num_pages,
                 max_batch=ENGINE.max_batch, prefill_buckets=ENGINE.prefill_buckets,
                 context_buckets=ENGINE.context_buckets, batch_buckets=ENGINE.batch_buckets)
    app, engine, name = build(str(model_dir), None, "hermes", "base", sizes, {},
                              warmup=False, adapters={"tuned": str(tmp_path / "adapter")})
    running = RunningServer(app.state.service, app)
    try:
        client = running.client()
        assert [m.id for m in client.models.list().data] == ["base", "tuned"]
        said = {}
        for model in ("base", "tuned"):
            response = client.chat.completions.create(model=model, messages=ASK, max_tokens=6,
                                                      temperature=0)
            said[model] = response.model_extra["agentrl"]
        assert said["base"]["choices"][0]["completion_token_ids"] == stack.greedy_sentence(6)
        assert said["tuned"]["choices"][0]["policy"] == "adapter/tuned"
        # The tuned name samples what the merged adapter model samples.
        merged = AsyncSamplingEngine(SamplingEngine(lora_lib.merged(tuned), ENGINE))
        try:
            direct = asyncio.run(merged.generate(GenerateRequest(
                said["tuned"]["prompt_token_ids"],
                SamplingParams(temperature=0, max_new_tokens=6, stop_token_ids=(stack.eos,)))))
        finally:
            merged.close()
        assert said["tuned"]["choices"][0]["completion_token_ids"] == direct.tokens
        assert direct.tokens != stack.greedy_sentence(6)
    finally:
        running.close()
        engine.close()
