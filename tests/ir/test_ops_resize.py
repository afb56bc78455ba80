"""Resize and the pixel shuffles against onnxruntime, on fractional scales and modes the
ONNX node cases do not reach (every coordinate mode x interpolation x antialias)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from anekit.ir.registry import InferError, infer_types
from tests.ir.ort_oracle import run_ir, run_ort, types

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(3)
COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")
SCALES = ((0.37, 1.7), (2.0, 0.5), (1.3, 3.1), (0.6, 0.8))


def _ir_resize(x, scales, mode, coords, **extra):
    sizes = x.shape[:2] + tuple(
        int(np.float32(s) * d) for s, d in zip(scales, x.shape[2:], strict=True)
    )
    full = (1.0, 1.0) + tuple(float(np.float32(s)) for s in scales)
    return run_ir(
        "resize", [x], sizes=sizes, scales=full, mode=mode,
        coordinate_transformation_mode=coords, **extra,
    )[0]  # fmt: skip


def _ort_resize(x, scales, **attrs):
    s = np.asarray((1, 1, *scales), dtype=np.float32)
    return run_ort("Resize", [x, None, s], opset=19, **attrs)[0]


@pytest.mark.parametrize(
    ("mode", "coords", "antialias", "scales"),
    [
        (m, c, a, s)
        for m, c, a, s in itertools.product(("nearest", "linear", "cubic"), COORDS, (0, 1), SCALES)
        if not (a and m == "nearest")
    ],
)
def test_resize_matches_onnxruntime(mode, coords, antialias, scales) -> None:
    x = RNG.standard_normal((1, 2, 9, 7)).astype(np.float32)
    ref = _ort_resize(
        x, scales, mode=mode, coordinate_transformation_mode=coords, antialias=antialias
    )
    y = _ir_resize(x, scales, mode, coords, antialias=bool(antialias))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rule", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_nearest_rounding_rules_match_onnxruntime(rule) -> None:
    x = RNG.standard_normal((1, 1, 6, 5)).astype(np.float32)
    ref = _ort_resize(x, (1.5, 0.7), mode="nearest", nearest_mode=rule)
    y = _ir_resize(x, (1.5, 0.7), "nearest", "half_pixel", nearest_mode=rule)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("a", [-0.5, -0.75])
def test_cubic_exclude_outside_matches_onnxruntime(a) -> None:
    x = RNG.standard_normal((1, 1, 5, 6)).astype(np.float32)
    ref = _ort_resize(x, (1.6, 0.5), mode="cubic", cubic_coeff_a=a, exclude_outside=1)
    y = _ir_resize(x, (1.6, 0.5), "cubic", "half_pixel", cubic_coeff_a=a, exclude_outside=True)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_tf_crop_and_resize_extrapolates_outside_the_roi() -> None:
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)
    roi = np.asarray([0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4], dtype=np.float32)
    sizes = np.asarray([1, 1, 5, 4], dtype=np.int64)
    ref = run_ort(
        "Resize", [x, roi, None, sizes], opset=19, mode="linear", extrapolation_value=7.0,
        coordinate_transformation_mode="tf_crop_and_resize",
    )[0]  # fmt: skip
    (y,) = run_ir(
        "resize", [x], sizes=(1, 1, 5, 4), scales=(1, 1, 5 / 6, 4 / 6), mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0,
        roi=tuple(float(v) for v in roi),
    )  # fmt: skip
    assert (y == 7.0).any()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_nearest_resize_of_integers_keeps_values_exact() -> None:
    x = RNG.integers(-128, 127, (1, 3, 4, 4), dtype=np.int8)
    (y,) = run_ir(
        "resize", [x], sizes=(1, 3, 8, 2), scales=(1, 1, 2, 0.5), mode="nearest",
        coordinate_transformation_mode="asymmetric", nearest_mode="floor",
    )  # fmt: skip
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, x[:, :, np.repeat(np.arange(4), 2)][:, :, :, ::2])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_pixel_shuffles_match_onnxruntime_and_invert_each_other(mode) -> None:
    x = RNG.standard_normal((2, 12, 3, 4)).astype(np.float32)
    (ref,) = run_ort("DepthToSpace", [x], blocksize=2, mode=mode)
    (y,) = run_ir("depth_to_space", [x], block_size=2, mode=mode)
    np.testing.assert_array_equal(y, ref)
    (back,) = run_ir("space_to_depth", [y], block_size=2, mode=mode)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize(
    ("op", "shape", "attrs", "message"),
    [
        ("resize", (1, 1, 4, 4), {"sizes": (1, 1, 8), "scales": (1, 1, 2, 2)}, "one value per"),
        ("resize", (1, 1, 4), {"sizes": (1, 1, 8), "scales": (1, 1, 0)}, "scales > 0"),
        ("resize", (1, 4), {"sizes": (1, 8), "scales": (1, 2), "roi": (0, 1)}, "roi needs 4"),
        (
            "resize",
            (1, 4),
            {"sizes": (1, 8), "scales": (1, 2), "antialias": True},
            "not nearest",
        ),
        ("resize", (1, 4), {"sizes": (1, 8), "scales": (1, 2), "mode": "area"}, "must be one of"),
        ("depth_to_space", (1, 6, 2, 2), {"block_size": 2}, "not a multiple of block_size"),
        ("depth_to_space", (6, 2, 2), {"block_size": 2}, "rank-4"),
        ("space_to_depth", (1, 1, 3, 4), {"block_size": 2}, "not a multiple of block_size 2"),
    ],
)
def test_inference_errors_name_the_problem(op, shape, attrs, message) -> None:
    with pytest.raises(InferError, match=message):
        infer_types(op, types(shape), attrs)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_torch(mode, padding, align) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 6, 2)).astype(np.float32)  # some outside [-1, 1]
    (y,) = run_ir("grid_sample", [x, grid], mode=mode, padding_mode=padding, align_corners=align)
    torch_mode = {"linear": "bilinear", "nearest": "nearest", "cubic": "bicubic"}[mode]
    ref = torch.nn.functional.grid_sample(
        torch.from_numpy(x), torch.from_numpy(grid), torch_mode, padding, align
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_volumetric_grid_sample_matches_torch(mode) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    grid = RNG.uniform(-1.2, 1.2, (1, 3, 2, 4, 3)).astype(np.float32)
    (y,) = run_ir("grid_sample", [x, grid], mode=mode, padding_mode="border")
    ref = torch.nn.functional.grid_sample(
        torch.from_numpy(x), torch.from_numpy(grid), "bilinear" if mode == "linear" else mode,
        "border", False,
    )  # fmt: skip
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_cubic_grid_sample_matches_onnxruntime(padding) -> None:
    # cubic + border clamps the taps, not the coordinate (onnxruntime and torch agree;
    # onnx's reference clamps the coordinate, and no node case covers it)
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 6, 2)).astype(np.float32)
    for align in (0, 1):
        attrs = {"mode": "cubic", "padding_mode": padding, "align_corners": align}
        (ref,) = run_ort("GridSample", [x, grid], opset=20, **attrs)
        (y,) = run_ir("grid_sample", [x, grid], **attrs)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align_matches_onnxruntime(mode, ratio, ctm) -> None:
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    corners = RNG.uniform(-2, 22, (6, 2, 2)).astype(np.float32)
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)  # x1 y1 x2 y2
    rois[0] = [3, 3, 3.2, 3.1]  # a degenerate box
    idx = np.asarray([0, 1, 1, 0, 1, 0], np.int64)
    attrs = dict(
        output_height=3, output_width=4, sampling_ratio=ratio, spatial_scale=0.5, mode=mode
    )
    (ref,) = run_ort(
        "RoiAlign", [x, rois, idx], opset=16, coordinate_transformation_mode=ctm, **attrs
    )
    (y,) = run_ir("roi_align", [x, rois, idx], half_pixel=ctm == "half_pixel", **attrs)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv_matches_onnxruntime(with_mask) -> None:
    x = RNG.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 2)).astype(np.float32)
    offset = (RNG.standard_normal((2, 2 * 3 * 2 * 2, 3, 5)) * 1.5).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    mask = RNG.uniform(0, 1, (2, 2 * 3 * 2, 3, 5)).astype(np.float32) if with_mask else None
    attrs = dict(strides=(2, 1), pads=(1, 0, 0, 1), dilations=(1, 2), group=2, offset_group=2)
    (ref,) = run_ort("DeformConv", [x, w, offset, bias, mask], opset=19, **attrs)
    (y,) = run_ir("deform_conv", [x, w, offset, bias, mask], **attrs)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
