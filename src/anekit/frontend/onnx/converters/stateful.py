"""Converters for the streaming-model ops: LinearAttention, CausalConvWithState, TensorScatter,
and SwiGLU (decomposed onto IR ops; LinearAttention onto the IR recurrence)."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


def _split_heads(cx: NodeContext, x: str, heads: int) -> str:
    """[batch, time, heads * size] -> [batch, heads, time, size]."""
    b, t, hidden = cx.shape_of(x)
    if hidden % heads:
        raise ModelError(f"hidden size {hidden} is not a multiple of {heads} heads")
    x = cx.emit("reshape", [x], {"shape": (b, t, heads, hidden // heads)})
    return cx.emit("transpose", [x], {"perm": (0, 2, 1, 3)})


@converter("LinearAttention")
def linear_attention(cx: NodeContext):
    hq, hkv = cx.attr("q_num_heads"), cx.attr("kv_num_heads")
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ModelError(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    q = _split_heads(cx, cx.input(0), hq)
    k = _split_heads(cx, cx.input(1), hkv)
    v = _split_heads(cx, cx.input(2), hkv)
    b, t = cx.shape(0)[:2]
    decay = cx.input(4)
    if decay is not None:
        per_head = cx.shape(4)[-1] == hkv
        decay = _split_heads(cx, decay, hkv) if not per_head else cx.emit(
            "transpose", [cx.emit("reshape", [decay], {"shape": (b, t, hkv, 1)})], {"perm": (0, 2, 1, 3)}
        )  # fmt: skip
    beta = cx.input(5)
    if beta is not None:
        heads = cx.shape(5)[-1]
        beta = cx.emit("reshape", [beta], {"shape": (b, t, heads, 1)})
        beta = cx.emit("transpose", [beta], {"perm": (0, 2, 1, 3)})
    attrs = {"scale": cx.attr("scale", None), "update_rule": cx.attr("update_rule", "gated_delta")}
    y, state = cx.emit("linear_attention", [q, k, v, cx.input(3), decay, beta], attrs)
    _, _, _, dv = cx.shape_of(y)
    y = cx.emit("transpose", [y], {"perm": (0, 2, 1, 3)})
    y = cx.emit("reshape", [y], {"shape": (b, t, hq * dv)})
    return y, state


@converter("CausalConvWithState")
def causal_conv_with_state(cx: NodeContext):
    """Depthwise causal conv1d over [past_state, input]; the last k-1 steps are the new state."""
    b, c, length = cx.shape(0)
    w_shape = cx.shape(1)
    if w_shape[:2] != (c, 1):
        raise ModelError(f"weight must be [{c}, 1, k] (depthwise), got {list(w_shape)}")
    k = w_shape[2]
    past = cx.input(3)
    if past is None and k > 1:
        cx.reserve((b, c, k - 1), cx.type(0).dtype.numpy, "the zero state")
        past = cx.constant(np.zeros((b, c, k - 1), dtype=cx.type(0).dtype.numpy), "zero_state")
    padded = cx.emit("concat", [past, cx.input(0)], {"axis": 2}) if k > 1 else cx.input(0)
    y = cx.emit("conv", [padded, cx.input(1), cx.input(2)], {"group": c})
    activation = cx.attr("activation", "none")
    if activation in ("silu", "swish"):
        y = cx.emit("silu", [y])
    elif activation != "none":
        raise ModelError(f"unknown activation '{activation}'")
    total = length + k - 1
    state = cx.emit(
        "slice", [padded], {"starts": (total - (k - 1),), "ends": (total,), "axes": (2,)}
    )
    return y, state


@converter("TensorScatter")
def tensor_scatter(cx: NodeContext):
    """Write the update into the cache at each batch row's write index (circular: modulo)."""
    cache, update = cx.shape(0), cx.shape(1)
    rank = len(cache)
    axis = cx.attr("axis", -2) % rank
    if axis == 0:
        raise ModelError("TensorScatter's axis cannot be the batch axis")
    steps = update[axis]
    cx.reserve((steps,), np.int64, "the positions")
    positions = cx.constant(np.arange(steps, dtype=np.int64), "steps")
    if cx.input(2) is not None:
        start = cx.emit("cast", [cx.input(2)], {"to": "int64"})
        start = cx.emit("reshape", [start], {"shape": (cache[0], 1)})
        positions = cx.emit("add", [start, positions])  # [batch, steps]
    else:
        positions = cx.emit("reshape", [positions], {"shape": (1, steps)})
    if cx.attr("mode", "linear") == "circular":
        positions = cx.emit(
            "mod", [positions, cx.constant(np.asarray(cache[axis], np.int64), "len")]
        )
    layout = [1] * rank
    layout[0], layout[axis] = cx.shape_of(positions)[0], steps
    index = cx.emit("reshape", [positions], {"shape": tuple(layout)})
    index = cx.emit("expand", [index], {"shape": update})
    return cx.emit(
        "scatter_elements", [cx.input(0), index, cx.input(1)], {"axis": axis}, final=True
    )


@converter("SwiGLU")
def swiglu(cx: NodeContext):
    """swish(a, alpha) * b."""
    if cx.shape(0) != cx.shape(1):
        raise ModelError(
            f"SwiGLU needs equal shapes, got {list(cx.shape(0))} and {list(cx.shape(1))}"
        )
    a, alpha = cx.input(0), cx.attr("alpha", 1.0)
    if alpha == 1.0:
        gate = cx.emit("silu", [a])
    else:
        scaled = cx.emit(
            "mul", [a, cx.constant(np.asarray(alpha, cx.type(0).dtype.numpy), "alpha")]
        )
        gate = cx.emit("mul", [a, cx.emit("sigmoid", [scaled])])
    return cx.emit("mul", [gate, cx.input(1)], final=True)
