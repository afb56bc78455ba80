"""Models from onnxruntime's static quantizer in its QOperator format (QLinearConv, QGemm,
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearGlobalAveragePool, QLinearSoftmax, int8 MaxPool), against onnxruntime running the same
quantized model. The reference backend must agree within one output quantization step
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
    ort_quant.quantize_static(
        str(src), str(dst), _Batches(name, calibration),
        quant_format=ort_quant.QuantFormat.QOperator, **options,
    )  # fmt: skip
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
