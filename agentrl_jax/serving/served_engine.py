"""The engine behind the OpenAI-compatible server: the policy, and PEFT adapters beside it.

Raises ValueError when the adapters differ in shape: one engine serves adapters of one rank and
one set of targets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentrl_jax.models import lora as lora_lib
from agentrl_jax.models.peft_io import load_adapter
from agentrl_jax.sampling import AsyncSamplingEngine, SamplingEngine
from agentrl_jax.sampling.adapter_engine import AdapterSamplingEngine, adapter_tree


def served_engine(model: Any, config: Any, tokenizer: Any, adapters: dict[str, str]
                ) -> tuple[Any, dict[str, str]]:
    """The engine serving `model` as "current" and each PEFT adapter directory of `adapters`
    as policy `adapter/NAME`, and {model name: policy} of the adapters.

    With adapters the engine is an `AdapterSamplingEngine`: one base, each adapter applied
    unmerged; the base itself is served with a zero adapter (B = 0: exactly the base's
    function), so every policy shares the one compiled adapter shape.
    """
    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    if not adapters:
        return AsyncSamplingEngine(SamplingEngine(model, config, decode_fn=decode)), {}
    loaded = {name: load_adapter(model, directory) for name, directory in adapters.items()}
    shapes = {m.cfg.lora for m in loaded.values()}
    if len(shapes) != 1:
        raise ValueError(f"the adapters differ in rank or targets ({shapes}); one engine "
                         "serves adapters of one shape")
    lora = shapes.pop()
    assert lora is not None  # load_adapter's models have adapters
    base = lora_lib.with_adapters(model, lora)
    engine = AdapterSamplingEngine(SamplingEngine(base, config, decode_fn=decode), base)
    served = {}
    for name, adapted in loaded.items():
        served[name] = f"adapter/{name}"
        asyncio.run(engine.update_params(adapter_tree(adapted), 0, policy=served[name]))
    return engine, served
