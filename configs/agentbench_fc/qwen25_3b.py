"""Qwen2.5-3B-Instruct on AgentBench-FC (paper Table 3: AgentRL 60.0 average).

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_3b.py \\
        --config.model.path=/models/Qwen2.5-3B-Instruct --config.env.controller_url=URL

36 layers, hidden 2048, 16 heads, 2 KV heads, ~3.1B parameters: the sampler fits one chip.
Which TPU slice it fits: docs/tpu_pod.md, "What fits where". No modes.
"""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("qwen25_3b", parser="qwen25",
                        architecture="Qwen/Qwen2.5-3B-Instruct")
    # A one-chip sampler on every host; the trainer's 3 chips a host as data 3 × FSDP over hosts
    # (FSDP must divide the hidden size, 2048).
    c.mesh.update(sampler_devices=1, sampler_devices_per_host=1,
                  trainer=dict(data=3, fsdp=-1, tensor=1))
    c.rl.engine.update(max_batch=128, num_pages=32768, batch_buckets=(1, 8, 32, 64, 128))
    return c
