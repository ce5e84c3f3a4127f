"""The persistent compilation cache: where it lives, what keys it, and that a second process
loads what the first compiled."""

import json
import os
import subprocess
import sys

from agentrl_jax import compile_cache

_COMPILE_TWICE = r"""
import json
import jax
import jax.numpy as jnp
from jax import monitoring
from agentrl_jax import compile_cache

hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
print(json.dumps({"dir": str(compile_cache.enable())}))
# Every program is written, however fast this machine compiles it: the minimum compile time is
# a policy about what is worth a file, and a fast machine must not turn the test into a no-op.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

@jax.jit
def deep(x):
    for _ in range(300):
        x = jnp.tanh(x @ x.T) + jnp.sin(x)
    return x

deep(jnp.ones((64, 64))).block_until_ready()
print(json.dumps({"hits": len(hits)}))
"""


def _run(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _COMPILE_TWICE], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    result = {}
    for line in out.splitlines():
        result.update(json.loads(line))
    return result


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    env = {**os.environ, compile_cache.ENV_VAR: str(tmp_path)}
    first, second = _run(env), _run(env)
    assert first["dir"] == second["dir"] and first["dir"].startswith(str(tmp_path))
    assert first["hits"] == 0
    assert second["hits"] >= 1
    assert any(name.endswith("-cache") for name in os.listdir(first["dir"]))


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(compile_cache.ENV_VAR, "0")
    assert compile_cache.cache_dir() is None


def test_default_folder_is_under_the_project_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
    monkeypatch.setenv("AGENTRL_JAX_CACHE", str(tmp_path))
    assert compile_cache.cache_dir() == tmp_path / "xla" / compile_cache.cache_key()


def test_key_separates_flags_and_machines(monkeypatch):
    base = compile_cache.cache_key(xla_flags="")
    assert compile_cache.cache_key(xla_flags="--xla_cpu_enable_fast_math=true") != base
    # Flag order does not matter; the same flags give the same folder.
    assert (compile_cache.cache_key(xla_flags="--a=1 --b=2")
            == compile_cache.cache_key(xla_flags="--b=2 --a=1"))
    monkeypatch.setattr(compile_cache, "_machine_identity", lambda: "x86_64|flags=avx2")
    avx2 = compile_cache.cache_key(xla_flags="")
    monkeypatch.setattr(compile_cache, "_machine_identity", lambda: "x86_64|flags=avx2 avx512f")
    assert compile_cache.cache_key(xla_flags="") != avx2
