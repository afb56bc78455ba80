"""Decompose what the target lacks into ops it has: norms, gated softmax, attention, and friends.

Every decomposition is exact up to fp32 rounding except two, which change the math by
design and say so: exact GELU becomes its tanh form (max |error| 4.74e-4, at x = 2.70) and
a lone erf becomes tanh(a z + b z^3) (max |error| 3.58e-4); both bounds were measured
against math.erf on a 400,001-point grid over [-12, 12] (beyond it both forms agree
to fp32 precision). Attention masks use an additive -1e4 instead of -inf, so a fully
masked row gives a uniform distribution instead of NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.ir.graph import Graph
from anekit.passes.context import PassContext, PassOptions
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
from anekit.passes.decompose.recurrent import MAX_UNROLLED_STEPS, unroll_short_recurrence
from anekit.passes.decompose.tensor_ops import (
    decompose_reduction,
    expand_as_broadcast,
    split_as_slices,
    wrap_pad_as_concat,
)
from anekit.passes.rewrite import Rule, apply_rules
from anekit.targets import Target


@dataclass(frozen=True)
class Decomposition:
    """A rewrite and when the target needs it: always (``unless`` None: the engine has no form
    for the op), or only on chips that lack the feature ``unless``; ``option`` names the
    PassOptions flag that must be on (a decomposition that changes the math is optional)."""

    rule: Rule
    unless: str | None = None
    option: str | None = None

    def applies(self, target: Target, options: PassOptions) -> bool:
        if self.option is not None and not getattr(options, self.option):
            return False
        return self.unless is None or not target.supports(self.unless)


# The target policy of decomposition, as data keyed on what the chip has. Attention is the
# one rule that also reads the node: the fused layer is kept only where it is exact
# (features sdpa and sdpa_mask, no causal flag; see keeps_fused_attention).
DECOMPOSITIONS: tuple[Decomposition, ...] = (
    Decomposition(decompose_layer_norm),
    Decomposition(decompose_group_norm),
    Decomposition(decompose_instance_norm, unless="instance_norm"),
    Decomposition(decompose_batch_norm),
    Decomposition(decompose_softmax, unless="softmax", option="decompose_gated_softmax"),
    Decomposition(decompose_log_softmax),
    Decomposition(decompose_attention),
    Decomposition(approximate_gelu, unless="gelu", option="approximate_gelu"),
    Decomposition(approximate_erf, option="approximate_gelu"),
    Decomposition(decompose_activation),
    Decomposition(split_as_slices),
    Decomposition(decompose_reduction),
    Decomposition(finite_mask),
    Decomposition(expand_as_broadcast),
    Decomposition(decompose_lrn),
    Decomposition(wrap_pad_as_concat),
    Decomposition(unroll_short_recurrence),
)
DECOMPOSE_RULES = tuple(d.rule for d in DECOMPOSITIONS)


def rules_for(target: Target, options: PassOptions) -> tuple[Rule, ...]:
    """The decompositions this target (and these options) call for."""
    return tuple(d.rule for d in DECOMPOSITIONS if d.applies(target, options))


def decompose(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite ops the target lacks (or that have no engine form) into ones it has."""
    return apply_rules(graph, ctx, rules_for(ctx.target, ctx.options))


__all__ = [
    "DECOMPOSE_RULES",
    "DECOMPOSITIONS",
    "Decomposition",
    "ERF_TANH_MAX_ABS_ERROR",
    "GELU_TANH_MAX_ABS_ERROR",
    "LRN_MAX_CHANNELS",
    "MAX_UNROLLED_STEPS",
    "decompose",
    "rules_for",
]
