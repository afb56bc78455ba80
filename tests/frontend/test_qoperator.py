"""Models from onnxruntime's static quantizer in its QOperator format (QLinearConv, QGemm,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearWhere, QLinearSoftmax, int8 MaxPool) and
in QDQ format with com.microsoft Q/DQ ops, against onnxruntime running the same quantized
model. The reference backend must agree within one output quantization step
(onnxruntime takes fixed-point and lookup-table shortcuts); the simulator, which carries the
dequantized values in fp16 between ops, must give the same decisions."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit

ort_quant = pytest.importorskip("onnxruntime.quantization")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RNG = np.random.default_rng(5)


class _Batches(ort_quant.CalibrationDataReader):
    def __init__(self, name: str, batches: np.ndarray):
        self._items = iter([{name: b[None]} for b in batches])

    def get_next(self):
        return next(self._items, None)


def _quantized(
    model: onnx.ModelProto, calibration: np.ndarray, tmp: Path, **options
) -> onnx.ModelProto:
    src, dst = tmp / "float.onnx", tmp / "quantized.onnx"
    onnx.save(model, src)
    name = model.graph.input[0].name
    options = {"quant_format": ort_quant.QuantFormat.QOperator} | options
    ort_quant.quantize_static(str(src), str(dst), _Batches(name, calibration), **options)
    return onnx.load(dst)


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the graph's output."""
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(inits[node.input[1]])


def _compare(model: onnx.ModelProto, samples: np.ndarray) -> None:
    name = model.graph.input[0].name
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = anekit.compile(model, "m4")
    step = _output_step(model)
    for x in samples:
        feeds = {name: x[None]}
        (want,) = session.run(None, feeds)
        (reference,) = compiled.run(feeds, "reference").values()
        (sim,) = compiled.run(feeds, "sim").values()
        assert np.abs(reference - want).max() <= step * 1.0001
        assert sim.argmax() == want.argmax()


def test_the_digits_cnn_quantized_by_onnxruntime(tmp_path: Path) -> None:
    held_out = np.load(EXAMPLES / "digits_heldout.npz")["images"].astype(np.float32)
    model = _quantized(onnx.load(EXAMPLES / "digits_cnn.onnx"), held_out[:32], tmp_path)
    kinds = Counter(n.op_type for n in model.graph.node)
    assert {"QLinearConv", "QGemm", "QLinearMul", "QLinearAdd", "QLinearSoftmax"} <= set(kinds)
    _compare(model, held_out[32:])


def _small_cnn() -> onnx.ModelProto:
    """conv, leaky relu, conv, sigmoid, concat, add, global average pool, gemm, softmax."""
    w1, w2 = 0.4 * RNG.standard_normal((8, 3, 3, 3)), 0.2 * RNG.standard_normal((8, 8, 3, 3))
    inits = {
        "w1": w1, "b1": 0.1 * RNG.standard_normal(8), "w2": w2, "b2": 0.1 * RNG.standard_normal(8),
        "wg": 0.3 * RNG.standard_normal((10, 16)), "bg": 0.1 * RNG.standard_normal(10),
        "shape": np.array([1, 16], np.int64),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["a1"], alpha=0.1),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["a2"]),
        helper.make_node("Concat", ["a1", "a2"], ["cat"], axis=1),
        helper.make_node("Add", ["cat", "cat"], ["sum"]),
        helper.make_node("GlobalAveragePool", ["sum"], ["pooled"]),
        helper.make_node("Reshape", ["pooled", "shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))],
        [numpy_helper.from_array(np.asarray(v, np.float32 if v.dtype.kind == "f" else v.dtype), k)
         for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "options",
    [{}, {"per_channel": True},
     {"activation_type": ort_quant.QuantType.QUInt8, "weight_type": ort_quant.QuantType.QUInt8}],
    ids=["int8", "per-channel", "uint8"],
)  # fmt: skip
def test_every_qoperator_op_the_quantizer_writes(tmp_path: Path, options: dict) -> None:
    samples = RNG.standard_normal((24, 3, 8, 8)).astype(np.float32)
    model = _quantized(_small_cnn(), samples[:16], tmp_path, **options)
    kinds = set(Counter(n.op_type for n in model.graph.node))
    assert {"QLinearConv", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearConcat", "QLinearAdd",
            "QLinearGlobalAveragePool", "QGemm", "QLinearSoftmax"} <= kinds, kinds  # fmt: skip
    _compare(model, samples[16:])


@pytest.mark.parametrize("target", ["m1", "m2", "m4", "m5"])
def test_the_quantized_digits_cnn_is_a_valid_core_ml_package_for_every_dialect(
    tmp_path: Path, target: str
) -> None:
    """Integer convolutions lower to an fp32 CPU conv of the centred values, int8 max pools
    through a float pool: coremltools' milproto loader type-checks every op."""
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    held_out = np.load(EXAMPLES / "digits_heldout.npz")["images"].astype(np.float32)
    model = _quantized(onnx.load(EXAMPLES / "digits_cnn.onnx"), held_out[:8], tmp_path)
    compiled = anekit.compile(model, target)
    path = compiled.save_mlpackage(tmp_path / f"digits_{target}.mlpackage")
    package = ct.models.MLModel(str(path), skip_model_load=True)
    spec = package.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, package.weights_dir)
    ops = {op.op_type for f in program.functions.values() for op in f.operations}
    assert "conv" in ops and "max_pool" in ops
    (want,) = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {model.graph.input[0].name: held_out[40:41]})
    (sim,) = compiled.run({model.graph.input[0].name: held_out[40:41]}, "sim").values()
    assert sim.argmax() == want.argmax()


