"""The simulator's MIL op kernels by family, gathered into one immutable registry."""

from __future__ import annotations

from ..registry import build_registry
from . import (
    activation,
    constexpr,
    conv,
    elementwise,
    gather,
    image,
    linear,
    misc,
    normalization,
    pooling,
    reduction,
    sample,
    shape,
    tensor,
)

REGISTRY = build_registry(
    elementwise.OPS,
    activation.OPS,
    linear.OPS,
    conv.OPS,
    reduction.OPS,
    normalization.OPS,
    pooling.OPS,
    shape.OPS,
    tensor.OPS,
    gather.OPS,
    image.OPS,
    sample.OPS,
    misc.OPS,
    constexpr.OPS,
)

__all__ = ["REGISTRY"]
