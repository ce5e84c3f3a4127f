"""ConfigDicts from dataclasses and back: one definition of each field and default."""

import dataclasses
import json

import ml_collections
import pytest

from agentrl_jax.dataclass_config import config_dict_from, dataclass_from
from agentrl_jax.rollout.agent_loop import EpisodeLimits
from agentrl_jax.sampling import EngineConfig


def test_a_type_gives_its_defaults_and_overrides_replace_some():
    config = config_dict_from(EngineConfig, num_pages=99, prefill_buckets=(64,))
    assert set(config) == {f.name for f in dataclasses.fields(EngineConfig)}
    assert config.num_pages == 99 and config.prefill_buckets == (64,)
    assert config.max_context == EngineConfig().max_context   # untouched: the default
    assert config_dict_from(EpisodeLimits(max_turns=3)).to_dict() == dict(
        max_turns=3, max_context_tokens=EpisodeLimits().max_context_tokens,
        max_new_tokens=EpisodeLimits().max_new_tokens)


def test_overrides_are_checked_where_the_config_is_written():
    with pytest.raises(TypeError, match="num_page"):
        config_dict_from(EngineConfig, num_page=1)
    with pytest.raises(ValueError, match="in_flight"):   # the dataclass's own validation
        config_dict_from(EngineConfig, in_flight="later")
    with pytest.raises(TypeError, match="not a dataclass"):
        config_dict_from(dict)


def test_round_trip_through_json_restores_tuples():
    engine = EngineConfig(max_batch=4, prefill_buckets=(16, 32), context_buckets=(64,))
    config = config_dict_from(engine)
    assert dataclass_from(config, EngineConfig) == engine
    # JSON (a run's config.json, a sampling worker's spec) turns tuples into lists.
    parsed = json.loads(json.dumps(dataclasses.asdict(engine)))
    assert parsed["prefill_buckets"] == [16, 32]
    back = dataclass_from(parsed, EngineConfig)
    assert back == engine and hash(back) == hash(engine)
    back = dataclass_from(ml_collections.ConfigDict(parsed), EngineConfig)
    assert back == engine


def test_missing_fields_default_and_unknown_ones_are_named():
    assert dataclass_from({"max_turns": 2}, EpisodeLimits) == EpisodeLimits(max_turns=2)
    with pytest.raises(TypeError, match="EpisodeLimits has no field max_turn"):
        dataclass_from({"max_turn": 2}, EpisodeLimits)
