"""Decompose what the target lacks into ops it has: norms, gated softmax, attention, and friends.

Every decomposition is exact up to fp32 rounding except two, which change the math by
design and say so: exact GELU becomes its tanh form (max |error| 4.74e-4, at x = 2.70) and
a lone erf becomes tanh(a z + b z^3) (max |error| 3.58e-4); both bounds were measured
against math.erf on a 400,001-point grid over [-12, 12] (beyond it both forms agree
to fp32 precision). Attention masks use an additive -1e4 instead of -inf, so a fully
masked row gives a uniform distribution instead of NaN.
"""

from __future__ import annotations

from anekit.ir.graph import Graph
from anekit.passes.context import PassContext
from anekit.passes.decompose.activations import (
    ERF_TANH_MAX_ABS_ERROR,
    GELU_TANH_MAX_ABS_ERROR,
    approximate_erf,
    approximate_gelu,
    decompose_activation,
)
from anekit.passes.decompose.attention import decompose_attention, finite_mask
from anekit.passes.decompose.norms import (
    LRN_MAX_CHANNELS,
    decompose_batch_norm,
    decompose_group_norm,
    decompose_instance_norm,
    decompose_layer_norm,
    decompose_log_softmax,
    decompose_lrn,
    decompose_softmax,
)
from anekit.passes.decompose.tensor_ops import (
    decompose_reduction,
    expand_as_broadcast,
    split_as_slices,
)
from anekit.passes.rewrite import apply_rules

DECOMPOSE_RULES = (
    decompose_layer_norm,
    decompose_group_norm,
    decompose_instance_norm,
    decompose_batch_norm,
    decompose_softmax,
    decompose_log_softmax,
    decompose_attention,
    approximate_gelu,
    approximate_erf,
    decompose_activation,
    split_as_slices,
    decompose_reduction,
    finite_mask,
    expand_as_broadcast,
    decompose_lrn,
)


def decompose(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite ops the target lacks (or that have no engine form) into ones it has."""
    return apply_rules(graph, ctx, DECOMPOSE_RULES)


__all__ = [
    "DECOMPOSE_RULES",
    "ERF_TANH_MAX_ABS_ERROR",
    "GELU_TANH_MAX_ABS_ERROR",
    "LRN_MAX_CHANNELS",
    "decompose",
]
