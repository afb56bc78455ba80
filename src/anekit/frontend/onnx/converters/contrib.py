"""Converters for the ``com.microsoft`` ops that onnxruntime's own tools write into models:
its dynamic quantizer (``DynamicQuantizeLSTM``, ``DynamicQuantizeMatMul``) and its
transformer optimizer's fusions (``Gelu``, ``FastGelu``, ``BiasGelu``, ``QuickGelu``,
``GemmFastGelu``, ``SkipLayerNormalization``, ``SkipSimplifiedLayerNormalization``,
``SimplifiedLayerNormalization``, ``FusedMatMul``, ``BiasAdd``, ``Attention``,
``MultiHeadAttention``, ``RotaryEmbedding``) and its weight-only quantizer
(``MatMulNBits``).

Quantized weights are dequantized to float here, once: the engine computes in fp16, so the
integer form would only be converted back. onnxruntime also quantizes the *activations* of
these ops at run time (uint8 per tensor), which anekit does not: its answers are the float
model's, and differ from onnxruntime's by that quantization noise (see the tests).
"""

from __future__ import annotations

import statistics

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.attention import rotate_by_cached_angles, split_heads
from anekit.frontend.onnx.converters.quant import centred_int32
from anekit.frontend.onnx.converters.recurrent import recurrent_attrs
from anekit.ir.dtypes import DType

MS = "com.microsoft"


def dequantized_constant(
    cx: NodeContext, q: int, scale: int, zero: int, what: str, axis: int = 0
) -> np.ndarray:
    """(q - zero_point) * scale in float32; a vector scale runs along ``axis`` of q."""
    values = cx.require_const(q, what).astype(np.float32)
    s = cx.require_const(scale, f"{what} scale").astype(np.float32)
    z = cx.const(zero)
    z = np.zeros_like(s) if z is None else z.astype(np.float32)
    if s.ndim:  # per direction [D] or per channel [D, 4H]: align with q's axes
        shape = [1] * values.ndim
        shape[0] = s.shape[0]
        if s.ndim == 2:
            shape[axis] = s.shape[1]
        s, z = s.reshape(shape), z.reshape(shape)
    return (values - z) * s


def _check_block_size(block: int, hint: str | None = None) -> None:
    """The weight-only quantizers' blocks: a power of two of at least 16 values."""
    if block < 16 or block & (block - 1):
        raise ModelError(f"block_size {block} is not a power of two of at least 16", hint=hint)


@converter(f"{MS}.DynamicQuantizeLSTM")
def dynamic_quantize_lstm(cx: NodeContext):
    # W [D, input, 4H] and R [D, H, 4H]: the quantizer transposed them; LSTM wants [D, 4H, *]
    w = dequantized_constant(cx, 1, 8, 9, "W", axis=2).transpose(0, 2, 1)
    r = dequantized_constant(cx, 2, 10, 11, "R", axis=2).transpose(0, 2, 1)
    attrs = recurrent_attrs(cx, "lstm")
    inputs = [cx.input(0), cx.constant(np.ascontiguousarray(w), "W"),
              cx.constant(np.ascontiguousarray(r), "R"), *(cx.input(i) for i in range(3, 8))]  # fmt: skip
    while inputs and inputs[-1] is None:
        inputs.pop()
    return cx.emit("lstm", inputs, attrs, final=True)


@converter(f"{MS}.DynamicQuantizeMatMul")
def dynamic_quantize_matmul(cx: NodeContext):
    b = cx.require_const(1, "B").astype(np.float32)
    s = cx.require_const(2, "b_scale").astype(np.float32)
    z = cx.const(3)
    z = np.zeros_like(s) if z is None else z.astype(np.float32)
    y = cx.emit("matmul", [cx.input(0), cx.constant((b - z) * s, "B")], final=cx.input(4) is None)
    return y if cx.input(4) is None else cx.emit("add", [y, cx.input(4)], final=True)


