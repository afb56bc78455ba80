"""The com.microsoft ops onnxruntime's quantizer and transformer optimizer write, against
onnxruntime running the same models.

``DynamicQuantizeLSTM`` comes from onnxruntime's own ``quantize_dynamic`` on a float LSTM.
onnxruntime also quantizes the LSTM's activations to uint8 at run time, which anekit does
not, so two oracles: the float LSTM carrying the same dequantized weights on onnxruntime
(equal to fp32 rounding), and the quantized model on onnxruntime (within its activation
quantization noise).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit

RNG = np.random.default_rng(11)
MS = "com.microsoft"


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def _model(nodes: list, inputs: dict, outputs: list[str], inits: dict) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _check(model: onnx.ModelProto, feeds: dict, oracle: onnx.ModelProto | None = None) -> None:
    expected = _ort(oracle or model, feeds)
    compiled = anekit.compile(model, "m4", approximate_gelu=False)  # exact erf GELU kept
    names = [o.name for o in model.graph.output]
    reference = compiled.run(feeds, "reference")
    for name, want in zip(names, expected, strict=True):
        np.testing.assert_allclose(reference[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    sim = compiled.run(feeds, "sim")
    for name, want in zip(names, expected, strict=True):
        np.testing.assert_allclose(sim[name], want, rtol=2e-2, atol=3e-2, err_msg=name)


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
def test_gelu_family(op: str) -> None:
    x = _f(2, 5, 16, scale=2.0)
    attrs = {"alpha": 1.5} if op == "QuickGelu" else {}
    model = _model([helper.make_node(op, ["x"], ["y"], domain=MS, **attrs)], {"x": x}, ["y"], {})
    _check(model, {"x": x})


@pytest.mark.parametrize("op", ["FastGelu", "BiasGelu"])
def test_gelu_with_bias(op: str) -> None:
    x, b = _f(2, 5, 16, scale=2.0), _f(16)
    model = _model([helper.make_node(op, ["x", "b"], ["y"], domain=MS)], {"x": x}, ["y"], {"b": b})
    _check(model, {"x": x})


def test_gemm_fast_gelu() -> None:
    """onnxruntime's CPU provider has no GemmFastGelu: its definition, MatMul then FastGelu
    with the bias, is the oracle."""
    x, w, b = _f(3, 8), _f(8, 12, scale=0.3), _f(12)
    inits = {"w": w, "b": b}
    node = helper.make_node("GemmFastGelu", ["x", "w", "b"], ["y"], domain=MS)
    oracle = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("FastGelu", ["m", "b"], ["y"], domain=MS),
        ],
        {"x": x},
        ["y"],
        inits,
    )
    _check(_model([node], {"x": x}, ["y"], inits), {"x": x}, oracle)


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_normalization(with_bias: bool) -> None:
    x, skip = _f(2, 6, 32, scale=3.0), _f(2, 6, 32)
    inits = {"g": _f(32), "beta": _f(32)} | ({"bias": _f(32)} if with_bias else {})
    names = ["x", "skip", "g", "beta", *(["bias"] if with_bias else [])]
    outs = ["y", "", "", "sum"] if with_bias else ["y"]
    node = helper.make_node("SkipLayerNormalization", names, outs, domain=MS, epsilon=1e-5)
    model = _model([node], {"x": x, "skip": skip}, [o for o in outs if o], inits)
    _check(model, {"x": x, "skip": skip})


def test_skip_simplified_and_simplified_layer_normalization() -> None:
    x, skip = _f(2, 6, 32, scale=3.0), _f(2, 6, 32)
    nodes = [
        helper.make_node(
            "SkipSimplifiedLayerNormalization", ["x", "skip", "g"], ["h"], domain=MS, epsilon=1e-6
        ),
        helper.make_node("SimplifiedLayerNormalization", ["h", "g2"], ["y"], epsilon=1e-6),
    ]
    model = _model(nodes, {"x": x, "skip": skip}, ["h", "y"], {"g": _f(32), "g2": _f(32)})
    _check(model, {"x": x, "skip": skip})


@pytest.mark.parametrize(("trans_a", "trans_b", "alpha"), [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0)])
def test_fused_matmul(trans_a: int, trans_b: int, alpha: float) -> None:
    a = _f(2, 8, 4) if trans_a else _f(2, 4, 8)
    b = _f(6, 8) if trans_b else _f(8, 6)
    node = helper.make_node(
        "FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=trans_a, transB=trans_b, alpha=alpha
    )
    _check(_model([node], {"a": a}, ["y"], {"b": b}), {"a": a})


def test_dynamic_quantize_matmul() -> None:
    a = _f(3, 16)
    bq = RNG.integers(-127, 128, (16, 8)).astype(np.int8)
    scale, bias = np.array(0.02, np.float32), _f(8)
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "bq", "s", "", "bias"], ["y"], domain=MS)
    model = _model([node], {"a": a}, ["y"], {"bq": bq, "s": scale, "bias": bias})
    float_model = _model(
        [
            helper.make_node("MatMul", ["a", "b"], ["m"]),
            helper.make_node("Add", ["m", "bias"], ["y"]),
        ],
        {"a": a},
        ["y"],
        {"b": bq.astype(np.float32) * scale, "bias": bias},
    )
    compiled = anekit.compile(model, "m4")
    got = compiled.run({"a": a}, "reference")["y"]
    np.testing.assert_allclose(got, _ort(float_model, {"a": a})[0], rtol=1e-5, atol=1e-5)
    # onnxruntime quantizes `a` to uint8 per tensor: within that noise (1% of the range)
    noisy = _ort(model, {"a": a})[0]
    assert np.abs(got - noisy).max() <= 0.01 * np.abs(noisy).max()


def _lstm_model(direction: str, hidden: int = 12, features: int = 6) -> onnx.ModelProto:
    dirs = 2 if direction == "bidirectional" else 1
    w = _f(dirs, 4 * hidden, features, scale=0.4)
    r = _f(dirs, 4 * hidden, hidden, scale=0.3)
    b = _f(dirs, 8 * hidden, scale=0.1)
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B"], ["y", "h", "c"], hidden_size=hidden, direction=direction
    )
    return _model([node], {"x": _f(5, 1, features)}, ["y", "h", "c"], {"W": w, "R": r, "B": b})


def _dequantized_as_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """The quantized model's LSTM as a float LSTM with its weights dequantized."""
    (node,) = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def weight(q: str, s: str, z: str) -> np.ndarray:
        scale, zero = inits[s].astype(np.float32), inits[z].astype(np.float32)
        if scale.ndim == 2:
            scale, zero = scale[:, None, :], zero[:, None, :]
        elif scale.ndim == 1:
            scale, zero = scale[:, None, None], zero[:, None, None]
        return ((inits[q].astype(np.float32) - zero) * scale).transpose(0, 2, 1)

    w = weight(node.input[1], node.input[8], node.input[9])
    r = weight(node.input[2], node.input[10], node.input[11])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    lstm = helper.make_node("LSTM", ["x", "W", "R", node.input[3]], list(node.output), **attrs)
    x = model.graph.input[0]
    return _model(
        [lstm],
        {x.name: _f(5, 1, 6)},
        list(node.output),
        {"W": w, "R": r, node.input[3]: inits[node.input[3]]},
    )


