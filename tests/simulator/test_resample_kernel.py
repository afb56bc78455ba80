"""The simulator's MIL resample kernel (iOS 15) against Apple's reference outputs (coremltools'
TestResample), the IR's grid_sample kernel, and onnxruntime's GridSample."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from anekit.errors import FormatError
from anekit.ir.ops.sample import grid_sample
from anekit.simulator.ops.sample import resample
from tests.simulator.milops import run_mil

# coremltools' iOS 15 TestResample: x, coordinates and the outputs Core ML produced
CT_X = np.array([11.0, 22.0, 33.0, 44.0], np.float32).reshape(1, 1, 2, 2)
CT_COORDS = np.array([-1.0, -2.0, -3.7, -1.0, 0.0, 0.0, 3.5, 1.2], np.float32).reshape(1, 2, 2, 2)
CT_INT_COORDS = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int32).reshape(1, 2, 2, 2)
CT_CASES = [  # (sampling, padding, padding value, coordinates mode, align), float out, int out
    (("bilinear", "constant", 6.17, "normalized_minus_one_to_one", True),
     [8.585, 6.17, 27.5, 6.17], [27.5, 44.0, 27.5, 44.0]),
    (("nearest", "border", -1.0, "unnormalized", False),
     [11.0, 11.0, 11.0, 44.0], [11.0, 44.0, 11.0, 44.0]),
    (("bilinear", "reflection", -1.0, "normalized_zero_to_one", True),
     [22.0, 36.3, 11.0, 34.1], [11.0, 44.0, 11.0, 44.0]),
    (("nearest", "symmetric", -1.0, "normalized_zero_to_one", False),
     [22.0, 33.0, 11.0, 33.0], [11.0, 44.0, 11.0, 44.0]),
]  # fmt: skip
KEYS = ("sampling_mode", "padding_mode", "padding_value", "coordinates_mode", "align_corners")
MODES = list(
    itertools.product(("linear", "nearest"), ("zeros", "border", "reflection"), (False, True))
)


def _apple(mode: str, padding: str, align: bool) -> tuple[str, str]:
    """IR (sampling, padding) as resample's (the lowering's mapping)."""
    pad = {"zeros": "constant", "border": "border"}.get(padding)
    pad = pad or ("reflection" if align else "symmetric")
    return ("bilinear" if mode == "linear" else "nearest"), pad


def _consts(sampling: str, padding: str, value: float, cmode: str, align: bool) -> dict:
    return dict(zip(KEYS, (sampling, padding, np.float32(value), cmode, align), strict=True))


def _no_ties(grid: np.ndarray, dims: tuple[int, int], align: bool) -> np.ndarray:
    """Move grid points whose source position is within 1e-3 of a rounding tie (nearest: the
    IR rounds before it reflects, Apple and onnxruntime after, so ties may differ)."""
    out = grid.copy()
    for k, d in ((0, dims[1]), (1, dims[0])):
        g = out[..., k].astype(np.float64)
        pos = (g + 1) / 2 * (d - 1) if align else ((g + 1) * d - 1) / 2
        near = np.abs(pos - np.floor(pos) - 0.5) < 1e-3
        out[..., k] = np.where(near, g + 0.01, g)
    return out.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize(("args", "floats", "ints"), CT_CASES)
def test_matches_core_ml_reference_outputs(args: tuple, floats: list, ints: list) -> None:
    for coords, want in ((CT_COORDS, floats), (CT_INT_COORDS, ints)):
        want = np.array(want, np.float32).reshape(1, 1, 2, 2)
        got = resample(CT_X, coords, *args)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # and as a MIL program: fp32, and fp16 (one rounding of the fp32 result)
        for dtype in ("fp32", "fp16"):
            c = coords if coords.dtype == np.int32 or dtype == "fp32" else coords.astype(np.float16)
            (out,) = run_mil("resample", {"x": CT_X, "coordinates": c}, _consts(*args), [want],
                             dtype=dtype)  # fmt: skip
            tol = 1e-6 if dtype == "fp32" else 2.0**-11
            np.testing.assert_allclose(out, want, rtol=tol)


@pytest.mark.parametrize(("mode", "padding", "align"), MODES)
def test_matches_the_ir_grid_sample_kernel(mode: str, padding: str, align: bool) -> None:
    rng = np.random.default_rng(len(mode) * 7 + len(padding) + align)
    x = rng.uniform(-5, 5, (2, 3, 3, 5)).astype(np.float16).astype(np.float32)
    grid = rng.uniform(-2.2, 2.2, (2, 4, 6, 2)).astype(np.float16).astype(np.float32)
    if mode == "nearest":
        grid = _no_ties(grid, (3, 5), align)
    want = grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
    sampling, pad = _apple(mode, padding, align)
    got = resample(x, grid, sampling, pad, np.float32(0), "normalized_minus_one_to_one", align)
    assert got.dtype == np.float32 and got.shape == (2, 3, 4, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(x).max())
    # the same points as [0, 1] coordinates
    unit = (grid + 1) / 2
    got01 = resample(x, unit, sampling, pad, np.float32(0), "normalized_zero_to_one", align)
    np.testing.assert_allclose(got01, want, rtol=1e-5, atol=1e-5 * np.abs(x).max())
    # and as pixel positions (d - 1 = 2 and 4: exact conversions); align_corners plays no part
    if align:
        pixels = (grid + 1) / 2 * np.array([4, 2], np.float32)
        for flag in (False, True):
            gotpx = resample(x, pixels, sampling, pad, np.float32(0), "unnormalized", flag)
            np.testing.assert_allclose(gotpx, want, rtol=1e-5, atol=1e-5 * np.abs(x).max())
    assert (np.abs(grid) > 1).any()  # some points fall outside the image
    assert not np.allclose(got, 0)


def _ort_grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=int(align))  # fmt: skip
    out = [x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]]
    graph = helper.make_graph([node], "gs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString())
    return session.run(None, {"x": x, "grid": grid})[0]


@pytest.mark.parametrize(("mode", "padding", "align"), MODES)
def test_matches_onnxruntime_grid_sample(mode: str, padding: str, align: bool) -> None:
    rng = np.random.default_rng(3 + len(padding) + 5 * align)
    x = rng.uniform(-5, 5, (1, 2, 3, 4)).astype(np.float32)
    grid = rng.uniform(-3.5, 3.5, (1, 5, 7, 2)).astype(np.float32)
    if mode == "nearest" and padding != "reflection":  # exact rounding ties, outside too
        d = x.shape[3]
        ties = np.array([4.5, -1.5, -4.5, 6.5])
        grid[0, 0, :4, 0] = 2 * ties / (d - 1) - 1 if align else (2 * ties + 1) / d - 1
        grid[0, 0, :4, 1] = 0.0
    elif mode == "nearest":  # see test_reflection_ties_mirror_before_rounding
        grid = _no_ties(grid, x.shape[2:], align)
    want = _ort_grid_sample(x, grid, "bilinear" if mode == "linear" else "nearest", padding, align)
    sampling, pad = _apple(mode, padding, align)
    got = resample(x, grid, sampling, pad, np.float32(0), "normalized_minus_one_to_one", align)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(x).max())


def test_reflection_ties_mirror_before_rounding() -> None:
    """Apple mirrors a position, then rounds it (coremltools' reference output: symmetric
    padding, 6.5 -> 0.5 -> 0); onnxruntime and the IR round, then mirror (6.5 -> 6 -> 1). Only
    exact ties outside the image differ, and the lowering rounds before resample for them."""
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    ties = np.array([4.5, -1.5, -4.5, 6.5, 2.5, 0.5])
    grid = np.zeros((1, 1, len(ties), 2), np.float32)
    grid[0, 0, :, 0] = (2 * ties + 1) / 4 - 1  # align_corners False, width 4: exact
    got = resample(x, grid, "nearest", "symmetric", np.float32(0), "normalized_minus_one_to_one",
                   False)[0, 0, 0] - 4  # fmt: skip
    np.testing.assert_array_equal(got, [2, 0, 3, 0, 2, 0])  # mirrored into [-0.5, 3.5], rint
    ort_row = _ort_grid_sample(x, grid, "nearest", "reflection", False)[0, 0, 0] - 4
    np.testing.assert_array_equal(ort_row, [3, 1, 3, 1, 2, 0])
    ir_row = grid_sample(x, grid, "nearest", "reflection", False)[0, 0, 0] - 4
    np.testing.assert_array_equal(ir_row, ort_row)
    # rounded pixel positions first: no ties left, every convention agrees
    pixels = (
        np.rint(np.stack([ties, np.ones_like(ties)], -1)).reshape(grid.shape).astype(np.float32)
    )
    got = resample(x, pixels, "nearest", "symmetric", np.float32(0), "unnormalized", False)
    np.testing.assert_array_equal(got[0, 0, 0] - 4, ort_row)


@pytest.mark.parametrize("cmode", ["normalized_minus_one_to_one", "unnormalized"])
def test_non_finite_coordinates(cmode: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    coords = np.array([np.nan, 0, np.inf, 0, -np.inf, 0, 0, 0], np.float32).reshape(1, 1, 4, 2)
    for padding in ("constant", "border", "reflection", "symmetric"):
        got = resample(x, coords, "bilinear", padding, np.float32(7), cmode, True)[0, 0, 0]
        assert np.isnan(got[0]), padding
        assert np.isfinite(got[3]), padding
        if padding == "constant":
            np.testing.assert_array_equal(got[1:3], [7, 7])
        elif padding == "border":
            np.testing.assert_array_equal(got[1:3], [x[0, 0, 0, 3], x[0, 0, 0, 0]] if cmode == "unnormalized"
                                          else [x[0, 0, 1, 3], x[0, 0, 1, 0]])  # fmt: skip
        else:
            assert np.isnan(got[1:3]).all(), padding


def test_single_pixel_axes_and_far_coordinates() -> None:
    x = np.array([[[[2.0, 3.0]]]], np.float32)  # H = 1
    coords = np.array([[[[0.25, 1e6], [-1e7, -3.0], [1e30, 0.5]]]], np.float32)
    for padding in ("border", "reflection", "symmetric"):
        got = resample(x, coords, "bilinear", padding, np.float32(0), "unnormalized", True)
        assert np.isfinite(got).all() and ((got >= 2) & (got <= 3)).all(), padding
    got = resample(x, coords, "nearest", "constant", np.float32(-1), "unnormalized", True)
    np.testing.assert_array_equal(got.ravel(), [-1, -1, -1])  # every point misses a pixel


def test_load_time_checks() -> None:
    x = np.zeros((1, 1, 2, 2), np.float32)
    c16 = np.zeros((1, 2, 2, 2), np.float16)
    c8 = np.zeros((1, 2, 2, 2), np.int8)
    want = np.zeros((1, 1, 2, 2), np.float32)
    ok = _consts("bilinear", "constant", 0.0, "unnormalized", False)
    run_mil("resample", {"x": x, "coordinates": c16}, ok, [want], opset="ios16")
    run_mil("resample", {"x": x, "coordinates": c8}, ok, [want], opset="ios17")
    with pytest.raises(FormatError, match="iOS 15"):
        run_mil("resample", {"x": x, "coordinates": c16}, ok, [want], opset="ios15")
    with pytest.raises(FormatError, match="int8.*iOS 16"):
        run_mil("resample", {"x": x, "coordinates": c8}, ok, [want], opset="ios16")
    c = np.zeros((1, 2, 2, 2), np.float32)
    for key, bad in (("sampling_mode", "bicubic"), ("padding_mode", "zeros"),
                     ("coordinates_mode", "normalized")):  # fmt: skip
        with pytest.raises(FormatError, match=f"unknown {key} '{bad}'"):
            run_mil("resample", {"x": x, "coordinates": c}, {**ok, key: bad}, [want])
    with pytest.raises(ValueError, match=r"must be \[1, H2, W2, 2\]"):
        resample(x, np.zeros((1, 2, 2, 3), np.float32), *ok.values())
    with pytest.raises(ValueError, match="rank 4"):
        resample(x[0], c, *ok.values())
