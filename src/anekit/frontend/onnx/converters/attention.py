"""Converters for ONNX Attention (opsets 23 to 25; the IR attention op where it is exact,
otherwise the explicit graph) and RotaryEmbedding (decomposed)."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.ir.dtypes import DType


class _Attention:
    """One Attention node: its 4-d q, k, v and the masking constraints, emitted step by step."""

    def __init__(self, cx: NodeContext):
        self.cx = cx
        self.dtype = cx.type(0).dtype.numpy
        self.rank = len(cx.shape(0))
        if (
            self.rank not in (3, 4)
            or len(cx.shape(1)) != self.rank
            or len(cx.shape(2)) != self.rank
        ):
            raise ModelError("Q, K and V must all be 3-d or all 4-d")
        self.q = self._heads(0, "q_num_heads")
        self.k = self._heads(1, "kv_num_heads")
        self.v = self._heads(2, "kv_num_heads")
        self.past = 0
        if cx.input(4) is not None or cx.input(5) is not None:
            if cx.input(4) is None or cx.input(5) is None:
                raise ModelError("past_key and past_value must be given together")
            self.past = cx.shape(4)[2]
            self.k = cx.emit("concat", [cx.input(4), self.k], {"axis": 2})
            self.v = cx.emit("concat", [cx.input(5), self.v], {"axis": 2})
        self.present = (self.k, self.v)
        self.batch, self.heads, self.lq, self.dk = self.shape(self.q)
        self.lk = self.shape(self.k)[2]
        self.nonpad = cx.input(6)
        if self.nonpad is not None and self.past:
            raise ModelError("nonpad_kv_seqlen cannot be combined with past_key/past_value")

    def shape(self, name: str) -> tuple[int, ...]:
        return self.cx.shape_of(name)

    def const(self, value, hint: str) -> str:
        return self.cx.constant(np.asarray(value), hint)

    def _heads(self, i: int, attr: str) -> str:
        """A 3-d [batch, seq, heads * size] input as 4-d [batch, heads, seq, size]."""
        x = self.cx.input(i)
        if self.rank == 4:
            return x
        heads = self.cx.attr(attr, None)
        b, s, hidden = self.cx.shape(i)
        if not heads or hidden % heads:
            raise ModelError(f"3-d attention needs {attr} dividing the hidden size {hidden}")
        x = self.cx.emit("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
        return self.cx.emit("transpose", [x], {"perm": (0, 2, 1, 3)})

    def repeat_kv(self, x: str) -> str:
        return repeat_kv_heads(self.cx, x, self.heads)

    # --- masks ----------------------------------------------------------------------------

    def user_mask(self) -> str | None:
        """attn_mask, padded on the key axis when shorter (with False or -inf)."""
        mask = self.cx.input(3)
        if mask is None:
            return None
        shape = self.shape(mask)
        short = self.lk - shape[-1]
        if short > 0:
            pads = (0,) * len(shape) + (0,) * (len(shape) - 1) + (short,)
            value = 0.0 if self.cx.type(3).dtype is DType.BOOL else float("-inf")
            mask = self.cx.emit("pad", [mask], {"pads": pads, "value": value})
        return mask

    def structural_keep(self) -> str | None:
        """Causal, sliding-window and key-padding constraints as one bool keep tensor."""
        cx = self.cx
        causal = bool(cx.attr("is_causal", 0))
        left, right = cx.attr("left_window_size", -1), cx.attr("right_window_size", -1)
        cx.reserve((self.lq, self.lk), np.int64, "the attention mask")
        i = np.arange(self.lq)[:, None]
        j = np.arange(self.lk)[None, :]
        parts: list[str] = []
        if self.nonpad is None:  # the frontier is static: fold to constants
            diff = i + self.past - j  # query position minus key position
            keep = np.ones((self.lq, self.lk), dtype=bool)
            if causal:
                keep &= diff >= 0
            if left >= 0:
                keep &= diff <= left
            if right >= 0:
                keep &= -diff <= right
            if not keep.all():
                parts.append(self.const(keep, "keep"))
        else:  # per batch: query i sits at nonpad[b] - lq + i
            seqlen = cx.emit("cast", [self.nonpad], {"to": "int64"})
            n = cx.emit("reshape", [seqlen], {"shape": (self.batch, 1, 1, 1)})
            e = self.const((j - i + self.lq).astype(np.int64), "offset")  # diff = n - e
            if causal:  # diff >= 0
                parts.append(cx.emit("less_equal", [e, n]))
            if left >= 0:  # n - e <= left
                upper = cx.emit("add", [e, self.const(np.int64(left), "left")])
                parts.append(cx.emit("less_equal", [n, upper]))
            if right >= 0:  # e - n <= right
                lower = cx.emit("sub", [e, self.const(np.int64(right), "right")])
                parts.append(cx.emit("less_equal", [lower, n]))
            pos = self.const(np.arange(self.lk, dtype=np.int64).reshape(1, 1, 1, -1), "positions")
            parts.append(cx.emit("less", [pos, n]))
        keep = parts[0] if parts else None
        for p in parts[1:]:
            keep = cx.emit("and", [keep, p])
        return keep

    def additive_bias(self, mask: str | None, keep: str | None) -> str | None:
        """mask and keep as one float bias: 0 where attended, -inf where not."""
        cx = self.cx
        zero, ninf = (
            self.const(self.dtype.type(0), "zero"),
            self.const(self.dtype.type(-np.inf), "ninf"),
        )
        bias = None
        if mask is not None:
            bias = cx.emit("where", [mask, zero, ninf]) if cx.type(3).dtype is DType.BOOL else mask
        if keep is not None:
            k = cx.emit("where", [keep, zero, ninf])
            bias = k if bias is None else cx.emit("add", [bias, k])
        return bias

    def scale(self) -> float:
        scale = self.cx.attr("scale", None)
        return float(1.0 / np.sqrt(self.dk)) if scale is None else float(scale)

    def output(self, y: str) -> str:
        """Back to 3-d [batch, seq, heads * v_size] when the inputs were 3-d."""
        if self.rank == 4:
            return y
        b, h, s, d = self.shape(y)
        y = self.cx.emit("transpose", [y], {"perm": (0, 2, 1, 3)})
        return self.cx.emit("reshape", [y], {"shape": (b, s, h * d)})


def split_heads(cx: NodeContext, x: str, heads: int) -> str:
    """[B, S, heads * size] -> [B, heads, S, size]."""
    b, s, hidden = cx.shape_of(x)
    if hidden % heads:
        raise ModelError(f"a hidden size of {hidden} does not split into {heads} heads")
    split = cx.emit("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    return cx.emit("transpose", [split], {"perm": (0, 2, 1, 3)})


def repeat_kv_heads(cx: NodeContext, x: str, heads: int) -> str:
    """Grouped-query attention: each KV head of x [B, kv_heads, S, size] serves
    heads / kv_heads query heads in turn."""
    b, kvh, s, d = cx.shape_of(x)
    if kvh == heads:
        return x
    if heads % kvh:
        raise ModelError(f"{heads} query heads are not a multiple of {kvh} KV heads")
    x = cx.emit("reshape", [x], {"shape": (b, kvh, 1, s, d)})
    x = cx.emit("expand", [x], {"shape": (b, kvh, heads // kvh, s, d)})
    return cx.emit("reshape", [x], {"shape": (b, heads, s, d)})


def _fused(a: _Attention) -> str:
    """The IR attention op: exact when only masks shape the scores."""
    cx = a.cx
    mask, keep = a.user_mask(), a.structural_keep()
    causal_flag = False
    if keep is not None and cx.attr("is_causal", 0) and a.past == a.lk - a.lq and not _windowed(cx):
        keep, causal_flag = None, True  # the IR's causal frontier is the bottom-right one
    if mask is not None and keep is not None:
        if cx.type(3).dtype is DType.BOOL:
            mask = cx.emit("and", [mask, keep])
        else:
            mask = a.additive_bias(mask, keep)
    elif keep is not None:
        mask = keep
    k, v = a.repeat_kv(a.k), a.repeat_kv(a.v)
    attrs = {"scale": a.scale(), "causal": causal_flag}
    return cx.emit("attention", [a.q, k, v, mask], attrs)


def _windowed(cx: NodeContext) -> bool:
    return cx.attr("left_window_size", -1) >= 0 or cx.attr("right_window_size", -1) >= 0


def _explicit(a: _Attention, mode: int) -> tuple[str, str]:
    """softmax(softcap(q s^1/2 (k s^1/2)^T) + bias) v step by step; returns (y, qk output)."""
    cx = a.cx
    root = a.const(a.dtype.type(np.sqrt(a.scale())), "sqrt_scale")
    k = cx.emit("transpose", [a.repeat_kv(a.k)], {"perm": (0, 1, 3, 2)})
    scores = cx.emit("matmul", [cx.emit("mul", [a.q, root]), cx.emit("mul", [k, root])])
    qk = scores
    softcap = cx.attr("softcap", 0.0)
    if softcap > 0:
        c = a.const(a.dtype.type(softcap), "softcap")
        scores = cx.emit("mul", [cx.emit("tanh", [cx.emit("div", [scores, c])]), c])
        if mode == 1:
            qk = scores
    bias = a.additive_bias(a.user_mask(), a.structural_keep())
    if bias is not None:
        scores = cx.emit("add", [scores, bias])
    if mode == 2:
        qk = scores
    probs = cx.emit("softmax", [scores], {"axis": -1})
    if bias is not None:  # rows with every key masked attend to nothing
        peak = cx.emit("reduce_max", [bias], {"axes": (-1,), "keepdims": True})
        dead = cx.emit("equal", [peak, a.const(a.dtype.type(-np.inf), "ninf")])
        probs = cx.emit("where", [dead, a.const(a.dtype.type(0), "zero"), probs])
    if mode == 3:
        qk = probs
    return cx.emit("matmul", [probs, a.repeat_kv(a.v)]), qk


@converter("Attention")
def attention(cx: NodeContext):
    a = _Attention(cx)
    outs = list(cx.node.output) + [""] * (4 - len(cx.node.output))
    mode = cx.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise ModelError(f"unknown qk_matmul_output_mode {mode}")
    want_qk = bool(outs[3])
    simple = not want_qk and not cx.attr("softcap", 0.0) and a.nonpad is None
    if simple:
        y, qk = _fused(a), None
    else:
        y, qk = _explicit(a, mode)
    results = [a.output(y), a.present[0], a.present[1], qk]
    n = max(i + 1 for i, o in enumerate(outs) if o)
    return tuple(results[:n])


@converter("RotaryEmbedding")
def rotary_embedding(cx: NodeContext):
    """ONNX's op: X, cos_cache, sin_cache and optional position_ids."""
    return rotate_by_cached_angles(
        cx, cx.input(0), cx.input(1), cx.input(2), cx.input(3),
        heads=cx.attr("num_heads", 0), width=cx.attr("rotary_embedding_dim", 0),
        interleaved=bool(cx.attr("interleaved", 0)), final=True,
    )  # fmt: skip


