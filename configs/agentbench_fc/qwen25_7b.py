"""Qwen2.5-7B-Instruct on AgentBench-FC (paper Table 3: AgentRL 62.0 average).

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_7b.py \\
        --config.model.path=/models/Qwen2.5-7B-Instruct --config.env.controller_url=URL

28 layers, hidden 3584, 28 heads, 4 KV heads, ~7.6B parameters: the sampler on 2 chips.
Which TPU slice it fits: docs/tpu_pod.md, "What fits where". No modes.
"""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("qwen25_7b", parser="qwen25",
                        architecture="Qwen/Qwen2.5-7B-Instruct")
    # A two-chip sampler replica on every host; the trainer FSDP over the other two of each.
    c.mesh.update(sampler_devices=2, sampler_devices_per_host=2)
    return c
