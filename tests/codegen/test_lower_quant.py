"""quantize_linear / dequantize_linear lowered to MIL: iOS 17+ quantize/dequantize on M4, an exact
decomposition (int32 carrier for the quantized tensor) in the ios16 dialect of M1. Compiled
models are saved, loaded and run on the simulator against the IR kernels and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit import ops, targets
from anekit.codegen.bundle import build_bundle
from anekit.codegen.mil import whole_graph_segment
from anekit.errors import ModelError
from anekit.runtime.program import from_contents

RNG = np.random.default_rng(7)


def _roundtrip(model, target: str, tmp_path: Path):  # noqa: ANN001, ANN202
    cm = anekit.compile(model, target=target)
    return cm, anekit.load(cm.save(tmp_path / f"{target}.anekit"))


def _mil(program_dir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(program_dir.rglob("*.mil")))


def _hard_values(scale: np.ndarray, axis_len: int) -> np.ndarray:
    """x / scale exactly k + 0.5 (ties), far beyond the integer range (saturation) and random
    values; scales are powers of two, so every quotient is exact in fp32 and fp16."""
    k = RNG.integers(-140, 140, (1, axis_len, 4, 6)).astype(np.float32)
    k[..., :2] += 0.5  # ties: half to even
    k[0, :, 0, 2] = 1000.0  # saturates high
    k[0, :, 0, 3] = -1000.0  # saturates low
    k[..., 4:] += RNG.uniform(-0.49, 0.49, (1, axis_len, 4, 2)).astype(np.float32)
    return (k * scale.reshape(1, -1, 1, 1)).astype(np.float32)


CASES = [  # (dtype, per_axis, zero points)
    ("int8", True, [-3, 0, 7]),
    ("int8", False, [-5]),
    ("uint8", True, [0, 128, 250]),
    ("uint8", False, [3]),
]


@pytest.mark.parametrize(("dtype", "per_axis", "zps"), CASES)
@pytest.mark.parametrize("target", ["m1", "m4"])
def test_qdq_graph_matches_the_reference(
    dtype: str, per_axis: bool, zps: list[int], target: str, tmp_path: Path
) -> None:
    scale = np.array([0.5, 0.25, 0.125] if per_axis else [0.25], np.float32)
    zp = np.array(zps if per_axis else zps[0], dtype)
    x = anekit.input("x", (1, 3, 4, 6))
    q = ops.quantize_linear(x, scale if per_axis else scale[0], zp, axis=1, dtype=dtype, name="q")
    y = ops.dequantize_linear(q, scale if per_axis else scale[0], zp, axis=1, name="y")
    z = ops.relu(ops.mul(y, anekit.constant(np.float32(2.0))), name="z")
    # M1's ios16 dialect has no int8 tensors: q stays inside its segment there (see quant.py)
    g = anekit.graph([z, y] if target == "m1" else [z, y, q])
    feeds = {"x": _hard_values(scale if per_axis else np.repeat(scale, 3), 3)}
    want = g.run(feeds)
    cm, program = _roundtrip(g, target, tmp_path)
    got = program.run(feeds, "sim")
    # the Q/DQ pair runs in an fp32 CPU segment: exact; the engine's relu is exact in fp16
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["z"], want["z"])
    # the integers: recovered from y on M1, read directly on M4
    zp_b = zp.astype(np.int64).reshape(-1, 1, 1) if per_axis else np.int64(zp)
    s_b = scale.reshape(-1, 1, 1) if per_axis else scale[0]
    ints = np.rint(got["y"] / s_b).astype(np.int64) + zp_b
    info = np.iinfo(dtype)
    assert ints.min() == info.min and ints.max() == info.max  # saturation reached both ends
    if target == "m4":
        assert got["q"].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got["q"], want["q"])
        np.testing.assert_array_equal(got["q"].astype(np.int64), ints)
    # ties went to even: x/s = k + 0.5 gives an even k' before the zero point
    tie = np.rint(feeds["x"][..., :2] / s_b[..., :1] if per_axis else feeds["x"][..., :2] / s_b)
    unsat = (tie + zp_b[..., :1] if per_axis else tie + zp_b)
    inside = (unsat >= info.min) & (unsat <= info.max)
    assert np.all(tie[inside] % 2 == 0)
    np.testing.assert_array_equal(ints[..., :2][inside], unsat[inside])
    text = _mil(tmp_path / f"{target}.anekit")
    if target == "m1":
        assert "quantize(" not in text and "round(" in text and "int8" not in text
    else:
        assert "= quantize(" in text and "= dequantize(" in text


def _onnx_qdq(dtype: int, per_axis: bool) -> onnx.ModelProto:
    np_dtype = np.int8 if dtype == TensorProto.INT8 else np.uint8
    if per_axis:
        scale = np.array([0.02, 0.05, 0.1, 0.03], np.float32)
        zp = np.array([-7, 0, 3, 12] if np_dtype is np.int8 else [0, 7, 128, 200], np_dtype)
    else:
        scale = np.array(0.04, np.float32)
        zp = np.array(-9 if np_dtype is np.int8 else 17, np_dtype)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "zp")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8])
@pytest.mark.parametrize("per_axis", [True, False])
@pytest.mark.parametrize("target", ["m1", "m4"])
def test_onnx_qdq_matches_onnxruntime(dtype: int, per_axis: bool, target: str, tmp_path) -> None:  # noqa: ANN001
    model = _onnx_qdq(dtype, per_axis)
    x = RNG.uniform(-8, 8, (2, 4, 5)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    _, program = _roundtrip(model, target, tmp_path)
    got = program.run({"x": x}, "sim")["y"]
    ref = anekit.from_onnx(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, ref)
    # onnxruntime may multiply by 1/scale: a quotient within an ulp of a tie can round the other
    # way there, one step (one scale) apart at most
    step = float(numpy_helper.to_array(model.graph.initializer[0]).max())
    assert np.max(np.abs(got - want)) <= step * (1 + 1e-6)
    assert np.mean(got == want) >= 0.95


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_engine_segments_emit_valid_mil(target: str) -> None:
    """The lowerings in an fp16 engine program (as if the middle-end placed them on the ANE):
    coremltools type-checks every op against the target's opset, and the simulator agrees."""
    import coremltools

    from anekit.codegen.mlpackage import _build

    scale = np.array([0.5, 0.25, 0.125], np.float32)
    x = anekit.input("x", (1, 3, 4, 6))
    q = ops.quantize_linear(x, scale, np.array([-3, 0, 7], np.int8), axis=1, dtype="int8")
    y = ops.dequantize_linear(q, scale, np.array([-3, 0, 7], np.int8), axis=1, name="y")
    g = anekit.graph([y])
    contents = build_bundle(g, targets.get(target), [whole_graph_segment(g, "ane")])
    text = contents.segments[0].text
    assert ("= quantize(" in text) == (target == "m4")
    program = _build(coremltools, contents.manifest, contents.programs, [None])
    assert len(program.functions["main"].outputs) == 1
    # fp16 values (the engine's input precision); quotients by powers of two stay exact
    feeds = {"x": _hard_values(scale, 3).astype(np.float16).astype(np.float32)}
    got = from_contents(contents).run(feeds, "sim")["y"]
    np.testing.assert_array_equal(got, g.run(feeds)["y"])


