"""agentrl_jax: RL for LLM agents in JAX."""
