"""The decoder's matrix products, written so that 16-bit operands run as 16-bit dots on CPU.

In fp32 these are the plain products. With bf16 operands (a trainer's `compute_dtype`, a bf16
sampler) the product accumulates in fp32 and is rounded to bf16 once, as an accelerator's
matrix unit does, and so are its gradients. The arrangement is for XLA CPU (jax 0.10), which runs
a bf16 x bf16 dot natively (YNNPACK; AVX512-BF16 where the CPU has it) only when the dot's
result is fp32 and the operands are not contracted over their leading axis; any other bf16 dot
it upcasts whole to fp32 and runs at the fp32 rate (the measured rates are in
docs/performance.md, "bf16 products that XLA CPU runs in bf16"). On GPU and TPU the same graph
is the ordinary mixed-precision product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def linear(h: jax.Array, w: jax.Array) -> jax.Array:
    """y = h · W in h's dtype; h [N, in], W [in, out].

    fp32 (or mixed) operands: `h @ w`. Equal 16-bit operands: accumulated in fp32, rounded once,
    with gradients dh = g · Wᵀ and dW = hᵀ · g computed the same way (`_linear16`).
    """
    if h.dtype == jnp.float32 or h.dtype != w.dtype:
        return h @ w
    return _linear16(h, w)


def sum_of_outer_products(a: jax.Array, b: jax.Array) -> jax.Array:
    """aᵀ · b = Σ_n a[n] ⊗ b[n], fp32 [x, y], for a [N, x] and b [N, y].

    A weight gradient. It contracts a unit leading axis as well as N: XLA CPU upcasts a bf16 dot
    that contracts only the leading axes to fp32, but runs this form in bf16.
    fp32 operands take the plain contraction.
    """
    if a.dtype == jnp.float32:
        return jnp.einsum("nx,ny->xy", a, b, preferred_element_type=jnp.float32)
    return jnp.einsum("jnx,jny->xy", a[None], b[None], preferred_element_type=jnp.float32)


@jax.custom_vjp
def _linear16(h: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.dot(h, w, preferred_element_type=jnp.float32).astype(h.dtype)


def _linear16_fwd(h, w):
    return _linear16(h, w), (h, w)


def _linear16_bwd(residuals, g):
    h, w = residuals
    g = g.astype(h.dtype)
    dh = jax.lax.dot_general(g, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return dh.astype(h.dtype), sum_of_outer_products(h, g).astype(w.dtype)


_linear16.defvjp(_linear16_fwd, _linear16_bwd)
