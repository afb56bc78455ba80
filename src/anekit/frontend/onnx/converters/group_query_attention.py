"""``com.microsoft.GroupQueryAttention``: the attention op of onnxruntime-genai's language
model exports, with its KV cache.

Each batch entry ``b`` has ``T = seqlens_k[b] + 1`` tokens after this step, so its new
``S`` tokens sit at positions ``P_b = T - S`` onwards. The present cache is the past buffer
(zero-padded to ``max(total_sequence_length, past length)``) with the new keys and values
written at ``P_b`` (a one-hot matmul places them: exact, and an engine op); query ``s``
attends to cache positions up to ``P_b + s`` (and within ``local_window_size``). ``P_b`` is
data, so every step of a generation runs the same program, as onnxruntime's does.
"""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.attention import (
    repeat_kv_heads,
    rotate_by_cached_angles,
    split_heads,
)

# inputs beyond the ones converted, with what they are for
_UNSUPPORTED_INPUTS = {
    10: "attention_bias",
    11: "head_sink",
    12: "k_scale",
    13: "v_scale",
    16: "query_seqlens",
}
_UNSUPPORTED_ATTRS = {
    "softcap": 0.0,
    "smooth_softmax": 0,
    "qk_output": 0,
    "kv_cache_bit_width": 0,
    "sliding_window_cache": 0,
}


@converter("com.microsoft.GroupQueryAttention")
def group_query_attention(cx: NodeContext):
    _refuse_unsupported(cx)
    heads, kv_heads = cx.attr("num_heads"), cx.attr("kv_num_heads")
    if heads % kv_heads:
        raise ModelError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    q, k, v = _projections(cx, heads, kv_heads)
    batch, seq, hidden = cx.shape_of(q)
    size = hidden // heads
    dtype = cx.type(0).dtype.numpy
    total = _total_length(cx, seq)
    past_len = cx.shape(3)[2] if cx.input(3) is not None else 0
    length = max(total, past_len)
    cx.reserve((batch, kv_heads, length, size), dtype, "the present KV cache")
    # P_b, the position of the first new token, as [B, 1, 1, 1]
    start = cx.emit("cast", [cx.input(5)], {"to": "int64"})
    start = cx.emit("sub", [start, cx.constant(np.int64(seq - 1), "new_minus_one")])
    start = cx.emit("reshape", [start], {"shape": (batch, 1, 1, 1)})

    q = split_heads(cx, _normed(cx, q, 14, heads, "q"), heads)
    k = split_heads(cx, _normed(cx, k, 15, kv_heads, "k"), kv_heads)
    v = split_heads(cx, v, kv_heads)
    if cx.attr("do_rotary", 0):
        positions = _positions(cx, start, batch, seq)
        q, k = (_rotated(cx, x, positions) for x in (q, k))

    place = _placement(cx, start, length, seq, dtype)
    present_k = _written(cx, 3, k, place, length, dtype)
    present_v = _written(cx, 4, v, place, length, dtype)
    keep = _keep(cx, start, seq, length)
    scale = cx.attr("scale", None) or None
    y = cx.emit(
        "attention",
        [q, repeat_kv_heads(cx, present_k, heads), repeat_kv_heads(cx, present_v, heads), keep],
        {"scale": scale, "causal": False},
    )
    y = cx.emit("transpose", [y], {"perm": (0, 2, 1, 3)})
    y = cx.emit("reshape", [y], {"shape": (batch, seq, hidden)})
    return y, present_k, present_v


def _refuse_unsupported(cx: NodeContext) -> None:
    for i, what in _UNSUPPORTED_INPUTS.items():
        if cx.input(i) is not None:
            raise ModelError(f"GroupQueryAttention's {what} input is not supported yet")
    for name, default in _UNSUPPORTED_ATTRS.items():
        if cx.attr(name, default) != default:
            raise ModelError(
                f"GroupQueryAttention with {name}={cx.attr(name)} is not supported yet"
            )
    if cx.attr("causal", 1) != 1:
        raise ModelError("bidirectional GroupQueryAttention (causal=0) is not supported yet")
    if len(cx.node.output) > 3 and cx.node.output[3]:
        raise ModelError("GroupQueryAttention's output_qk is not supported yet")
    if (cx.input(3) is None) != (cx.input(4) is None):
        raise ModelError("past_key and past_value must be given together")


