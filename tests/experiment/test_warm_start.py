"""`experiment.warm_start` in process on a tiny scratch model: with `sft.copy.sequences` set,
the copy stage trains first (its own steps, logged as `sft_copy`), then the demonstrations."""

from __future__ import annotations

import json
import math

from agentrl_jax.experiment import warm_start
from agentrl_jax.experiment.metrics import MetricsLog
from agentrl_jax.parallel.mesh import single_device_mesh
from configs import local_default
from tests.support.demos import DEMO


def test_the_copy_stage_runs_before_the_demonstrations_when_enabled(tmp_path):
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({**DEMO, "index": i}) + "\n" for i in range(8)))
    config = local_default.get_config("fast")
    config.sft.cache_dir = str(tmp_path / "sft")
    config.sft.copy.update(sequences=6, length=64, tokens_per_step=128)
    metrics = MetricsLog(tmp_path, tensorboard=False)

    policy_dir = warm_start.warm_start(config, [demos], single_device_mesh(), metrics)

    assert (policy_dir / "config.json").exists()
    records = [json.loads(x) for x in metrics.path.read_text().splitlines()]
    stages = [r["stage"] for r in records]
    copy_steps = math.ceil(6 * 64 / 128)
    assert stages[:copy_steps] == ["sft_copy"] * copy_steps
    assert stages[copy_steps:] and set(stages[copy_steps:]) == {"sft"}


def test_an_unset_sft_setting_keeps_the_cache_key_and_a_set_one_changes_it(tmp_path):
    demos = [tmp_path / "demos.jsonl"]
    config = local_default.get_config()
    key = warm_start.sft_key(config, demos)
    without = local_default.get_config()
    del without.sft["compute_dtype"]   # the config as it was before the setting existed
    assert warm_start.sft_key(without, demos) == key
    config.sft.compute_dtype = "bfloat16"
    assert warm_start.sft_key(config, demos) != key


def test_an_auto_compute_dtype_keys_the_cache_by_what_it_resolves_to(tmp_path, monkeypatch):
    from agentrl_jax import precision

    demos = [tmp_path / "demos.jsonl"]
    config = local_default.get_config()
    config.sft.compute_dtype = "auto"
    for resolved in ("bfloat16", None):
        monkeypatch.setattr(precision, "resolve", lambda dtype, r=resolved: r if dtype else dtype)
        explicit = local_default.get_config()
        explicit.sft.compute_dtype = resolved
        assert warm_start.sft_key(config, demos) == warm_start.sft_key(explicit, demos)
