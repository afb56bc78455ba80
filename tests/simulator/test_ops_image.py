"""Upsampling and resizing against Apple's own expected values, onnxruntime's Resize and torch.

The expected arrays in the ``APPLE_*`` cases are copied from coremltools' op tests
(``ops/tests/iOS14/test_image_resizing.py``), which Apple checks against Core ML itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit.simulator.ops import image
from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import run_mil
from tests.simulator.test_ops_linear import assert_fp16_rounded, assert_fp32_close

RNG = np.random.default_rng(19)
TWO = np.array([0, 1], np.float32).reshape(1, 1, 2)

APPLE_RESIZE_BILINEAR = [
    ("STRICT_ALIGN_CORNERS", [0, 0.25, 0.5, 0.75, 1]),
    ("DEFAULT", [0, 0.4, 0.8, 1, 1]),
    ("OFFSET_CORNERS", [0.1, 0.3, 0.5, 0.7, 0.9]),
]


@pytest.mark.parametrize("mode, want", APPLE_RESIZE_BILINEAR)
def test_resize_bilinear_apple_values(mode: str, want: list[float]) -> None:
    expected = np.array(want, np.float32).reshape(1, 1, 5)
    consts = {"target_size_height": 1, "target_size_width": 5, "sampling_mode": mode}
    (got,) = run_mil("resize_bilinear", {"x": TWO}, consts, expected)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_upsample_bilinear_apple_values() -> None:
    expected = np.array([0, 0.2, 0.4, 0.6, 0.8, 1], np.float32).reshape(1, 1, 6)
    consts = {"scale_factor_height": 1, "scale_factor_width": 3, "align_corners": True}
    (got,) = run_mil("upsample_bilinear", {"x": TWO}, consts, expected)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    expected = np.array([0, 0.1, 0.5, 0.9, 1], np.float32).reshape(1, 1, 5)
    consts = {"scale_factor_height": 1.0, "scale_factor_width": 2.6, "align_corners": False}
    (got,) = run_mil("upsample_bilinear", {"x": TWO}, consts, expected)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_nearest_apple_values() -> None:
    x = np.array([0.37, 6.17], np.float32).reshape(1, 1, 2, 1)
    want = np.array([0.37, 0.37, 0.37, 6.17, 6.17, 6.17], np.float32).reshape(1, 1, 2, 3)
    consts = {"target_size_height": 2, "target_size_width": 3}
    (got,) = run_mil("resize_nearest_neighbor", {"x": x}, consts, want)
    np.testing.assert_array_equal(got, want)
    x = np.array([1.5, 2.5, 3.5], np.float32).reshape(1, 1, 1, 3)
    want = np.repeat(x, 2, axis=-1)
    consts = {"scale_factor_height": 1, "scale_factor_width": 2}
    (got,) = run_mil("upsample_nearest_neighbor", {"x": x}, consts, want, dtype="fp16")
    np.testing.assert_array_equal(got, want.astype(np.float16))


ORT_MODES = {
    "STRICT_ALIGN_CORNERS": "align_corners",
    "DEFAULT": "asymmetric",
    "UNALIGN_CORNERS": "half_pixel",
}


@pytest.mark.parametrize("mode", sorted(ORT_MODES))
@pytest.mark.parametrize("size", [(7, 5), (3, 11)])
def test_resize_bilinear_against_onnxruntime(mode: str, size: tuple[int, int]) -> None:
    x = RNG.uniform(-4, 4, (1, 2, 4, 6)).astype(np.float16).astype(np.float32)
    sizes = np.array([1, 2, *size], np.int64)
    (ref,) = run_ort("Resize", [x, None, None, sizes], mode="linear",
                     coordinate_transformation_mode=ORT_MODES[mode])  # fmt: skip
    consts = {"target_size_height": size[0], "target_size_width": size[1], "sampling_mode": mode}
    (got32,) = run_mil("resize_bilinear", {"x": x}, consts, ref)
    assert_fp32_close(got32, ref)
    (got16,) = run_mil("resize_bilinear", {"x": x}, consts, ref, dtype="fp16")
    assert_fp16_rounded(got16, ref)
    # iOS 17's resize on the last two axes is the same operation
    (got,) = run_mil("resize", {"x": x}, {"shape": np.array(size, np.int32), "resized_dims":
                     np.uint32(2), "sampling_mode": mode}, ref,
                     const_dtypes={"resized_dims": "uint32"})  # fmt: skip
    assert_fp32_close(got, ref)


@pytest.mark.parametrize("scale", [(2, 3), (3, 2)])
@pytest.mark.parametrize("align_corners", [True, False])
def test_upsample_bilinear_against_torch(scale: tuple[int, int], align_corners: bool) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.uniform(-4, 4, (2, 3, 5, 4)).astype(np.float16).astype(np.float32)
    ref = torch.nn.functional.interpolate(
        torch.from_numpy(x), scale_factor=scale, mode="bilinear", align_corners=align_corners
    ).numpy()
    consts = {"scale_factor_height": scale[0], "scale_factor_width": scale[1],
              "align_corners": align_corners}  # fmt: skip
    (got,) = run_mil("upsample_bilinear", {"x": x}, consts, ref, dtype="fp16")
    assert_fp16_rounded(got, ref)


@pytest.mark.parametrize("size", [(8, 12), (2, 3), (7, 30), (3, 2)])
def test_nearest_writes_c_order_and_copies_every_bit(size) -> None:
    """Nearest resizing up and down, one axis after the other: the values (NaN payloads,
    signed zeros) are the input's own, in a C-contiguous array (a consumer reads it in
    place)."""
    x = RNG.uniform(-4, 4, (2, 3, 4, 5)).astype(np.float32)
    x[0, 0, 0, :3] = np.array([0x7FC12345, 0xFFC00001, 0x80000000], np.uint32).view(np.float32)
    got = image.resize_nearest_neighbor(x, *size)
    rows = (np.arange(size[0]) * 4) // size[0]
    cols = (np.arange(size[1]) * 5) // size[1]
    want = x[:, :, rows][:, :, :, cols]
    assert got.flags.c_contiguous and got.shape == (2, 3, *size)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    up = image.upsample_nearest_neighbor(x, 2, 3)
    assert up.flags.c_contiguous
    assert np.array_equal(up.view(np.uint32), np.repeat(np.repeat(x, 2, 2), 3, 3).view(np.uint32))


def test_nearest_against_onnxruntime() -> None:
    x = RNG.uniform(-4, 4, (1, 2, 3, 4)).astype(np.float32)
    (ref,) = run_ort("Resize", [x, None, np.array([1, 1, 2, 3], np.float32)], mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # fmt: skip
    consts = {"scale_factor_height": 2, "scale_factor_width": 3}
    (got,) = run_mil("upsample_nearest_neighbor", {"x": x}, consts, ref)
    np.testing.assert_array_equal(got, ref)
    consts = {"target_size_height": 6, "target_size_width": 12}
    (got,) = run_mil("resize_nearest_neighbor", {"x": x}, consts, ref)
    np.testing.assert_array_equal(got, ref)
    (got,) = run_mil("resize", {"x": x}, {"shape": np.array([0, 6, 12], np.int32), "resized_dims":
                     np.uint32(2), "interpolation_mode": "NEAREST_NEIGHBOR"}, ref,
                     const_dtypes={"resized_dims": "uint32"})  # fmt: skip
    np.testing.assert_array_equal(got, ref)


def test_crop() -> None:
    x = RNG.uniform(-4, 4, (1, 2, 6, 7)).astype(np.float32)
    want = x[..., 1:4, 2:6]
    consts = {"crop_height": np.array([1, 2], np.int32), "crop_width": np.array([2, 1], np.int32)}
    (got,) = run_mil("crop", {"x": x}, consts, want)
    np.testing.assert_array_equal(got, want)
