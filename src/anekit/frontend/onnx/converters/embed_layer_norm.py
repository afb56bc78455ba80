"""``com.microsoft.EmbedLayerNormalization``, the embedding layer the transformer optimizer
fuses in BERT-like models, and ``QEmbedLayerNormalization``, the form onnxruntime's quantizer
gives it (uint8/int8 tables, dequantized here once).

word_embedding[input_ids] + position_embedding[positions] (+ segment_embedding[segment_ids]),
then a layer norm over the hidden axis. Outputs: the normalised embeddings, the mask index
(per sequence, the number of mask entries equal to 1, as onnxruntime counts them; zeros
without a mask) and the sum before the norm.
"""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.contrib import MS, dequantized_constant
from anekit.ir.dtypes import DType


def _embedded(
    cx: NodeContext,
    tables: tuple[str, str, str | None],
    gamma: str,
    beta: str,
    *,
    segment_ids: int,
    mask: int,
    position_ids: int | None,
) -> tuple[str, ...]:
    """The op's outputs, given the (float) word, position and segment tables."""
    word, position, segment = tables
    if (cx.input(segment_ids) is None) != (segment is None):
        raise ModelError("segment_ids and segment_embedding must be given together")
    ids = cx.input(0)
    if len(cx.shape(0)) != 2:
        raise ModelError(f"input_ids must be [batch, sequence], not {list(cx.shape(0))}")
    batch, seq = cx.shape(0)
    if position_ids is not None and cx.input(position_ids) is not None:
        positions = cx.input(position_ids)
    else:
        steps = np.arange(seq, dtype=cx.type(0).dtype.numpy).reshape(1, seq)
        positions = cx.constant(steps, "positions")
    total = cx.emit(
        "add",
        [cx.emit("gather", [word, ids], {"axis": 0}),
         cx.emit("gather", [position, positions], {"axis": 0})],
    )  # fmt: skip
    if segment is not None:
        seg = cx.emit("gather", [segment, cx.input(segment_ids)], {"axis": 0})
        total = cx.emit("add", [total, seg])
    attrs = {"axis": -1, "epsilon": cx.attr("epsilon", 1e-12)}
    y = cx.emit("layer_norm", [total, gamma, beta], attrs)
    if cx.input(mask) is None:
        mask_index = cx.constant(np.zeros(batch, np.int32), "mask_index")
    else:
        one = cx.constant(np.ones((), cx.type(mask).dtype.numpy), "one")
        ones = cx.emit("cast", [cx.emit("equal", [cx.input(mask), one])], {"to": DType.INT32})
        mask_index = cx.emit("reduce_sum", [ones], {"axes": (1,), "keepdims": False})
    return (y, mask_index, total)[: max(len(cx.node.output), 1)]


@converter(f"{MS}.EmbedLayerNormalization")
def embed_layer_norm(cx: NodeContext):
    """input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma,
    beta, mask, position_ids ([batch, sequence] or [1, sequence])."""
    tables = (cx.input(2), cx.input(3), cx.input(4))
    return _embedded(
        cx, tables, cx.input(5), cx.input(6), segment_ids=1, mask=7, position_ids=8
    )


@converter(f"{MS}.QEmbedLayerNormalization")
def q_embed_layer_norm(cx: NodeContext):
    """input_ids, segment_ids, then the quantized word, position and segment tables, gamma and
    beta (inputs 2-6), mask, their scales (8-12) and zero points (13-17)."""
    names = ("word_embedding", "position_embedding", "segment_embedding", "gamma", "beta")
    floats: list[str | None] = []
    for k, what in enumerate(names):
        if cx.input(2 + k) is None:
            floats.append(None)
            continue
        value = dequantized_constant(cx, 2 + k, 8 + k, 13 + k, what)
        floats.append(cx.constant(value, what))
    word, position, segment, gamma, beta = floats
    if word is None or position is None or gamma is None or beta is None:
        raise ModelError("the word and position tables, gamma and beta are required")
    return _embedded(
        cx, (word, position, segment), gamma, beta, segment_ids=1, mask=7, position_ids=None
    )