def rotate_by_cached_angles(
    cx: NodeContext,
    x: str,
    cos_cache: str,
    sin_cache: str,
    positions: str | None,
    *,
    heads: int,
    width: int,
    interleaved: bool,
    final: bool,
) -> str:
    """Rotate pairs of the first ``width`` features (0: all) of x, 3-d [batch, seq, heads *
    size] or 4-d [batch, heads, seq, size], by the cached angles at ``positions`` (or the
    tables' own rows when None): gathers, slices, mul/add and concat. ``final``: the result
    takes the node's output name."""
    shape = cx.shape_of(x)
    if len(shape) == 3:  # [batch, seq, hidden] -> [batch, seq, heads, size]
        if not heads or shape[2] % heads:
            raise ModelError(f"3-d rotary embedding needs num_heads dividing {shape[2]}")
        x = cx.emit("reshape", [x], {"shape": (*shape[:2], heads, shape[2] // heads)})
    elif len(shape) != 4:
        raise ModelError(f"rotary embedding takes a 3-d or 4-d input, got shape {list(shape)}")
    b, d1, d2, size = cx.shape_of(x)
    rot = width or size
    if rot % 2 or rot > size:
        raise ModelError(f"rotary_embedding_dim {rot} must be even and at most {size}")
    seq = d2 if len(shape) == 4 else d1
    # angles per (batch, seq), laid out to broadcast over the heads axis
    cached = []
    for table in (cos_cache, sin_cache):
        if positions is not None:
            table = cx.emit("gather", [table, positions], {"axis": 0})
        layout = (b, 1, seq, rot // 2) if len(shape) == 4 else (b, seq, 1, rot // 2)
        cached.append(cx.emit("reshape", [table], {"shape": layout}))
    cos, sin = cached

    def part(start: int, end: int, step: int = 1) -> str:
        return cx.emit(
            "slice", [x], {"starts": (start,), "ends": (end,), "axes": (3,), "steps": (step,)}
        )

    if interleaved:
        x1, x2 = part(0, rot, 2), part(1, rot, 2)
    else:
        x1, x2 = part(0, rot // 2), part(rot // 2, rot)
    real = cx.emit("sub", [cx.emit("mul", [cos, x1]), cx.emit("mul", [sin, x2])])
    imag = cx.emit("add", [cx.emit("mul", [sin, x1]), cx.emit("mul", [cos, x2])])
    last = final and len(shape) == 4 and rot == size  # the op that produces the output
    if interleaved:
        pair = (b, d1, d2, rot // 2, 1)
        real, imag = (cx.emit("reshape", [t], {"shape": pair}) for t in (real, imag))
        rotated = cx.emit("concat", [real, imag], {"axis": 4})
        rotated = cx.emit("reshape", [rotated], {"shape": (b, d1, d2, rot)}, final=last)
    else:
        rotated = cx.emit("concat", [real, imag], {"axis": 3}, final=last)
    if rot < size:
        rotated = cx.emit(
            "concat", [rotated, part(rot, size)], {"axis": 3}, final=final and len(shape) == 4
        )
    if len(shape) == 3:
        return cx.emit("reshape", [rotated], {"shape": shape}, final=final)
    return rotated
