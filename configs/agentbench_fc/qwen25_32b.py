"""Qwen2.5-32B-Instruct on AgentBench-FC (paper Table 3: AgentRL 70.4 average; BFCL-v3 61.4).

    python -m launch.tpu_pod --config=configs/agentbench_fc/qwen25_32b.py \\
        --config.model.path=/models/Qwen2.5-32B-Instruct --config.env.controller_url=URL

64 layers, hidden 5120, 40 heads, 8 KV heads, ~32.8B parameters: the sampler on 2 chips (bf16
weights) with a smaller KV pool and batch; the trainer shards over the rest of the slice (fp32
weights and Adam moments: 16 bytes per parameter, ~525 GB in all). Which TPU slice it fits:
docs/tpu_pod.md, "What fits where". No modes.
"""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("qwen25_32b", parser="qwen25",
                        architecture="Qwen/Qwen2.5-32B-Instruct")
    # A two-chip sampler replica on every host; the trainer FSDP over the other two of each.
    c.mesh.update(sampler_devices=2, sampler_devices_per_host=2)
    c.rl.engine.update(max_batch=32, num_pages=6144, batch_buckets=(1, 8, 32))
    return c