@pytest.mark.parametrize(
    ("direction", "per_channel"), [("forward", False), ("bidirectional", True), ("reverse", False)]
)
def test_dynamic_quantize_lstm_from_onnxruntimes_quantizer(
    tmp_path: Path, direction: str, per_channel: bool
) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, quantized = tmp_path / "lstm.onnx", tmp_path / "lstm.q.onnx"
    onnx.save(_lstm_model(direction), source)
    quantize_dynamic(
        source, quantized, op_types_to_quantize=["LSTM"], per_channel=per_channel,
        weight_type=QuantType.QInt8,
    )  # fmt: skip
    model = onnx.load(quantized)
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    x = _f(5, 1, 6)
    compiled = anekit.compile(model, "m4")
    names = ["y", "h", "c"]
    reference = compiled.run({"x": x}, "reference")
    exact = _ort(_dequantized_as_float(model), {"x": x})
    for name, want in zip(names, exact, strict=True):
        np.testing.assert_allclose(reference[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    noisy = _ort(model, {"x": x})
    for name, want in zip(names, noisy, strict=True):
        np.testing.assert_allclose(reference[name], want, atol=0.03, err_msg=name)
    sim = compiled.run({"x": x}, "sim")
    for name, want in zip(names, exact, strict=True):
        np.testing.assert_allclose(sim[name], want, atol=1e-2, err_msg=name)


@pytest.mark.parametrize(("masked", "causal"), [(False, False), (True, False), (False, True)])
def test_packed_attention(masked: bool, causal: bool) -> None:
    b, s, hidden, heads = 2, 6, 16, 4
    x = _f(b, s, hidden)
    inits = {"w": _f(hidden, 3 * hidden, scale=0.3), "bias": _f(3 * hidden, scale=0.1)}
    names = ["x", "w", "bias"]
    feeds = {"x": x}
    inputs = {"x": x}
    if masked:  # the last two keys of the second sequence are padding
        mask = np.ones((b, s), np.int32)
        mask[1, -2:] = 0
        names.append("mask")
        feeds["mask"] = mask
    node = helper.make_node(
        "Attention", names, ["y"], domain=MS, num_heads=heads, unidirectional=int(causal)
    )
    graph_inputs = [
        helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()
    ]
    if masked:
        graph_inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, [b, s]))
    graph = helper.make_graph(
        [node], "attn", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    _check(model, feeds)


def test_multi_head_attention_with_bias_and_key_padding() -> None:
    b, s, kv, hidden, heads = 2, 5, 7, 16, 2
    q, k, v = _f(b, s, hidden), _f(b, kv, hidden), _f(b, kv, hidden)
    mask = np.ones((b, kv), np.int32)
    mask[0, -3:] = 0
    node = helper.make_node(
        "MultiHeadAttention", ["q", "k", "v", "bias", "mask"], ["y"], domain=MS, num_heads=heads
    )
    graph = helper.make_graph(
        [node], "mha",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in (("q", q), ("k", k), ("v", v))]
        + [helper.make_tensor_value_info("mask", TensorProto.INT32, [b, kv])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(_f(3 * hidden, scale=0.1), "bias")],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    _check(model, {"q": q, "k": k, "v": v, "mask": mask})


def _float_mlp(k: int, hidden: int, n: int) -> tuple[onnx.ModelProto, dict]:
    """A two-MatMul model with a GELU between, as the quantizer finds in transformer blocks."""
    inits = {"w1": _f(k, hidden, scale=0.2), "w2": _f(hidden, n, scale=0.2), "b": _f(n)}
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Gelu", ["h"], ["g"], domain=MS),
        helper.make_node("MatMul", ["g", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    return _model(nodes, {"x": _f(2, 3, k)}, ["y"], inits), inits


@pytest.mark.parametrize(
    ("bits", "block_size", "symmetric"), [(4, 32, False), (4, 128, True), (8, 64, False)]
)
def test_matmul_nbits_from_onnxruntimes_weight_only_quantizer(
    bits: int, block_size: int, symmetric: bool
) -> None:
    """onnxruntime's MatMulNBitsQuantizer rewrites the float MatMuls; anekit dequantizes the
    blocks once and must give onnxruntime's answer on the quantized model. K = 80 is not a
    multiple of the block, so the last block is padded."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    model, _ = _float_mlp(80, 96, 24)
    original = onnx.ModelProto()
    original.CopyFrom(model)  # the quantizer rewrites the model it is given
    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric, bits=bits)
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    quantized = quantizer.model.model
    kinds = [n.op_type for n in quantized.graph.node]
    assert kinds.count("MatMulNBits") == 2, kinds
    x = _f(2, 3, 80)
    _check(quantized, {"x": x})
    # and the quantization did something: the float model's answer differs
    assert not np.allclose(_ort(original, {"x": x})[0], _ort(quantized, {"x": x})[0], atol=1e-3)


@pytest.mark.parametrize("zero_points", ["absent", "packed", "float"])
def test_matmul_nbits_zero_point_forms(zero_points: str) -> None:
    k, n, block, bits = 48, 10, 16, 4
    blocks = k // block
    codes = RNG.integers(0, 16, (n, blocks, block), dtype=np.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    inits = {"B": packed, "scales": _f(n * blocks, scale=0.1), "bias": _f(n)}
    if zero_points == "packed":
        zp = RNG.integers(0, 16, (n, 4), dtype=np.uint8)  # 3 blocks -> 2 bytes per row
        inits["zp"] = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    elif zero_points == "float":
        inits["zp"] = _f(n * blocks, scale=4.0) + 8
    names = ["x", "B", "scales", "zp" if "zp" in inits else "", "", "bias"]
    node = helper.make_node(
        "MatMulNBits", names, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block
    )
    x = _f(4, k)
    _check(_model([node], {"x": x}, ["y"], inits), {"x": x})


def test_matmul_nbits_refuses_a_b_that_contradicts_its_attributes() -> None:
    node = helper.make_node(
        "MatMulNBits", ["x", "B", "s"], ["y"], domain=MS, K=32, N=4, bits=4, block_size=16
    )
    inits = {"B": np.zeros((4, 2, 4), np.uint8), "s": np.ones(8, np.float32)}
    model = _model([node], {"x": _f(1, 32)}, ["y"], inits)
    with pytest.raises(anekit.AnekitError, match=r"not the uint8\[4, 2, 8\]"):
        anekit.compile(model, "m4")


@pytest.mark.parametrize(("layout", "offset"), [("3d", True), ("3d", False), ("4d", False)])
def test_contrib_rotary_embedding(layout: str, offset: bool) -> None:
    """com.microsoft's RotaryEmbedding: position_ids second, a one-value position_ids the
    offset of the first position; interleaved pairs and a partial rotary width."""
    b, s, heads, size, rot = 2, 5, 3, 8, 6
    x = _f(b, s, heads * size) if layout == "3d" else _f(b, heads, s, size)
    angles = RNG.uniform(0, 6.28, (16, rot // 2)).astype(np.float32)
    inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
    if offset:
        inits["pos"] = np.array([7], np.int64)
    else:
        inits["pos"] = RNG.integers(0, 16, (b, s)).astype(np.int64)
    for interleaved in (0, 1):
        node = helper.make_node(
            "RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
            num_heads=heads, rotary_embedding_dim=rot, interleaved=interleaved,
        )  # fmt: skip
        _check(_model([node], {"x": x}, ["y"], inits), {"x": x})


@pytest.mark.parametrize("symmetric", [True, False])
def test_gather_block_quantized_from_onnxruntimes_weight_only_quantizer(symmetric: bool) -> None:
    """MatMulNBitsQuantizer in QOperator format with Gather among its op types writes the
    embedding table as int4 (symmetric) or uint4 codes with uint4 zero points; 80 columns in
    blocks of 32 leave a short last block."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    inits = {"table": _f(50, 80), "w": _f(80, 16, scale=0.2)}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, (2, 7))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "e")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    config = DefaultWeightOnlyQuantConfig(
        block_size=32, is_symmetric=symmetric, quant_format=QuantFormat.QOperator,
        op_types_to_quantize=("MatMul", "Gather"), quant_axes=(("Gather", 1), ("MatMul", 0)),
    )  # fmt: skip
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node] == ["GatherBlockQuantized", "MatMulNBits"]
    codes = next(t for t in quantized.graph.initializer if t.name.endswith("_Q4") and t.dims[0] == 50)
    assert codes.data_type == (TensorProto.INT4 if symmetric else TensorProto.UINT4)
    _check(quantized, {"ids": RNG.integers(0, 50, (2, 7))})


def _packed_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes of ``8 // bits`` codes each along the last axis, low bits first."""
    per = 8 // bits
    codes = np.pad(codes, [(0, 0), (0, -codes.shape[1] % per)])
    return np.bitwise_or.reduce(
        [codes[:, i::per] << (i * bits) for i in range(per)], axis=0
    ).astype(np.uint8)


def _gather_block_quantized(inits: dict, **attrs) -> onnx.ModelProto:
    """ids [2, 5] -> GatherBlockQuantized 'embed' over the initializers given (data, scales
    and, when present, zp, in that order)."""
    names = ["data", "ids", "scales", *(["zp"] if "zp" in inits else [])]
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS, name="embed", **attrs)
    graph = helper.make_graph(
        [node], "gbq", [helper.make_tensor_value_info("ids", TensorProto.INT64, (2, 5))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


@pytest.mark.parametrize(("bits", "zero_points"), [(4, True), (4, False), (2, True), (8, True)])
def test_gather_block_quantized_packed_uint8_forms(bits: int, zero_points: bool) -> None:
    rows, width, block = 12, 48, 16
    inits = {
        "data": _packed_codes(RNG.integers(0, 1 << bits, (rows, width)).astype(np.uint8), bits),
        "scales": _f(rows, width // block, scale=0.1),
    }
    if zero_points:  # three blocks' zero points, packed like the codes
        inits["zp"] = _packed_codes(RNG.integers(0, 1 << bits, (rows, 3)).astype(np.uint8), bits)
    model = _gather_block_quantized(inits, bits=bits, block_size=block, quantize_axis=1,
                                    gather_axis=0)  # fmt: skip
    _check(model, {"ids": RNG.integers(0, rows, (2, 5))})


@pytest.mark.parametrize(
    ("change", "message"),
    [({"block_size": 0}, "(?s)block_size 0 is not a power of two.*hint: FP8/FP4"),
     ({"bits": 3}, "3-bit codes are not supported"),
     ({"scales": (12, 2)}, r"scales are \[12, 2\], not the \[12, 3\]")],
)  # fmt: skip
def test_gather_block_quantized_refusals_name_the_node(change: dict, message: str) -> None:
    attrs = {"bits": 4, "block_size": 16} | {k: v for k, v in change.items() if k != "scales"}
    inits = {
        "data": _packed_codes(RNG.integers(0, 16, (12, 48)).astype(np.uint8), 4),
        "scales": _f(*change.get("scales", (12, 3))),
    }
    model = _gather_block_quantized(inits, **attrs)
    with pytest.raises(anekit.AnekitError, match=message) as caught:
        anekit.compile(model, "m4")
    assert "embed" in str(caught.value)


@pytest.mark.parametrize(("bidirectional", "length"), [(True, 9), (False, 9), (True, 300)])
def test_relative_position_bias_is_t5s(bidirectional: bool, length: int) -> None:
    """onnxruntime runs RelativePositionBias on CUDA only: transformers' T5 attention, whose
    bucket arithmetic the optimizer fuses into it, is the oracle. The table is stored as the
    optimizer stores it (its transpose under [num_buckets, num_heads]); 300 positions reach
    the logarithmic buckets and the cap at max_distance."""
    torch = pytest.importorskip("torch")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(num_heads=3, relative_attention_num_buckets=32, d_model=12, d_kv=4,
                      relative_attention_max_distance=128, is_decoder=not bidirectional)  # fmt: skip
    layer = T5Attention(config, has_relative_attention_bias=True).eval()
    table = RNG.standard_normal((32, 3)).astype(np.float32)
    with torch.no_grad():
        layer.relative_attention_bias.weight.copy_(torch.from_numpy(table))
        want = layer.compute_bias(length, length).numpy()
    node = helper.make_node(
        "RelativePositionBias", ["table", "q_len", "k_len"], ["y"], domain=MS,
        max_distance=128, is_bidirectional=int(bidirectional),
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "t5", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("table", TensorProto.FLOAT, [32, 3], table.T.tobytes(), raw=True),
         numpy_helper.from_array(np.array(length, np.int64), "q_len"),
         numpy_helper.from_array(np.array(length, np.int64), "k_len")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    compiled = anekit.compile(model, "m4")
    np.testing.assert_array_equal(compiled.run({}, "reference")["y"], want)
    np.testing.assert_allclose(compiled.run({}, "sim")["y"], want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
def test_matmul_bnb4_from_onnxruntimes_quantizer(quant_type: int) -> None:
    """MatMulBnb4Quantizer writes FP4 or NF4 codes of the transposed weight in blocks of 32;
    anekit's code tables (FP4 as bitsandbytes orders it, NF4 built from normal quantiles)
    must give onnxruntime's products."""
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    model, _ = _float_mlp(40, 48, 24)
    quantizer = MatMulBnb4Quantizer(model, quant_type, 32)
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node].count("MatMulBnb4") == 2
    _check(quantized, {"x": _f(2, 3, 40)})


_BNB4_WEIGHT = {"B": RNG.integers(0, 256, 18).astype(np.uint8), "absmax": np.abs(_f(3)) + 0.5}


def _bnb4_node(**attrs) -> onnx.ModelProto:
    """W [N=5, K=7] as 35 codes (an odd count: the last byte half empty), blocks of 16."""
    inits = _BNB4_WEIGHT
    node = helper.make_node(
        "MatMulBnb4", ["x", "B", "absmax"], ["y"], domain=MS, name="bnb", K=7, N=5,
        block_size=16, **attrs,
    )  # fmt: skip
    width = 7 if attrs.get("transB", 1) else 5
    return _model([node], {"x": _f(7, width)}, ["y"], inits)  # 7 rows: room for the identity


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
def test_matmul_bnb4_hand_built_both_orientations(quant_type: int) -> None:
    """transB=1 against onnxruntime. Its CPU kernel returns garbage for transB=0 (the
    training form), so there onnxruntime supplies the dequantized weight: transB=1 applied
    to the identity is W^T, and x @ W is the oracle."""
    transposed = _bnb4_node(quant_type=quant_type)
    _check(transposed, {"x": _f(7, 7)})
    weight_t = _ort(transposed, {"x": np.eye(7, dtype=np.float32)})[0]  # [K, N] = W^T
    x = _f(7, 5)
    got = anekit.compile(_bnb4_node(quant_type=quant_type, transB=0), "m4").run({"x": x}, "reference")
    np.testing.assert_allclose(got["y"], x @ weight_t.T, rtol=1e-5, atol=1e-5)


def test_matmul_bnb4_refuses_an_unknown_code_table() -> None:
    with pytest.raises(anekit.AnekitError, match="'bnb'.*quant_type 2 is neither 0 \\(FP4\\) nor 1"):
        anekit.compile(_bnb4_node(quant_type=2), "m4")


def test_gather_block_quantized_refuses_zero_points_that_do_not_match_the_scales() -> None:
    inits = {
        "data": _packed_codes(RNG.integers(0, 16, (12, 48)).astype(np.uint8), 4),
        "scales": _f(12, 3), "zp": np.zeros((12, 1), np.uint8),
    }  # fmt: skip
    model = _gather_block_quantized(inits, bits=4, block_size=16)
    with pytest.raises(anekit.AnekitError, match=r"'embed'.*zero_points are \[12, 2\], not the scales' \[12, 3\]"):
        anekit.compile(model, "m4")
