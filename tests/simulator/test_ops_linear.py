"""linear, matmul, einsum, conv and conv_transpose against onnxruntime and coremltools.

Inputs are fp16 numbers (as fp32 for onnxruntime). An fp32 program must match onnxruntime to
a relative 1e-5 of the output's magnitude (both accumulate in fp32, in different orders). An
fp16 program accumulates in fp32 and rounds once, so each result is within half an fp16 ulp of
the exact sum, plus the fp32 accumulation differences (1e-5 of the output's magnitude).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import coreml, run_mil, ulp16

RNG = np.random.default_rng(11)


def fp16_values(shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float16).astype(np.float32)


def assert_fp32_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    scale = float(np.abs(expected).max(initial=1.0))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def assert_fp16_rounded(actual: np.ndarray, expected: np.ndarray) -> None:
    """Each fp16 result is the fp32 result rounded once (allowing fp32 accumulation order)."""
    assert actual.dtype == np.float16 and actual.shape == expected.shape
    e = expected.astype(np.float64)
    allowed = 0.5 * ulp16(e) + 1e-5 * float(np.abs(e).max(initial=1.0))
    assert (np.abs(actual.astype(np.float64) - e) <= allowed).all()


def check(op: str, inputs: dict, consts: dict, expected: np.ndarray) -> None:
    (got32,) = run_mil(op, inputs, consts, expected)
    assert_fp32_close(got32, expected)
    (got16,) = run_mil(op, inputs, consts, expected, dtype="fp16")
    assert_fp16_rounded(got16, expected)


@pytest.mark.parametrize(
    "xs, ys, tx, ty",
    [
        ((4, 8), (8, 5), False, False),
        ((2, 3, 4, 8), (1, 3, 8, 6), False, False),  # batch broadcast
        ((2, 8, 4), (2, 5, 8), True, True),
        ((8,), (3, 8, 2), False, False),  # 1-D x: promoted, then the dimension removed
        ((3, 4, 8), (8,), False, False),  # 1-D y
        ((1, 12, 64, 64), (1, 12, 64, 64), False, True),  # attention scores
    ],
)
def test_matmul_against_onnxruntime(xs, ys, tx, ty) -> None:
    x, y = fp16_values(xs), fp16_values(ys)
    xt = np.swapaxes(x, -1, -2) if tx else x
    yt = np.swapaxes(y, -1, -2) if ty else y
    (ref,) = run_ort("MatMul", [np.ascontiguousarray(xt), np.ascontiguousarray(yt)])
    check("matmul", {"x": x, "y": y}, {"transpose_x": tx, "transpose_y": ty}, ref)


def test_matmul_const_weight_of_another_dtype() -> None:
    # iOS 17: y may be fp32 while x is fp16 if y is a constant; the result takes x's dtype
    x = fp16_values((3, 8))
    y = fp16_values((8, 4))
    (ref,) = run_ort("MatMul", [x, y])
    (got,) = run_mil("matmul", {"x": x}, {"y": y}, ref, dtype="fp16",
                     const_dtypes={"y": "fp32"})  # fmt: skip
    assert_fp16_rounded(got, ref)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_against_onnxruntime_gemm(bias: bool) -> None:
    x = fp16_values((6, 16))
    w = fp16_values((10, 16))
    b = fp16_values((10,))
    (ref,) = run_ort("Gemm", [x, w, b if bias else None], transB=1)
    consts = {"weight": w, **({"bias": b} if bias else {})}
    check("linear", {"x": x}, consts, ref)
    # rank 3 x, as the definition allows
    x3 = fp16_values((2, 3, 16))
    (ref3,) = run_ort("MatMul", [x3, w.T.copy()])
    check("linear", {"x": x3}, {"weight": w}, ref3)


@pytest.mark.parametrize("equation", ["nchw,nwhu->nchu", "chw,whr->chr", "abcd,adce->abce"])
def test_einsum_against_onnxruntime(equation: str) -> None:
    if equation.startswith("chw"):
        x, y = fp16_values((3, 4, 5)), fp16_values((5, 4, 6))
    else:
        x, y = fp16_values((2, 3, 4, 5)), fp16_values((2, 5, 4, 6))
    (ref,) = run_ort("Einsum", [x, y], equation=equation)
    check("einsum", {"x": x, "y": y}, {"values": ("x", "y"), "equation": equation}, ref)


def test_einsum_broadcast_against_coremltools() -> None:
    x, y = fp16_values((1, 3, 4, 5)), fp16_values((2, 5, 1, 6))
    ref = coreml("einsum", values=(x, y), equation="nchw,nwhu->nchu")
    check("einsum", {"x": x, "y": y}, {"values": ("x", "y"), "equation": "nchw,nwhu->nchu"}, ref)


CONV_CASES = [
    # x shape, weight shape, strides, dilations, groups, pad_type, pad
    ((1, 64, 1, 16), (32, 64, 1, 1), (1, 1), (1, 1), 1, "valid", None),  # the ANE 1x1
    ((2, 4, 9, 11), (6, 4, 3, 3), (1, 1), (1, 1), 1, "valid", None),
    ((1, 4, 9, 11), (6, 2, 3, 3), (2, 1), (1, 2), 2, "custom", (1, 2, 0, 3)),
    ((1, 6, 8, 8), (6, 1, 3, 3), (1, 1), (1, 1), 6, "same", None),  # depthwise
    ((1, 3, 7, 10), (4, 3, 4, 2), (2, 3), (1, 1), 1, "same", None),  # even kernel
    ((1, 3, 7, 10), (4, 3, 4, 2), (2, 3), (1, 1), 1, "same_lower", None),
    ((1, 3, 20), (5, 3, 4), (3,), (2,), 1, "custom", (2, 1)),  # 1-D
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (1, 2, 1), (1, 1, 2), 1, "valid", None),  # 3-D
]


def _onnx_pads(x, w, strides, dilations, pad_type, pad):
    n = x.ndim - 2
    if pad_type == "valid":
        return {"pads": [0] * 2 * n}
    if pad_type == "custom":
        return {"pads": list(pad[0::2]) + list(pad[1::2])}
    return {"auto_pad": "SAME_UPPER" if pad_type == "same" else "SAME_LOWER"}


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[5]}")
@pytest.mark.parametrize("bias", [False, True])
def test_conv_against_onnxruntime(case, bias: bool) -> None:
    xs, ws, strides, dilations, groups, pad_type, pad = case
    x, w, b = fp16_values(xs), fp16_values(ws, 0.3), fp16_values((ws[0],))
    (ref,) = run_ort(
        "Conv",
        [x, w, b if bias else None],
        strides=list(strides),
        dilations=list(dilations),
        group=groups,
        **_onnx_pads(x, w, strides, dilations, pad_type, pad),
    )
    consts = {
        "weight": w,
        "strides": np.array(strides, np.int32),
        "dilations": np.array(dilations, np.int32),
        "groups": groups,
        "pad_type": pad_type,
        **({"pad": np.array(pad, np.int32)} if pad is not None else {}),
        **({"bias": b} if bias else {}),
    }
    check("conv", {"x": x}, consts, ref)


def test_conv_with_runtime_weight() -> None:
    x, w = fp16_values((1, 3, 6, 6)), fp16_values((2, 3, 3, 3))
    (ref,) = run_ort("Conv", [x, w])
    check("conv", {"x": x, "weight": w}, {}, ref)


CONV_T_CASES = [
    # x, weight [C_in, C_out/g, *K], strides, dilations, groups, pad_type, pad, output_shape
    ((1, 4, 5, 5), (4, 3, 3, 3), (2, 2), (1, 1), 1, "valid", None, None),
    ((1, 4, 5, 6), (4, 2, 3, 3), (2, 1), (1, 2), 2, "custom", (1, 0, 2, 1), None),
    ((2, 3, 4, 4), (3, 2, 4, 4), (2, 2), (1, 1), 1, "same", None, None),
    ((1, 3, 7), (3, 2, 3), (3,), (1,), 1, "valid", None, None),
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{c[0]}-{c[5]}")
def test_conv_transpose_against_onnxruntime(case) -> None:
    xs, ws, strides, dilations, groups, pad_type, pad, output_shape = case
    x, w = fp16_values(xs), fp16_values(ws, 0.3)
    b = fp16_values((ws[1] * groups,))
    attrs: dict = {"strides": list(strides), "dilations": list(dilations), "group": groups}
    if pad_type == "custom":
        attrs["pads"] = list(pad[0::2]) + list(pad[1::2])
    elif pad_type == "same":
        attrs["output_shape"] = [d * s for d, s in zip(xs[2:], strides, strict=True)]
        attrs["auto_pad"] = "SAME_UPPER"
    (ref,) = run_ort("ConvTranspose", [x, w, b], **attrs)
    consts = {
        "weight": w,
        "bias": b,
        "strides": np.array(strides, np.int32),
        "dilations": np.array(dilations, np.int32),
        "groups": groups,
        "pad_type": pad_type,
        **({"pad": np.array(pad, np.int32)} if pad is not None else {}),
    }
    check("conv_transpose", {"x": x}, consts, ref)


def test_conv_transpose_output_shape_crops_like_tf_same() -> None:
    # output_shape smaller than the full result: cropped as TensorFlow's SAME padding does
    x, w = fp16_values((1, 2, 3, 3)), fp16_values((2, 1, 3, 3))
    full = run_ort("ConvTranspose", [x, w], strides=[2, 2])[0]  # 7 x 7
    ref = full[:, :, :6, :6][:, :, 0:6, 0:6]
    ref = full[:, :, 0:6, 0:6]  # total crop 1 -> 0 before, 1 after
    consts = {"weight": w, "strides": np.array([2, 2], np.int32), "pad_type": "same",
              "output_shape": np.array([1, 1, 6, 6], np.int32)}  # fmt: skip
    check("conv_transpose", {"x": x}, consts, np.ascontiguousarray(ref))


@pytest.mark.parametrize("kernel", [(2, 2), (3,), (2, 1, 3)])
def test_conv_transpose_tiling_taps_gives_the_accumulation_loops_bits(kernel) -> None:
    # kernel == stride: the one-pass tiling must reproduce the tap-by-tap accumulation into
    # zeros bit for bit, signed zeros, NaNs and infinities included
    from anekit.simulator.ops.conv import _accumulate_taps, _tile_taps

    n = len(kernel)
    sizes = (3, 4, 2)[:n]
    bits = np.random.default_rng(5).integers(
        0, 2**32, size=2 * 2 * 3 * math.prod(kernel) * math.prod(sizes), dtype=np.uint64
    )
    cols = bits.astype(np.uint32).view(np.float32).reshape(2, 2, 3, *kernel, *sizes)
    cols.reshape(-1)[:8] = [-0.0, 0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 65504.0]
    full = [d * k for d, k in zip(sizes, kernel, strict=True)]
    want = _accumulate_taps(cols, kernel, (1,) * n, full)
    got = _tile_taps(cols, n)
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