def _projections(cx: NodeContext, heads: int, kv_heads: int) -> tuple[str, str, str]:
    """query, key, value as [B, S, heads * size]; a packed query holds all three."""
    if cx.input(1) is not None:
        if cx.input(2) is None:
            raise ModelError("GroupQueryAttention's key is given without its value")
        if cx.shape(1)[1] != cx.shape(0)[1]:
            raise ModelError("key and value must have the query's sequence length")
        return cx.input(0), cx.input(1), cx.input(2)
    b, s, packed = cx.shape(0)
    if packed % (heads + 2 * kv_heads):
        raise ModelError(f"a packed QKV of width {packed} does not split into {heads} + 2 x "
                         f"{kv_heads} heads")  # fmt: skip
    size = packed // (heads + 2 * kv_heads)
    sizes = (heads * size, kv_heads * size, kv_heads * size)
    return cx.emit("split", [cx.input(0)], {"axis": 2, "sizes": sizes})


def _total_length(cx: NodeContext, seq: int) -> int:
    total = cx.const(6)
    if total is None:
        raise ModelError(
            "total_sequence_length sets the present cache's length, so it must be a constant",
            hint="fix it at compile time: --const total_sequence_length=N (constants= in the API)",
        )
    total = int(np.asarray(total).reshape(-1)[0])
    if total < seq:
        raise ModelError(f"total_sequence_length {total} is shorter than the {seq} new tokens")
    return total


def _normed(cx: NodeContext, x: str, weight: int, heads: int, which: str) -> str:
    """The per-head RMS norm Qwen3-style exports fold into the op (q_norm_weight input 14,
    k_norm_weight 15)."""
    if cx.input(weight) is None:
        return x
    b, s, hidden = cx.shape_of(x)
    eps = cx.attr(f"{which}_norm_epsilon", None)
    eps = cx.attr("qk_norm_epsilon", 1e-6) if eps is None else eps
    per_head = cx.emit("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    normed = cx.emit("rms_norm", [per_head, cx.input(weight)], {"axis": -1, "epsilon": eps})
    return cx.emit("reshape", [normed], {"shape": (b, s, hidden)})


def _positions(cx: NodeContext, start: str, batch: int, seq: int) -> str:
    """Each new token's position [B, S]: position_ids when given, else P_b + s."""
    if cx.input(9) is not None:
        return cx.input(9)
    steps = cx.constant(np.arange(seq, dtype=np.int64).reshape(1, seq), "steps")
    first = cx.emit("reshape", [start], {"shape": (batch, 1)})
    return cx.emit("add", [first, steps])


def _rotated(cx: NodeContext, x: str, positions: str) -> str:
    if cx.input(7) is None or cx.input(8) is None:
        raise ModelError("do_rotary needs the cos_cache and sin_cache inputs")
    return rotate_by_cached_angles(
        cx, x, cx.input(7), cx.input(8), positions,
        heads=0, width=2 * cx.shape(7)[1],
        interleaved=bool(cx.attr("rotary_interleaved", 0)), final=False,
    )  # fmt: skip


def _placement(cx: NodeContext, start: str, length: int, seq: int, dtype) -> str:
    """One-hot [B, 1, L, S]: cache row j takes new token j - P_b."""
    rows = np.arange(length, dtype=np.int64).reshape(1, 1, length, 1)
    cols = np.arange(seq, dtype=np.int64).reshape(1, 1, 1, seq)
    offset = cx.constant(rows - cols, "row_minus_token")  # j - s == P_b where placed
    hit = cx.emit("equal", [offset, start])
    return cx.emit("cast", [hit], {"to": np.dtype(dtype).name})


def _written(cx: NodeContext, past: int, new: str, place: str, length: int, dtype) -> str:
    """The past buffer (zeros when absent, zero-padded to ``length``) with ``new``'s rows
    written where ``place`` puts them."""
    b, h, s, d = cx.shape_of(new)
    if cx.input(past) is None:
        old = cx.constant(np.zeros((b, h, length, d), dtype), "empty_cache")
    else:
        old = cx.input(past)
        short = length - cx.shape(past)[2]
        if short:
            old = cx.emit("pad", [old], {"pads": (0, 0, 0, 0, 0, 0, short, 0), "value": 0.0})
    placed = cx.emit("matmul", [place, new])  # [B, H, L, D]
    written = cx.emit("reduce_sum", [place], {"axes": (-1,), "keepdims": True})  # [B, 1, L, 1]
    written = cx.emit("cast", [written], {"to": "bool"})
    return cx.emit("where", [written, placed, old])


def _keep(cx: NodeContext, start: str, seq: int, length: int) -> str:
    """Query s attends to cache row j when j <= P_b + s (and j > P_b + s - window)."""
    rows = np.arange(length, dtype=np.int64).reshape(1, 1, 1, length)
    cols = np.arange(seq, dtype=np.int64).reshape(1, 1, seq, 1)
    behind = cx.constant(rows - cols, "row_minus_query")  # j - s
    keep = cx.emit("less_equal", [behind, start])
    window = cx.attr("local_window_size", -1)
    if window > 0:
        reach = cx.emit("add", [behind, cx.constant(np.int64(window), "window")])
        keep = cx.emit("and", [keep, cx.emit("less", [start, reach])])
    return keep
