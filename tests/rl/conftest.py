"""Fixtures the train-step tests share: an 8-device (fsdp 4 × tensor 2) mesh and a tiny
Llama-flavoured decoder (seed 0), built once per module."""

import pytest
from flax import nnx

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.models.decoder import Decoder
from agentrl_jax.parallel.mesh import make_mesh


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(fsdp=4, tensor=2)


@pytest.fixture(scope="module")
def model():
    return Decoder(ModelConfig.tiny(), rngs=nnx.Rngs(0))
