"""GLM-4-9B-0414 on AgentBench-FC (paper Table 3: AgentRL 65.0 average).

    python -m launch.tpu_pod --config=configs/agentbench_fc/glm4_9b.py \\
        --config.model.path=/models/GLM-4-9B --config.env.controller_url=URL

40 layers, hidden 4096, 32 heads, 2 KV heads, ~9.4B parameters: the sampler on 2 chips. GLM-4's
own tool-call format (`glm4` parser). The paper gave GLM a small cold-start SFT on the
function-call format before RL: point `model.path` at that warm-started checkpoint. Which TPU
slice it fits: docs/tpu_pod.md, "What fits where". No modes.
"""

from __future__ import annotations

import ml_collections

from configs.agentbench_fc import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config("glm4_9b", parser="glm4",
                        architecture="THUDM/GLM-4-9B-0414")
    # A two-chip sampler replica on every host; the trainer FSDP over the other two of each.
    c.mesh.update(sampler_devices=2, sampler_devices_per_host=2)
    return c
