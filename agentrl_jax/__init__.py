"""agentrl_jax: RL for LLM agents in JAX.

On import, freed host memory is kept in the process (`hostmem.keep_freed_memory`): XLA CPU
would otherwise page-fault every execution's buffers in anew.
"""

from agentrl_jax import hostmem as _hostmem

_hostmem.keep_freed_memory()
