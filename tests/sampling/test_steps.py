import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax.models.config import ModelConfig
from agentrl_jax.sampling import steps
from agentrl_jax.sampling.forward import KVPool
from agentrl_jax.sampling.weights import split_layers, weights_of
from tests.sampling.conftest import tiny_model

PAGE, STEPS, WIDTH = 4, 3, 4


def _decode_args(cfg: ModelConfig, rows: int):
    pool = KVPool.zeros(cfg, (rows * WIDTH + 1) * PAGE, PAGE)
    table = jnp.asarray(np.arange(rows * WIDTH).reshape(rows, WIDTH) + 1, jnp.int32)
    params = steps.RowParams(jnp.zeros(rows), jnp.zeros(rows, jnp.int32), jnp.ones(rows),
                             jnp.zeros(rows, jnp.uint32), -jnp.ones((rows, 1), jnp.int32))
    return (pool, jnp.ones(rows, jnp.int32), jnp.full(rows, 5, jnp.int32), jnp.ones(rows, bool),
            jnp.full(rows, 99, jnp.int32), table, params)


def _ynnpack_fusions(decode, w, args) -> int:
    return decode.trace(w, *args).lower().compile().as_text().count("__ynn_fusion")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="YNNPACK is XLA's CPU backend")
def test_one_row_decode_compiles_without_ynnpack_and_agrees_with_the_batched_program():
    model = tiny_model()
    cfg = model.cfg
    w = split_layers(weights_of(model))
    _, decode = steps.compile_steps.__wrapped__(cfg, PAGE, STEPS)
    one, two = _decode_args(cfg, 1), _decode_args(cfg, 2)
    assert _ynnpack_fusions(decode, w, one) == 0
    assert _ynnpack_fusions(decode, w, two) > 0

    # Row 0 of a two-row call is the same computation as the one-row call (rows are independent).
    _, tokens1, logprobs1, _ = decode(w, *one)
    _, tokens2, logprobs2, _ = decode(w, *two)
    np.testing.assert_array_equal(tokens1[:, 0], tokens2[:, 0])
    np.testing.assert_allclose(logprobs1[:, 0], logprobs2[:, 0], rtol=1e-5, atol=1e-5)
    assert decode.num_compiled() == 2
