"""Where agentrl_jax keeps what it builds once and reuses: models, data, demonstrations, XLA.

One root for every cache, `$AGENTRL_JAX_CACHE` or `~/.cache/agentrl_jax`; each user (the model
zoo, the task data generators, the warm start, the compilation cache) owns a named folder under
it. Standard library only, so the environments (which import nothing of JAX) share it.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

CACHE_ENV_VAR = "AGENTRL_JAX_CACHE"


def cache_root(environ: Mapping[str, str] | None = None) -> pathlib.Path:
    """The root of agentrl_jax's cache: `$AGENTRL_JAX_CACHE` or `~/.cache/agentrl_jax`.

    `environ` is the environment to read (default: this process's), for code that sets up a
    child's environment.
    """
    env = os.environ if environ is None else environ
    if root := env.get(CACHE_ENV_VAR):
        return pathlib.Path(root).expanduser()
    home = env.get("HOME") or str(pathlib.Path.home())
    return pathlib.Path(home) / ".cache" / "agentrl_jax"