def _pool_where_cnn() -> onnx.ModelProto:
    """conv, average pool (pads counted), conv, where between two convs, average pool
    (ceil mode): the quantizer writes QLinearAveragePool and QLinearWhere."""
    inits = {
        "w1": 0.4 * RNG.standard_normal((8, 3, 3, 3)), "b1": 0.1 * RNG.standard_normal(8),
        "w2": 0.3 * RNG.standard_normal((8, 8, 1, 1)), "b2": 0.1 * RNG.standard_normal(8),
        "zero": np.zeros(1),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"]),
        helper.make_node("Conv", ["p1", "w2"], ["c3"]),
        helper.make_node("Greater", ["c2", "zero"], ["positive"]),
        helper.make_node("Where", ["positive", "c2", "c3"], ["picked"]),
        helper.make_node("AveragePool", ["picked"], ["y"], kernel_shape=[2, 2], ceil_mode=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "pool_where",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 9, 9))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_average_pool_and_where_as_the_quantizer_writes_them(tmp_path: Path) -> None:
    samples = RNG.standard_normal((20, 3, 9, 9)).astype(np.float32)
    model = _quantized(
        _pool_where_cnn(), samples[:12], tmp_path,
        op_types_to_quantize=["Conv", "AveragePool", "Where"],
        extra_options={"ForceQuantizeNoInputCheck": True},  # else Where stays float
    )  # fmt: skip
    kinds = Counter(n.op_type for n in model.graph.node)
    assert kinds["QLinearAveragePool"] == 2 and kinds["QLinearWhere"] == 1, kinds
    _compare(model, samples[12:])


def _one_node(node: onnx.NodeProto, x_shape: tuple[int, ...]) -> onnx.ModelProto:
    inits = {"s": np.float32(0.05), "z": np.uint8(3), "s2": np.float32(0.02), "z2": np.uint8(100)}
    graph = helper.make_graph(
        [node], "one",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _codes(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


def test_channels_last_qlinear_average_pool() -> None:
    """onnxruntime's NHWC transformer sets channels_last; padded, strided, pads not counted."""
    node = helper.make_node(
        "QLinearAveragePool", ["x", "s", "z", "s2", "z2"], ["y"], domain="com.microsoft",
        kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], channels_last=1,
    )  # fmt: skip
    model = _one_node(node, (2, 7, 6, 5))
    x = _codes((2, 7, 6, 5))
    (want,) = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    compiled = anekit.compile(model, "m4")
    for backend in ("reference", "sim"):
        got = compiled.run({"x": x}, backend)["y"]
        assert got.shape == want.shape == (2, 4, 6, 5)
        assert np.abs(got.astype(int) - want).max() <= 1, backend


def test_qlinear_reduce_mean_is_its_definition() -> None:
    """onnxruntime has no CPU kernel for QLinearReduceMean: its definition, dequantize,
    ReduceMean, quantize, run by onnxruntime, is the oracle."""
    node = helper.make_node(
        "QLinearReduceMean", ["x", "s", "z", "s2", "z2"], ["y"], domain="com.microsoft",
        axes=[1, 3], keepdims=0,
    )  # fmt: skip
    model = _one_node(node, (2, 5, 4, 6))
    oracle = _one_node(node, (2, 5, 4, 6))
    del oracle.graph.node[:]
    oracle.graph.node.extend([
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
        helper.make_node("ReduceMean", ["f"], ["m"], axes=[1, 3], keepdims=0),
        helper.make_node("QuantizeLinear", ["m", "s2", "z2"], ["y"]),
    ])  # fmt: skip
    x = _codes((2, 5, 4, 6))
    (want,) = ort.InferenceSession(
        oracle.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    compiled = anekit.compile(model, "m4")
    np.testing.assert_array_equal(compiled.run({"x": x}, "reference")["y"], want)
    assert np.abs(compiled.run({"x": x}, "sim")["y"].astype(int) - want).max() <= 1


def test_com_microsoft_quantize_and_dequantize_linear(tmp_path: Path) -> None:
    """The QDQ quantizer with UseQDQContribOps writes its Q/DQ pairs in the com.microsoft
    domain: the same model as the standard domain's, to the bit, and onnxruntime's answer."""
    samples = RNG.standard_normal((20, 3, 8, 8)).astype(np.float32)
    float_model = _small_cnn()
    models = {
        contrib: _quantized(
            float_model, samples[:8], tmp_path, quant_format=ort_quant.QuantFormat.QDQ,
            extra_options={"UseQDQContribOps": contrib},
        )
        for contrib in (False, True)
    }  # fmt: skip
    domains = {n.domain for n in models[True].graph.node if n.op_type.endswith("QuantizeLinear")}
    assert domains == {"com.microsoft"}, domains
    _compare(models[True], samples[8:])
    x = {"x": samples[8:9]}
    a, b = (anekit.compile(models[k], "m4").run(x, "reference")["y"] for k in (False, True))
    np.testing.assert_array_equal(a, b)


def test_sixteen_bit_quantization_is_refused_by_name(tmp_path: Path) -> None:
    samples = RNG.standard_normal((8, 3, 8, 8)).astype(np.float32)
    model = _quantized(
        _small_cnn(), samples, tmp_path, quant_format=ort_quant.QuantFormat.QDQ,
        activation_type=ort_quant.QuantType.QInt16, extra_options={"UseQDQContribOps": True},
    )  # fmt: skip
    with pytest.raises(anekit.AnekitError, match="(?s)x_QuantizeLinear.*only int8 and uint8 quantization.*hint: quantize to 8 bits"):
        anekit.compile(model, "m4")