def test_computed_scale_is_decomposed_and_blocked_computed_scale_is_refused() -> None:
    x = anekit.input("x", (1, 4, 3))
    s = anekit.input("s", (4,))
    q = ops.quantize_linear(x, s, np.zeros(4, np.uint8), axis=1, name="q")
    y = ops.dequantize_linear(q, s, np.zeros(4, np.uint8), axis=1, name="y")
    g = anekit.graph([y])
    feeds = {"x": RNG.uniform(0, 4, (1, 4, 3)).astype(np.float32),
             "s": np.array([0.5, 0.25, 0.125, 1.0], np.float32)}  # fmt: skip
    for target in ("m1", "m4"):
        contents = build_bundle(g, targets.get(target), [whole_graph_segment(g, "cpu")])
        assert "quantize(" not in contents.segments[0].text
        got = from_contents(contents).run(feeds, "sim")["y"]
        np.testing.assert_array_equal(got, g.run(feeds)["y"])
    from anekit.frontend.builder.tensor import record

    sb = anekit.input("sb", (1, 2, 3))
    blocked = record("quantize_linear", [x, sb, None], {"axis": 1, "block_size": 2,
                                                        "dtype": "uint8"}, name="qb")  # fmt: skip
    gb = anekit.graph([ops.dequantize_linear(blocked, np.float32(1.0), name="yb")])
    with pytest.raises(ModelError, match="node 'qb'.*blocked"):
        build_bundle(gb, targets.get("m4"), [whole_graph_segment(gb, "cpu")])


