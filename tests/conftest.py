"""Session-wide test setup.

Eight virtual CPU devices, so that sharding and mesh tests run on any machine. The flag must be
set before the first `import jax` anywhere in the session, hence here, at conftest import time.
The persistent compilation cache is on, as in the entry points (`agentrl_jax/compile_cache.py`),
so a second run of the suite loads what the first compiled; the processes tests start inherit it.
"""

import os

_flag = "--xla_force_host_platform_device_count=8"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
# The suite runs on the CPU; libtpu (jax's `tpu` extra, for ahead-of-time TPU compilation)
# would otherwise try to open a TPU in every process, and lock it.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests never reach a model hub: every model and tokenizer comes from the local zoo cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentrl_jax import compile_cache  # noqa: E402

compile_cache.enable()


import gc  # noqa: E402

import pytest  # noqa: E402


def _memory_maps() -> tuple[int, int]:
    """This process's memory maps and the kernel's limit on them (Linux; else zeros)."""
    try:
        with open("/proc/self/maps") as maps, open("/proc/sys/vm/max_map_count") as limit:
            return sum(1 for _ in maps), int(limit.read())
    except OSError:
        return 0, 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops JAX's in-memory caches after a test module once maps pass half the kernel's limit.

    Every compiled CPU program keeps its machine code in memory maps of its own, and the jit
    caches keep every program alive: one process running the whole suite passed Linux's limit
    of 65,530 maps (`vm.max_map_count`), and LLVM aborted compiling or serializing the next
    program ("Cannot allocate memory"). Clearing after every module would compile small
    programs again in each; programs a later module needs come back from the persistent cache.
    """
    yield
    maps, limit = _memory_maps()
    if maps > limit // 2:
        import jax

        jax.clear_caches()
        gc.collect()


@pytest.fixture(params=["llama", "qwen2", "glm4"])
def family(request):
    """Each model family of the decoder, for tests that must hold for all of them."""
    return request.param


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer from the model zoo (converted once from the GGUF)."""
    from transformers import AutoTokenizer

    from agentrl_jax.models.zoo import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def tokenizer(smollm2_tokenizer):
    """The default tokenizer of rollout and pipeline tests."""
    return smollm2_tokenizer
