"""ONNX op converters, one module per op family; CONVERTERS is the op table."""

from anekit.frontend.onnx.converters import (  # noqa: F401
    attention,
    bitwise,
    contrib,
    control,
    diffusion,
    elementwise,
    embed_layer_norm,
    group_query_attention,
    index,
    linalg,
    loss,
    misc,
    nn,
    pool,
    position_bias,
    qoperator,
    quant,
    recurrent,
    reduce,
    resize,
    shape,
    signal,
    stateful,
)
from anekit.frontend.onnx.converters._table import CONVERTERS, converter

__all__ = ["CONVERTERS", "converter"]