def _unpacked(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes holding ``8 // bits`` codes each, low bits first, as one code per value
    along the last axis."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], -1)


@converter(f"{MS}.MatMulNBits")
def matmul_nbits(cx: NodeContext):
    """A @ W^T (+ bias) where W [N, K] is stored as ``bits``-bit codes in blocks of
    ``block_size`` along K, each block ``(code - zero_point) * scale``. The default zero point
    is the codes' midpoint; zero points are packed codes, or floats like the scales."""
    k, n, bits, block = cx.attr("K"), cx.attr("N"), cx.attr("bits", 4), cx.attr("block_size")
    if bits not in (2, 4, 8):
        raise ModelError(f"{bits}-bit codes are not supported (2, 4 or 8 are)")
    _check_block_size(block)
    if cx.input(4) is not None:
        raise ModelError("the g_idx input (act-order group indices) is not supported",
                         hint="quantize without act-order (onnxruntime's RTN or default config)")  # fmt: skip
    blocks = -(-k // block)
    packed = cx.require_const(1, "B")
    if packed.dtype != np.uint8 or packed.shape != (n, blocks, block * bits // 8):
        raise ModelError(f"B is {packed.dtype}{list(packed.shape)}, not the uint8"
                         f"{[n, blocks, block * bits // 8]} that K={k}, N={n}, bits={bits} and "
                         f"block_size={block} give")  # fmt: skip
    cx.reserve((n, blocks * block), np.float32, "the dequantized weight")
    codes = _unpacked(packed, bits).astype(np.float32)  # [N, blocks, block]
    scales = cx.require_const(2, "scales").astype(np.float32)
    if scales.size != n * blocks:
        raise ModelError(f"scales hold {scales.size} values, not N * blocks = {n * blocks}")
    zero = cx.const(3)
    if zero is None:
        zero = np.full((n, blocks), 1 << (bits - 1), np.float32)
    elif zero.dtype == np.uint8:
        zero = _unpacked(zero.reshape(n, -1), bits)[:, :blocks].astype(np.float32)
    else:
        zero = zero.astype(np.float32)
    if zero.size != n * blocks:
        raise ModelError(f"zero_points hold {zero.size} values, not N * blocks = {n * blocks}")
    weight = (codes - zero.reshape(n, blocks, 1)) * scales.reshape(n, blocks, 1)
    weight = weight.reshape(n, blocks * block)[:, :k]
    dtype = cx.type(0).dtype.numpy
    y = cx.emit("matmul", [cx.input(0), cx.constant(np.ascontiguousarray(weight.T).astype(dtype), "W")],
                final=cx.input(5) is None)  # fmt: skip
    return y if cx.input(5) is None else cx.emit("add", [y, cx.input(5)], final=True)


def _nf4_values() -> np.ndarray:
    """NormalFloat4 (QLoRA): quantiles of N(0, 1) at evenly spaced probabilities from the
    offset 1 - (1/30 + 1/32) / 2 down to 1/2, eight positive and seven negative, and an
    exact zero; scaled (in float32) so the largest is 1. Codes index them in ascending order."""
    ppf = statistics.NormalDist().inv_cdf
    top = 1 - (1 / 30 + 1 / 32) / 2
    positive = [ppf(p) for p in np.linspace(top, 0.5, 9)[:-1]]
    negative = [-ppf(p) for p in np.linspace(top, 0.5, 8)[:-1]]
    values = np.sort(np.array([*positive, 0.0, *negative], np.float32))
    return values / values.max()


# bitsandbytes' FP4: a sign bit over three bits whose codes 0-7 stand for these multiples of
# 1/12 (0b001 a subnormal 1/16 of 1/12; the rest 2^e * {1, 1.5} in bitsandbytes' code order)
_FP4_TWELFTHS = (0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0)


def _bnb4_values(quant_type: int) -> np.ndarray:
    """The 16 values of the 4-bit codes: quant_type 0 FP4, 1 NF4."""
    if quant_type == 1:
        return _nf4_values()
    if quant_type == 0:
        half = np.array(_FP4_TWELFTHS, np.float32) / np.float32(12)
        return np.concatenate([half, -half])
    raise ModelError(f"quant_type {quant_type} is neither 0 (FP4) nor 1 (NF4)")


@converter(f"{MS}.MatMulBnb4")
def matmul_bnb4(cx: NodeContext):
    """A @ W^T (transB = 1, the default) or A @ W, with W [N, K] stored flattened as 4-bit
    FP4/NF4 codes (two a byte, the first in the high half) in blocks of ``block_size``, each
    block scaled by its absmax. Dequantized once here."""
    k, n, block = cx.attr("K"), cx.attr("N"), cx.attr("block_size")
    _check_block_size(block)
    values = _bnb4_values(cx.attr("quant_type"))
    packed = cx.require_const(1, "B").reshape(-1)
    absmax = cx.require_const(2, "absmax").astype(np.float32).reshape(-1)
    count = n * k
    if packed.dtype != np.uint8 or packed.size != (count + 1) // 2:
        raise ModelError(f"B is {packed.dtype}[{packed.size}], not the uint8[{(count + 1) // 2}] "
                         f"that N={n} and K={k} give")  # fmt: skip
    if absmax.size != -(-count // block):
        raise ModelError(f"absmax holds {absmax.size} values, not {-(-count // block)} blocks")
    cx.reserve((n, k), np.float32, "the dequantized weight")
    codes = np.stack([packed >> 4, packed & 0x0F], axis=1).reshape(-1)[:count]
    weight = (values[codes] * np.repeat(absmax, block)[:count]).reshape(n, k)
    if cx.attr("transB", 1):
        weight = weight.T
    dtype = cx.type(0).dtype.numpy
    w = cx.constant(np.ascontiguousarray(weight).astype(dtype), "W")
    return cx.emit("matmul", [cx.input(0), w], final=True)


@converter(f"{MS}.GatherBlockQuantized")
def gather_block_quantized(cx: NodeContext):
    """Gather from a table quantized in blocks of ``block_size`` along ``quantize_axis``:
    int4/uint4 codes (default zero point 0; onnxruntime's weight-only quantizer on an
    embedding), or uint8 holding ``bits``-bit codes packed along the last axis (default zero
    point the codes' midpoint). The table is dequantized once, then gathered."""
    data = cx.require_const(0, "data")
    rank = data.ndim
    q_axis = cx.attr("quantize_axis", 1)
    g_axis = cx.attr("gather_axis", 0)
    block, bits = cx.attr("block_size", 128), cx.attr("bits", 4)
    if not -rank <= q_axis < rank or not -rank <= g_axis < rank:
        raise ModelError(f"quantize_axis {q_axis} / gather_axis {g_axis} outside a rank-{rank} table")
    q_axis, g_axis = q_axis % rank, g_axis % rank
    _check_block_size(block, hint="FP8/FP4 tables (block_size 0) are not supported")
    zero = cx.const(3)
    if cx.four_bit(0):
        shape, midpoint = data.shape, 0
    elif data.dtype == np.uint8:
        if bits not in (2, 4, 8):
            raise ModelError(f"{bits}-bit codes are not supported (2, 4 or 8 are)")
        if bits < 8 and (g_axis != 0 or q_axis == g_axis):
            raise ModelError("packed codes need gather_axis 0 and a different quantize_axis")
        shape, midpoint = (*data.shape[:-1], data.shape[-1] * 8 // bits), 1 << (bits - 1)
    else:
        raise ModelError(f"a {data.dtype} table is not supported (int4, uint4 or uint8 are)",
                         hint="FP8/FP4 tables are not supported yet")  # fmt: skip
    scales = cx.require_const(2, "scales").astype(np.float32)
    blocks = -(-shape[q_axis] // block)
    want = (*shape[:q_axis], blocks, *shape[q_axis + 1 :])
    if scales.shape != want:
        raise ModelError(f"scales are {list(scales.shape)}, not the {list(want)} that a "
                         f"{list(shape)} table in blocks of {block} gives")  # fmt: skip
    cx.reserve(shape, np.float32, "the dequantized table")
    if cx.four_bit(0):
        codes = data.astype(np.float32)
    else:
        codes = _unpacked(data, bits).astype(np.float32)
        zero = None if zero is None else _unpacked(zero, bits)
    if zero is None:
        zero = np.full(want, midpoint, np.float32)
    if zero.ndim == len(want):  # packed zero points may end in a padding code
        zero = zero[tuple(slice(0, n) for n in want)].astype(np.float32)
    if zero.shape != want:
        raise ModelError(f"zero_points are {list(zero.shape)}, not the scales' {list(want)}")
    width = shape[q_axis]

    def per_code(p: np.ndarray) -> np.ndarray:
        return np.repeat(p, block, axis=q_axis).take(np.arange(width), axis=q_axis)

    table = (codes - per_code(zero)) * per_code(scales)
    dtype = cx.type(2).dtype.numpy
    table = cx.constant(table.astype(dtype), "table")
    return cx.emit("gather", [table, cx.input(1)], {"axis": g_axis}, final=True)


@converter(f"{MS}.RotaryEmbedding")
def contrib_rotary_embedding(cx: NodeContext):
    """input, position_ids, cos_cache, sin_cache: ONNX's RotaryEmbedding with the inputs in
    another order, where a one-value position_ids is the offset of the first position."""
    if cx.attr("is_packed_batching", 0):
        raise ModelError("is_packed_batching is not supported")
    positions = cx.input(1)
    if cx.shape(1) == (1,):
        shape = cx.shape(0)
        batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
        steps = np.broadcast_to(np.arange(seq), (batch, seq))
        positions = cx.emit(
            "add", [cx.constant(steps.astype(cx.type(1).dtype.numpy), "steps"), positions]
        )
    return rotate_by_cached_angles(
        cx, cx.input(0), cx.input(2), cx.input(3), positions,
        heads=cx.attr("num_heads", 0), width=cx.attr("rotary_embedding_dim", 0),
        interleaved=bool(cx.attr("interleaved", 0)), final=True,
    )  # fmt: skip


def _plus_bias(cx: NodeContext, x: str, bias: int) -> str:
    return x if cx.input(bias) is None else cx.emit("add", [x, cx.input(bias)])


@converter(f"{MS}.Gelu")
def gelu(cx: NodeContext):
    return cx.emit("gelu", [cx.input(0)], {"approximate": "none"}, final=True)


@converter(f"{MS}.BiasGelu")
def bias_gelu(cx: NodeContext):
    x = cx.emit("add", [cx.input(0), cx.input(1)])
    return cx.emit("gelu", [x], {"approximate": "none"}, final=True)


@converter(f"{MS}.FastGelu")
def fast_gelu(cx: NodeContext):
    return cx.emit("gelu", [_plus_bias(cx, cx.input(0), 1)], {"approximate": "tanh"}, final=True)


@converter(f"{MS}.GemmFastGelu")
def gemm_fast_gelu(cx: NodeContext):
    y = _plus_bias(cx, cx.emit("matmul", [cx.input(0), cx.input(1)]), 2)
    return cx.emit("gelu", [y], {"approximate": "tanh"}, final=True)


@converter(f"{MS}.QuickGelu")
def quick_gelu(cx: NodeContext):
    x = cx.input(0)
    alpha = cx.constant(np.asarray(cx.attr("alpha", 1.702), cx.type(0).dtype.numpy), "alpha")
    gate = cx.emit("sigmoid", [cx.emit("mul", [x, alpha])])
    return cx.emit("mul", [x, gate], final=True)


@converter(f"{MS}.BiasAdd")
def bias_add(cx: NodeContext):
    return cx.emit("add", [cx.emit("add", [cx.input(0), cx.input(1)]), cx.input(2)], final=True)


def _skip_norm(cx: NodeContext, *, simplified: bool) -> tuple[str, ...]:
    """input + skip (+ bias), normalised over the last axis; outputs: output, mean,
    inv_std_var, input_skip_bias_sum (the statistics only when asked for)."""
    bias = 3 if simplified else 4
    total = _plus_bias(cx, cx.emit("add", [cx.input(0), cx.input(1)]), bias)
    eps = cx.attr("epsilon", 1e-12 if not simplified else 1e-5)
    attrs = {"axis": -1, "epsilon": eps}
    if simplified:
        y = cx.emit("rms_norm", [total, cx.input(2)], attrs)
    else:
        y = cx.emit("layer_norm", [total, cx.input(2), cx.input(3)], attrs)
    outs = list(cx.node.output)
    if any(outs[1:3]):
        raise ModelError("the mean and inv_std_var outputs (training) are not supported")
    if len(outs) > 3 and outs[3]:
        return (y, y, y, total)  # the unnamed statistics' places filled, then the sum
    return (y,)


@converter(f"{MS}.SkipLayerNormalization")
def skip_layer_norm(cx: NodeContext):
    return _skip_norm(cx, simplified=False)


@converter(f"{MS}.SkipSimplifiedLayerNormalization")
def skip_simplified_layer_norm(cx: NodeContext):
    return _skip_norm(cx, simplified=True)


@converter("SimplifiedLayerNormalization", f"{MS}.SimplifiedLayerNormalization")
def simplified_layer_norm(cx: NodeContext):
    """RMS normalisation (onnxruntime registers it in the default domain)."""
    if len(cx.node.output) > 1 and any(cx.node.output[1:]):
        raise ModelError("the inv_std_var output (training) is not supported")
    attrs = {"axis": cx.attr("axis", -1), "epsilon": cx.attr("epsilon", 1e-5)}
    return cx.emit("rms_norm", [cx.input(0), cx.input(1)], attrs, final=True)


@converter(f"{MS}.FusedMatMul")
def fused_matmul(cx: NodeContext):
    """alpha * op(A) @ op(B), op a transpose of the last two axes when transA / transB."""
    if cx.attr("transBatchA", 0) or cx.attr("transBatchB", 0):
        raise ModelError("transBatchA / transBatchB are not supported")
    a, b = cx.input(0), cx.input(1)
    for flag, k in (("transA", 0), ("transB", 1)):
        if cx.attr(flag, 0):
            rank = len(cx.shape(k))
            if rank < 2:
                raise ModelError(f"{flag} needs an operand of rank 2 or more")
            perm = (*range(rank - 2), rank - 1, rank - 2)
            if k == 0:
                a = cx.emit("transpose", [a], {"perm": perm})
            else:
                b = cx.emit("transpose", [b], {"perm": perm})
    alpha = float(cx.attr("alpha", 1.0))
    if alpha == 1.0:
        return cx.emit("matmul", [a, b], final=True)
    y = cx.emit("matmul", [a, b])
    scale = cx.constant(np.asarray(alpha, cx.type(0).dtype.numpy), "alpha")
    return cx.emit("mul", [y, scale], final=True)


def _merged(cx: NodeContext, y: str) -> str:
    """[B, H, S, D] -> [B, S, H * D] under the node's output name."""
    b, h, s, d = cx.shape_of(y)
    back = cx.emit("transpose", [y], {"perm": (0, 2, 1, 3)})
    return cx.emit("reshape", [back], {"shape": (b, s, h * d)}, final=True)


def _key_mask(cx: NodeContext, index: int, batch: int, keys: int) -> str | None:
    """The key padding mask as a bool [B, 1, 1, L], or None: a [B, L] mask of 1 (attend) and
    0 (padding), or a [B] mask index, the number of leading keys each sequence attends to
    (what ``EmbedLayerNormalization`` and the optimizer's mask reduction write)."""
    if cx.input(index) is None:
        return None
    if cx.shape(index) == (batch,):
        ends = cx.emit("cast", [cx.input(index)], {"to": DType.INT32})
        ends = cx.emit("reshape", [ends], {"shape": (batch, 1, 1, 1)})
        steps = cx.constant(np.arange(keys, dtype=np.int32).reshape(1, 1, 1, keys), "keys")
        return cx.emit("less", [steps, ends])
    if cx.shape(index) != (batch, keys):
        raise ModelError(
            f"only a [batch, keys] = [{batch}, {keys}] mask of 1s and 0s or a [batch] = [{batch}] "
            f"mask index is supported here, not {list(cx.shape(index))} (mask_index's other "
            "forms, start positions and 3-d masks: not yet)"
        )
    keep = cx.emit("cast", [cx.input(index)], {"to": DType.BOOL})
    return cx.emit("reshape", [keep], {"shape": (batch, 1, 1, keys)})


def _refuse_extras(cx: NodeContext, inputs: dict[int, str], outputs: dict[int, str]) -> None:
    for i, what in inputs.items():
        if cx.input(i) is not None:
            raise ModelError(f"the {what} input is not supported yet")
    for i, what in outputs.items():
        if len(cx.node.output) > i and cx.node.output[i]:
            raise ModelError(f"the {what} output is not supported yet")
    if cx.attr("do_rotary", 0):
        raise ModelError("do_rotary is not supported yet")


@converter(f"{MS}.Attention")
def contrib_attention(cx: NodeContext):
    """BERT-style self-attention with packed Q, K, V weights (the transformer optimizer's
    fusion): input [B, S, in] @ weights [in, 3 * hidden] + bias, num_heads heads, an
    optional key mask, unidirectional = causal. Masked keys get no weight (onnxruntime
    adds mask_filter_value, -10000: the same softmax to fp32 unless a row is fully masked)."""
    _refuse_extras(cx, {4: "past", 5: "attention_bias", 6: "past_sequence_length"}, {1: "present"})
    packed = _plus_bias(cx, cx.emit("matmul", [cx.input(0), cx.input(1)]), 2)
    return _self_attention(cx, packed, mask=3)


@converter(f"{MS}.QAttention")
def q_attention(cx: NodeContext):
    """``Attention`` on quantized operands (``quantize_dynamic``'s form): input, weight,
    bias, input_scale, weight_scale, mask_index, input_zero_point, weight_zero_point, past.
    The projection (input - zp) @ (weight - zp) accumulates in exact int32, times
    input_scale * weight_scale (one value or one per column), plus the float bias."""
    _refuse_extras(cx, {8: "past"}, {1: "present"})
    if cx.attr("past_present_share_buffer", 0):
        raise ModelError("past_present_share_buffer is not supported")
    x = centred_int32(cx, cx.input(0), cx.input(6), row_param=False)
    w = centred_int32(cx, cx.input(1), cx.input(7), row_param=False)
    acc = cx.emit("cast", [cx.emit("matmul", [x, w])], {"to": DType.FP32})
    scale = cx.emit("mul", [cx.input(3), cx.input(4)])
    packed = cx.emit("add", [cx.emit("mul", [acc, scale]), cx.input(2)])
    return _self_attention(cx, packed, mask=5)


def _self_attention(cx: NodeContext, packed: str, *, mask: int) -> str:
    """The attention of a packed [B, S, q + k + v] projection (``qkv_hidden_sizes``, else
    thirds), its key mask from input ``mask``, merged back to [B, S, hidden]."""
    heads = cx.attr("num_heads")
    b, s, width = cx.shape_of(packed)
    sizes = tuple(cx.attr("qkv_hidden_sizes", ())) or (width // 3,) * 3
    if sum(sizes) != width:
        raise ModelError(f"qkv_hidden_sizes {list(sizes)} do not add up to the weights' {width}")
    q, k, v = cx.emit("split", [packed], {"axis": 2, "sizes": sizes})
    keep = _key_mask(cx, mask, b, s)
    attrs = {"scale": cx.attr("scale", None) or None, "causal": bool(cx.attr("unidirectional", 0))}
    y = cx.emit(
        "attention",
        [split_heads(cx, q, heads), split_heads(cx, k, heads), split_heads(cx, v, heads), keep],
        attrs,
    )
    return _merged(cx, y)


@converter(f"{MS}.MultiHeadAttention")
def multi_head_attention(cx: NodeContext):
    """Separate query [B, S, D], key [B, L, D] and value [B, L, Dv] (3-d forms), an optional
    bias [D + D + Dv] and [B, L] key padding mask; num_heads heads."""
    _refuse_extras(
        cx,
        {5: "attention_bias", 6: "past_key", 7: "past_value"},
        {1: "present_key", 2: "present_value"},
    )
    if cx.input(1) is None or cx.input(2) is None or len(cx.shape(1)) != 3:
        raise ModelError("only separate 3-d query, key and value inputs are supported here")
    heads = cx.attr("num_heads")
    q, k, v = cx.input(0), cx.input(1), cx.input(2)
    if cx.input(3) is not None:
        d, dv = cx.shape(0)[2], cx.shape(2)[2]
        bq, bk, bv = cx.emit("split", [cx.input(3)], {"axis": 0, "sizes": (d, d, dv)})
        q, k, v = (cx.emit("add", [x, bias]) for x, bias in ((q, bq), (k, bk), (v, bv)))
    mask = _key_mask(cx, 4, cx.shape(0)[0], cx.shape(1)[1])
    attrs = {"scale": cx.attr("scale", None) or None, "causal": bool(cx.attr("unidirectional", 0))}
    y = cx.emit(
        "attention",
        [split_heads(cx, q, heads), split_heads(cx, k, heads), split_heads(cx, v, heads), mask],
        attrs,
    )
    return _merged(cx, y)