# --- a real QDQ model from onnxruntime's quantize_static ----------------------------------------


def _conv_net() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(6) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                         (b2, "b2"))]  # fmt: skip
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory) -> onnx.ModelProto:  # noqa: ANN001
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(11)
            self.data = iter(
                [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self):  # noqa: ANN202
            return next(self.data, None)

    d = tmp_path_factory.mktemp("qdq")
    onnx.save(_conv_net(), d / "f.onnx")
    quantize_static(str(d / "f.onnx"), str(d / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    model = onnx.load(d / "q.onnx")
    # as written by onnxruntime, untouched: bias dequantizers carry a [1] scale and a []
    # zero point, which the IR takes as per tensor
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    assert any(shapes.get(n.input[1]) == (1,) and shapes.get(n.input[2]) == ()
               for n in model.graph.node if n.op_type == "DequantizeLinear"
               and len(n.input) > 2)  # fmt: skip
    return model


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_quantize_static_model_agrees_with_onnxruntime(qdq_model, target: str, tmp_path) -> None:  # noqa: ANN001
    kinds = {n.op_type for n in qdq_model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= kinds
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(qdq_model.SerializeToString()).run(None, {"x": x})
    cm, program = _roundtrip(qdq_model, target, tmp_path)
    got = program.run({"x": x}, "sim")["y"].astype(np.float64)
    cosine = float(np.dot(got.ravel(), want.ravel())
                   / (np.linalg.norm(got) * np.linalg.norm(want)))  # fmt: skip
    assert cosine >= 0.999, cosine
    assert np.max(np.abs(got - want)) <= 0.1 * np.max(np.abs(want))
    text = _mil(tmp_path / f"{target}.anekit")
    assert ("= quantize(" in text) == (target == "m4")


def test_ios18_qdq_model_exports_as_mlpackage(qdq_model, tmp_path: Path) -> None:  # noqa: ANN001
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    cm = anekit.compile(qdq_model, target="m4")
    path = cm.save_mlpackage(tmp_path / "q.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    kinds = [op.op_type for op in program.functions["main"].operations]
    assert spec.specificationVersion == 9
    assert "quantize" in kinds and "dequantize" in kinds and "conv" in kinds


@pytest.mark.parametrize("target", ["m1", "m4"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_a_quantized_value_can_be_a_graph_output(target: str, dtype: str, tmp_path) -> None:  # noqa: ANN001
    # ios16 (m1) has no int8 tensors: the program returns the integers as int32 and the
    # runtime hands back the graph's own dtype
    x = anekit.input("x", (1, 4, 2, 3))
    zp = np.asarray(3 if dtype == "int8" else 130, dtype)
    q = ops.quantize_linear(x, np.float32(0.25), zp, dtype=dtype, name="q")
    g = anekit.graph([q])
    values = (RNG.standard_normal((1, 4, 2, 3)) * 40).astype(np.float32)
    want = g.run({"x": values})["q"]
    cm, program = _roundtrip(g, target, tmp_path)
    got = program.run({"x": values}, "sim")["q"]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    manifest = (tmp_path / f"{target}.anekit" / "manifest.json").read_text()
    assert ('"mil_dtype": "int32"' in manifest) == (target == "m1")


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_a_quantized_graph_input_dequantizes(target: str, tmp_path) -> None:  # noqa: ANN001
    q = anekit.input("q", (1, 4, 2, 3), dtype="int8")
    d = ops.dequantize_linear(q, np.float32(0.5), np.asarray(-7, np.int8), name="d")
    g = anekit.graph([d])
    values = RNG.integers(-128, 128, (1, 4, 2, 3)).astype(np.int8)
    values.flat[:2] = [-128, 127]
    _, program = _roundtrip(g, target, tmp_path)
    got = program.run({"q": values}, "sim")["d"]
    np.testing.assert_array_equal(got, g.run({"q": values})["d"])
