"""The matrix products a program runs, counted from its jaxpr: FLOPs and the bytes they read.

XLA's own `cost_analysis` counts the body of a loop once, whatever its trip count, and every
program here loops: the layers are a `lax.scan`, so are the vocabulary chunks of the loss and
the steps of a decode call. This walks the jaxpr instead, multiplying a scan's body by its
length, so a 36-layer model counts 36 layers:

  FLOPs(dot_general) = 2 · ∏ batch dims · ∏ free lhs dims · ∏ free rhs dims · ∏ contracted
  bytes(dot_general) = bytes of both operands

Products are what a transformer's time goes to; elementwise work, reductions and the softmax
are left out. The bytes are what the products read as if every operand came from HBM: for
decode (weights and the KV cache, re-read every step) that is the traffic; where XLA keeps a
block in on-chip memory across products it is an overestimate. A `while` loop whose trip
count the jaxpr does not state is counted once (none of the run's programs has one).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from jax.extend import core


@dataclasses.dataclass(frozen=True)
class MatmulCost:
    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: MatmulCost) -> MatmulCost:
        return MatmulCost(self.flops + other.flops, self.bytes + other.bytes)

    def __mul__(self, times: float) -> MatmulCost:
        return MatmulCost(self.flops * times, self.bytes * times)


def _nbytes(aval) -> float:
    return math.prod(aval.shape) * np.dtype(aval.dtype).itemsize


def _dot_cost(eqn) -> MatmulCost:
    lhs, rhs = (v.aval for v in eqn.invars)
    (contract_l, contract_r), (batch_l, _) = eqn.params["dimension_numbers"]
    contracted = math.prod(lhs.shape[d] for d in contract_l)
    batch = math.prod(lhs.shape[d] for d in batch_l)
    free_l = math.prod(n for d, n in enumerate(lhs.shape) if d not in (*contract_l, *batch_l))
    free_r = math.prod(n for d, n in enumerate(rhs.shape)
                       if d not in (*contract_r, *eqn.params["dimension_numbers"][1][1]))
    return MatmulCost(2.0 * batch * free_l * free_r * contracted, _nbytes(lhs) + _nbytes(rhs))


def _sub_jaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, core.Jaxpr):
                yield item


def jaxpr_cost(jaxpr) -> MatmulCost:
    """The matrix products of `jaxpr` (a Jaxpr or ClosedJaxpr), loops unrolled by count."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = MatmulCost()
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_cost(eqn)
        elif name == "cond":  # the dearer branch
            branches = [jaxpr_cost(b) for b in eqn.params["branches"]]
            total += max(branches, key=lambda c: c.flops)
        else:
            inner = sum((jaxpr_cost(j) for j in _sub_jaxprs(eqn)), MatmulCost())
            total += inner * (eqn.params["length"] if name == "scan" else 1)
    return total
