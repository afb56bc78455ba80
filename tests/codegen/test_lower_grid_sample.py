"""grid_sample lowered to MIL resample (iOS 15): ONNX GridSample models compiled for M1 and M4,
saved, loaded and run on the simulator against onnxruntime and the IR reference; the engine
dialects (fp16) forced and type-checked by coremltools; unsupported modes refused by name; the
M4 .mlpackage reloaded through coremltools' milproto loader."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import anekit
from anekit import targets
from anekit.codegen.bundle import build_bundle
from anekit.codegen.mil import whole_graph_segment
from anekit.errors import ModelError
from anekit.frontend.builder.tensor import record
from anekit.runtime.program import from_contents

X_SHAPE, GRID_SHAPE = (2, 3, 5, 6), (2, 4, 7, 2)
MODES = list(itertools.product(("linear", "nearest"), ("zeros", "border", "reflection"), (0, 1)))
# fp16 tolerance: inputs are fp16 values, the result is rounded once to fp16 (2**-11 relative)
# and bilinear weights come from fp32 arithmetic: rtol 2e-3 and atol 2e-3 * max |x| bound it
RTOL = 2e-3


def _model(mode: str, padding: str, align: int, opset: int, x_shape=X_SHAPE, grid_shape=GRID_SHAPE):  # noqa: ANN001
    onnx_mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode) if opset < 20 else mode
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="warp", mode=onnx_mode,
                            padding_mode=padding, align_corners=align)  # fmt: skip
    out = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    graph = helper.make_graph([node], "gs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _away_from_ties(grid: np.ndarray, align: int, margin: float = 0.05) -> np.ndarray:
    """Grid points moved so that no source position lies within ``margin`` pixels of a
    rounding tie (nearest: fp16 position arithmetic could round either way there)."""
    out = grid.astype(np.float64)
    for k, d in ((0, X_SHAPE[3]), (1, X_SHAPE[2])):
        g = out[..., k]
        pos = (g + 1) / 2 * (d - 1) if align else ((g + 1) * d - 1) / 2
        off = pos - np.floor(pos) - 0.5
        shift = np.where(np.abs(off) < margin, 3 * margin * np.where(off < 0, -1, 1), 0.0)
        unit = (d - 1) / 2 if align else d / 2  # pixels per grid unit
        out[..., k] = g + shift / unit
    return out.astype(np.float16).astype(np.float32)


def _feeds(seed: int, mode: str, align: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-6, 6, X_SHAPE).astype(np.float16).astype(np.float32)
    grid = rng.uniform(-1.8, 1.8, GRID_SHAPE).astype(np.float16).astype(np.float32)
    if mode == "nearest":
        grid = _away_from_ties(grid, align)
    return {"x": x, "grid": grid}


def _close(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> float:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(x).max())
    return float(np.abs(got - want).max())


@pytest.mark.parametrize("target", ["m1", "m4"])
@pytest.mark.parametrize(("mode", "padding", "align"), MODES)
def test_onnx_grid_sample_matches_onnxruntime(
    mode: str, padding: str, align: int, target: str, tmp_path: Path
) -> None:
    feeds = _feeds(len(mode) + 3 * len(padding) + align, mode, align)
    for opset in (16, 20):
        model = _model(mode, padding, align, opset)
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
        cm = anekit.compile(model, target=target)
        program = anekit.load(cm.save(tmp_path / f"gs{opset}.anekit"))
        got = program.run(feeds, "sim")["y"]
        assert got.shape == want.shape == (2, 3, 4, 7)
        _close(got, want, feeds["x"])
        reference = anekit.from_onnx(model).run(feeds)["y"]
        _close(got, reference, feeds["x"])
        if mode == "nearest":  # values are picked: exact away from ties
            np.testing.assert_array_equal(got, want)
        text = "\n".join(p.read_text() for p in (tmp_path / f"gs{opset}.anekit").rglob("*.mil"))
        assert text.count("= resample(") == 1
        expected_pad = {"zeros": "constant", "border": "border"}.get(padding) or (
            "reflection" if align else "symmetric"
        )
        assert f'("{expected_pad}")' in text
        assert not np.allclose(got, 0)
    assert (np.abs(feeds["grid"]) > 1).any()  # some points sample the padding


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_grid_sample_runs_in_a_cpu_segment(target: str) -> None:
    """The middle-end has no engine form for grid_sample: it runs on the CPU (fp32) on both."""
    cm = anekit.compile(_model("linear", "zeros", 0, 16), target=target)
    (row,) = cm.ops
    assert (row.node, row.op, row.placement) == ("warp", "grid_sample", "cpu")
    assert "no engine form" in (row.reason or "")
    (segment,) = cm.bundle.segments
    assert "tensor<fp32, [2, 3, 4, 7]> y = resample(" in segment.text
    assert f"main<{'ios16' if target == 'm1' else 'ios18'}>" in segment.text


@pytest.mark.parametrize("target", ["m1", "m4"])
@pytest.mark.parametrize(("mode", "padding", "align"), MODES)
def test_engine_dialects_fp16(target: str, mode: str, padding: str, align: int) -> None:
    """Forced into an engine segment (fp16, ios16 on M1, ios18 on M4): coremltools type-checks
    every op, and the simulator agrees with the IR kernel within fp16 tolerance."""
    import coremltools

    from anekit.codegen.mlpackage import _build

    x = anekit.input("x", X_SHAPE)
    grid = anekit.input("grid", GRID_SHAPE)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": bool(align)}
    y = record("grid_sample", [x, grid], attrs, name="y")
    g = anekit.graph([y])
    contents = build_bundle(g, targets.get(target), [whole_graph_segment(g, "ane")])
    (segment,) = contents.segments
    assert "fp16" in segment.text and "= resample(" in segment.text
    _build(coremltools, contents.manifest, contents.programs, [None])
    feeds = _feeds(7 + len(padding) + align, mode, align)
    got = from_contents(contents).run(feeds, "sim")["y"]
    want = g.run(feeds)["y"]
    _close(got, want, feeds["x"])
    if mode == "nearest":
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_nearest_reflection_ties_follow_onnx(target: str, tmp_path: Path) -> None:
    """At exact ties outside the image ONNX rounds, then mirrors (Apple's resample mirrors
    first): the lowering rounds pixel positions before resample, so the two agree."""
    ties = np.array([8.5, -1.5, -4.5, 10.5, 12.5, -2.5, 2.5])  # width 8, align_corners 0
    x_shape = (2, 3, 5, 8)
    grid = np.zeros(GRID_SHAPE, np.float32)
    grid[..., 0] = ((2 * ties + 1) / 8 - 1)[None, None, :]  # exact: the positions are ties
    grid[..., 1] = -0.25
    x = np.random.default_rng(1).uniform(-6, 6, x_shape).astype(np.float16).astype(np.float32)
    feeds = {"x": x, "grid": grid}
    model = _model("nearest", "reflection", 0, 20, x_shape)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    program = anekit.load(anekit.compile(model, target=target).save(tmp_path / "t.anekit"))
    got = program.run(feeds, "sim")["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, anekit.from_onnx(model).run(feeds)["y"])


@pytest.mark.parametrize(("opset", "mode"), [(16, "cubic"), (20, "cubic")])
def test_bicubic_is_refused_by_name(opset: int, mode: str, tmp_path: Path) -> None:
    cm = anekit.compile(_model(mode, "zeros", 0, opset), target="m4")  # lowers when emitted
    with pytest.raises(ModelError) as info:
        cm.save(tmp_path / "cubic.anekit")
    message = str(info.value)
    assert "node 'warp'" in message and "'cubic'" in message and "bilinear or nearest" in message


def test_volumetric_grid_sample_is_refused_by_name(tmp_path: Path) -> None:
    model = _model("linear", "border", 1, 20, (1, 2, 3, 4, 5), (1, 2, 2, 2, 3))
    cm = anekit.compile(model, target="m1")
    assert cm.run(
        {"x": np.ones((1, 2, 3, 4, 5), np.float32), "grid": np.zeros((1, 2, 2, 2, 3), np.float32)}
    )["y"].shape == (1, 2, 2, 2, 2)
    with pytest.raises(ModelError) as info:
        cm.save(tmp_path / "vol.anekit")
    message = str(info.value)
    assert "node 'warp'" in message and "3-d image" in message and "[1, 2, 3, 4, 5]" in message


def test_m4_mlpackage_reloads_through_milproto(tmp_path: Path) -> None:
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    cm = anekit.compile(_model("nearest", "reflection", 0, 16), target="m4")
    path = cm.save_mlpackage(tmp_path / "gs.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    assert spec.specificationVersion == 9
    program = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    ops = [op.op_type for op in program.functions["main"].operations]
    assert "resample" in ops and "round" in ops
    (resample,) = [op for op in program.functions["main"].operations if op.op_type == "resample"]
    assert resample.padding_mode.val == "symmetric"
    assert resample.coordinates_mode.val == "unnormalized"
    assert tuple(resample.outputs[0].shape) == (2, 3, 4, 7)
