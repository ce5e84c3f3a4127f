"""Qwen2.5-14B-Instruct on AgentBench-FC (paper Table 3: AgentRL 67.7 average).

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_14b.py \\
        --config.model.path=/models/Qwen2.5-14B-Instruct --config.env.controller_url=URL

The model of the paper's ablations and of its single-task comparison (`ablations.py`).
48 layers, hidden 5120, 40 heads, 8 KV heads, ~14.8B parameters: the sampler on 2 chips (bf16
weights). Which TPU slice it fits: docs/tpu_pod.md, "What fits where". No modes.
"""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("qwen25_14b", parser="qwen25",
                        architecture="Qwen/Qwen2.5-14B-Instruct")
    # A two-chip sampler replica on every host; the trainer FSDP over the other two of each.
    c.mesh.update(sampler_devices=2, sampler_devices_per_host=2)
    c.rl.engine.num_pages = 12288   # 16-token KV pages: what HBM holds beside the weights
    return c
