import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentrl_jax.models.matmul import linear, sum_of_outer_products

BF16 = jnp.bfloat16


def _operands(rng, n=64, d_in=48, d_out=40):
    h = rng.standard_normal((n, d_in)).astype(np.float32)
    w = (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(np.float32)
    c = rng.standard_normal((n, d_out)).astype(np.float32)
    return h, w, c


def _loss(matmul, h, w, c):
    return jnp.sum(matmul(h, w).astype(jnp.float32) * c)


def test_fp32_is_the_plain_product_and_its_gradients():
    h, w, c = _operands(np.random.default_rng(0))
    h, w = jnp.asarray(h), jnp.asarray(w)
    np.testing.assert_array_equal(linear(h, w), h @ w)
    ours = jax.grad(lambda h, w: _loss(linear, h, w, c), argnums=(0, 1))(h, w)
    plain = jax.grad(lambda h, w: _loss(jnp.matmul, h, w, c), argnums=(0, 1))(h, w)
    for a, b in zip(ours, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_bf16_product_and_gradients_are_the_fp32_ones_rounded_once():
    h, w, c = _operands(np.random.default_rng(1))
    hb, wb = jnp.asarray(h, BF16), jnp.asarray(w, BF16)
    h32, w32 = hb.astype(jnp.float32), wb.astype(jnp.float32)  # the same values in fp32
    y = linear(hb, wb)
    assert y.dtype == BF16
    # One rounding of an fp32-accumulated product: within half a bf16 ulp (2^-8 relative).
    np.testing.assert_allclose(y.astype(jnp.float32), h32 @ w32, rtol=2 ** -8, atol=1e-6)

    dh, dw = jax.grad(lambda h, w: _loss(linear, h, w, c), argnums=(0, 1))(hb, wb)
    assert dh.dtype == dw.dtype == BF16
    g = jnp.asarray(c, BF16).astype(jnp.float32)  # the cotangent arrives in bf16
    np.testing.assert_allclose(dh.astype(jnp.float32), g @ w32.T, rtol=2 ** -8, atol=1e-6)
    np.testing.assert_allclose(dw.astype(jnp.float32), h32.T @ g, rtol=2 ** -8, atol=1e-5)


def test_sum_of_outer_products_is_a_transposed_product():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((32, 5)), rng.standard_normal((32, 7))
    for dtype in (jnp.float32, BF16):
        got = sum_of_outer_products(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
        assert got.dtype == jnp.float32
        want = jnp.asarray(a, dtype).astype(jnp.float32).T @ jnp.asarray(b, dtype).astype(
            jnp.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _dot_operand_dtypes(fn, *args) -> list[str]:
    """The element types of every dot's operands in `fn`'s optimised CPU program."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    types = dict(re.findall(r"%([\w.\-]+) = (\w+)\[", text))
    dtypes = []
    for operands in re.findall(r"= \w+\[[^\]]*\]\{[^}]*\} dot\(([^)]*)\)", text):
        dtypes += [types[name.strip().lstrip("%")] for name in operands.split(",")]
    return dtypes


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA CPU's upcasting of bf16 dots")
def test_bf16_gradient_program_keeps_every_dot_in_bf16():
    """The reason for `linear`: XLA CPU upcasts a bf16 dot with a bf16 result, or one
    contracting the leading axes (a weight gradient), to fp32; `linear`'s forward and backward
    dots all stay bf16. The plain product, as a control, gets upcast."""
    h, w, c = _operands(np.random.default_rng(3), n=256, d_in=128, d_out=192)
    hb, wb = jnp.asarray(h, BF16), jnp.asarray(w, BF16)

    def grads(matmul):
        return lambda h, w: jax.value_and_grad(
            lambda h, w: _loss(matmul, h, w, c), argnums=(0, 1))(h, w)

    ours = _dot_operand_dtypes(grads(linear), hb, wb)
    assert len(ours) == 6 and set(ours) == {"bf16"}, ours
    assert "f32" in _dot_operand_dtypes(grads(jnp.matmul), hb, wb)
