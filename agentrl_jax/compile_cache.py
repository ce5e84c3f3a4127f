"""JAX's persistent compilation cache under agentrl_jax's cache, on by default.

Every process of a run compiles the same programs again: each prefill, context and batch bucket
of the sampler, the train step, the log-prob pass. XLA can keep what it compiled on disk and load
it on the next run instead (`jax_compilation_cache_dir`); `enable()` turns that on for the
entry points (`launch.*`), the benchmarks and the test session.

The folder is `cache_root()/xla/<key>`, where the key hashes what makes a compiled program valid:
the jax and jaxlib versions, `XLA_FLAGS`, and the machine (the CPU's model and instruction-set
flags, so an AVX-512 build is never loaded on an AVX2 host that shares the home directory). JAX
adds its own key per program on top (the program, compile options, backend and devices), so a
wrong hit is impossible by construction; the outer key only keeps incompatible builds apart and
lets a whole generation be deleted at once.

`AGENTRL_JAX_COMPILE_CACHE=0` turns it off (for measuring compilation itself);
`AGENTRL_JAX_COMPILE_CACHE=/some/dir` puts it elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import platform

from agentrl_jax.cache_dirs import cache_root

ENV_VAR = "AGENTRL_JAX_COMPILE_CACHE"
# Programs that compile faster than this are not written: reading a file costs about as much.
MIN_COMPILE_SECONDS = 0.2
MAX_CACHE_BYTES = 8 * 2**30   # least recently used entries go past this


def _machine_identity() -> str:
    """The CPU's model name and feature flags (Linux), else what `platform` knows."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags", "Features", "CPU part") and key not in wanted:
            wanted[key] = " ".join(sorted(value.split()))
        if not line.strip() and wanted:   # the first processor's block is enough
            break
    return platform.machine() + "|" + "|".join(f"{k}={v}" for k, v in sorted(wanted.items()))


def cache_key(xla_flags: str | None = None) -> str:
    """16 hex digits naming the cache folder of this jax build, flags and machine."""
    import jax
    import jaxlib

    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    material = "\n".join([jax.__version__, jaxlib.__version__, " ".join(sorted(flags.split())),
                          _machine_identity()])
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def cache_dir() -> pathlib.Path | None:
    """Where this process's compiled programs are kept, or None when the cache is off."""
    setting = os.environ.get(ENV_VAR, "")
    if setting.lower() in ("0", "false", "off", "no"):
        return None
    base = pathlib.Path(setting).expanduser() if setting else cache_root() / "xla"
    return base / cache_key()


def enable() -> pathlib.Path | None:
    """Turns the persistent compilation cache on for this process (idempotent); the folder.

    Children started after this inherit it through `JAX_COMPILATION_CACHE_DIR`, which jax reads
    at import, so a worker process compiles into the same cache without calling this itself.
    """
    import jax

    directory = cache_dir()
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(directory)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(MIN_COMPILE_SECONDS)
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(MAX_CACHE_BYTES)
    return directory
