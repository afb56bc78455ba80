"""A rank-0 value crossing between an ANE and a CPU segment compiles and runs on the
simulator with onnxruntime's answer (it used to come back from a segment as shape [1],
and the next segment blamed the caller's feeds)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import anekit
from tests import zoo
from tests.safety.model_cases import F32, model, tensor, value

RNG = np.random.default_rng(3)


def _onnxruntime(proto: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _scalars_crossing(compiled: anekit.CompiledModel) -> list[str]:
    """Values of shape () that one segment hands to a segment on the other device."""
    segments = compiled.bundle.manifest.segments
    device = {s.index: s.device for s in segments}
    return [
        io.value
        for s in segments
        for io in s.inputs
        if io.shape == ()
        and io.source.segment is not None
        and device[io.source.segment] != s.device
    ]


def test_reduce_max_without_keepdims_divides_across_segments() -> None:
    """ReduceMax(keepdims=0) on the engine, an int32 round trip on the CPU, then a Div."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT32),
        helper.make_node("Cast", ["mi"], ["mf"], to=F32),
        helper.make_node("Add", ["mf", "one"], ["d"]),
        helper.make_node("Div", ["x", "d"], ["y"]),
    ]
    proto = model(nodes, [value("x", [1, 16, 8])], [value("y", None)],
                  [tensor(np.array(1.0, np.float32), "one")])  # fmt: skip
    feeds = {"x": (RNG.standard_normal((1, 16, 8)) * 3).astype(np.float32)}
    want = _onnxruntime(proto, feeds)["y"]
    compiled = anekit.compile(proto, "m4")
    assert _scalars_crossing(compiled)
    got = compiled.run(feeds, backend="sim")["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-3)


@pytest.fixture(scope="module")
def quantized_transformer(tmp_path_factory) -> tuple[onnx.ModelProto, dict]:
    """torch's TransformerEncoderLayer (BERT's block) through onnxruntime's quantize_dynamic:
    its DynamicQuantizeLinear scales and zero points are rank-0 values."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    case = zoo.load("transformer_layer")
    folder = tmp_path_factory.mktemp("quantized")
    src, dst = folder / "float.onnx", folder / "int8.onnx"
    onnx.save(case.proto(), str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    return onnx.load(str(dst)), dict(case.feeds)


def test_dynamically_quantized_transformer_runs_on_sim(quantized_transformer) -> None:
    proto, feeds = quantized_transformer
    want = _onnxruntime(proto, feeds)["y"]
    compiled = anekit.compile(proto, "m4")
    assert _scalars_crossing(compiled)
    got = compiled.run(feeds, backend="sim")["y"]
    assert np.isfinite(got).all()  # int32 accumulators never pass through fp16
    # fp16 scales on the engine move a few int8 codes by one step: well under 1% of the range
    err = float(np.abs(got - want).max())
    assert err <= 0.01 * float(np.abs(want).max()), err
