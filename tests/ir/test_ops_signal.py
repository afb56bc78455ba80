"""Bit ops, DFT, windows, col2im, det, max_unpool and center crop/pad against onnxruntime
and torch (independent implementations), on edge cases the node cases leave out."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from anekit.frontend.onnx import from_onnx
from anekit.ir.dtypes import DType
from anekit.ir.registry import InferError, TensorType, infer_types
from tests.ir.ort_oracle import run_ir, run_ort

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
RNG = np.random.default_rng(21)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_bitwise_matches_onnxruntime(op, dtype) -> None:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 4), dtype=dtype)
    b = RNG.integers(info.min, info.max, (4,), dtype=dtype)
    (ref,) = run_ort(op, [a, b], opset=18)
    ir_op = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
    (y,) = run_ir(ir_op[op], [a, b])
    np.testing.assert_array_equal(y, ref)
    (ref,) = run_ort("BitwiseNot", [a], opset=18)
    np.testing.assert_array_equal(run_ir("bitwise_not", [a])[0], ref)


def test_unsigned_shifts_match_onnxruntime() -> None:
    x = np.asarray([0, 1, 7, 128, 255, 200], np.uint8)
    s = np.asarray([0, 1, 3, 1, 7, 2], np.uint8)
    for direction in ("LEFT", "RIGHT"):
        (ref,) = run_ort("BitShift", [x, s], direction=direction)
        (y,) = run_ir("bit_shift", [x, s], direction=direction.lower())
        np.testing.assert_array_equal(y, ref)


def test_signed_shifts_follow_the_spec() -> None:
    # onnxruntime has no signed BitShift; the spec: arithmetic right shift, sign-bit overflow
    # on the left, and only the sign extension for negative or too-large shifts
    x = np.asarray([-7, -128, 100, 64, -1, 5], np.int8)
    s = np.asarray([1, 7, 1, 1, 8, -1], np.int8)
    (right,) = run_ir("bit_shift", [x, s], direction="right")
    np.testing.assert_array_equal(right, [-4, -1, 50, 32, -1, 0])
    (left,) = run_ir("bit_shift", [x, s], direction="left")
    np.testing.assert_array_equal(left, [-14, 0, -56, -128, 0, 0])


@pytest.mark.parametrize(
    ("inverse", "onesided", "length"), [(0, 0, 8), (0, 1, 8), (1, 0, 8), (0, 0, 5), (0, 0, 12)]
)
def test_dft_matches_onnxruntime(inverse, onesided, length) -> None:
    x = RNG.standard_normal((2, 8, 3, 1 if onesided else 2)).astype(np.float32)
    n = np.asarray(length, np.int64)
    (ref,) = run_ort(
        "DFT", [x, n, np.asarray(1, np.int64)], opset=20, inverse=inverse, onesided=onesided
    )
    (y,) = run_ir("dft", [x], axis=1, length=length, inverse=bool(inverse), onesided=bool(onesided))
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_inverse_onesided_dft_is_the_real_inverse() -> None:
    signal = RNG.standard_normal((3, 10)).astype(np.float32)
    (spectrum,) = run_ir("dft", [signal[..., None]], axis=1, length=10, onesided=True)
    (back,) = run_ir("dft", [spectrum], axis=1, length=10, inverse=True, onesided=True)
    np.testing.assert_allclose(back[..., 0], signal, rtol=1e-5, atol=1e-5)


def _window_model(op: str, size: int, periodic: int) -> onnx.ModelProto:
    node = helper.make_node(op, ["n"], ["w"], periodic=periodic)
    graph = helper.make_graph(
        [node], "g", [], [helper.make_empty_tensor_value_info("w")],
        initializer=[onnx.numpy_helper.from_array(np.asarray(size, np.int64), "n")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        ("HannWindow", torch.hann_window),
        (
            "HammingWindow",
            lambda n, periodic, dtype: torch.hamming_window(
                n, periodic, 25 / 46, 21 / 46, dtype=dtype
            ),
        ),
        ("BlackmanWindow", torch.blackman_window),
    ],
)
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_fold_to_torch_values(op, fn, periodic) -> None:
    g = from_onnx(_window_model(op, 11, periodic))
    assert all(n.op == "identity" for n in g.nodes)  # folded to a constant
    (w,) = g.run({}).values()
    ref = fn(11, periodic=bool(periodic), dtype=torch.float64).numpy()
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("image", "block", "strides", "pad", "dil"),
    [((5, 6), (2, 3), (1, 2), (1, 0), (2, 1)), ((4, 4), (2, 2), (2, 2), (0, 0), (1, 1))],
)
def test_col2im_matches_torch_fold(image, block, strides, pad, dil) -> None:
    pads = pad + pad  # torch pads both ends alike
    grid = [
        (image[i] + 2 * pad[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(2)
    ]
    x = RNG.standard_normal((2, 3 * block[0] * block[1], grid[0] * grid[1])).astype(np.float32)
    (y,) = run_ir(
        "col2im", [x], image_shape=image, block_shape=block, strides=strides, pads=pads,
        dilations=dil,
    )  # fmt: skip
    ref = torch.nn.functional.fold(
        torch.from_numpy(x), image, block, dilation=dil, padding=pad, stride=strides
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_det_matches_onnxruntime() -> None:
    x = RNG.standard_normal((3, 2, 4, 4)).astype(np.float32)
    (ref,) = run_ort("Det", [x])
    np.testing.assert_allclose(run_ir("det", [x])[0], ref, rtol=1e-4, atol=1e-5)


def test_max_unpool_inverts_max_pool_indices() -> None:
    x = RNG.standard_normal((2, 3, 6, 8)).astype(np.float32)
    y, idx = run_ir("max_pool", [x], kernel=(2, 2), strides=(2, 2), return_indices=True)
    (ref,) = run_ort("MaxUnpool", [y, idx], kernel_shape=(2, 2), strides=(2, 2))
    (back,) = run_ir("max_unpool", [y, idx], output_shape=(2, 3, 6, 8))
    np.testing.assert_array_equal(back, ref)
    np.testing.assert_array_equal(back[back != 0], x[back != 0])


@pytest.mark.parametrize("target", [(5, 9), (12, 3), (8, 8)])
def test_center_crop_pad_matches_onnxruntime(target) -> None:
    x = RNG.standard_normal((3, 8, 6)).astype(np.float32)
    shape = np.asarray(target, np.int64)
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[1, 2])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[onnx.numpy_helper.from_array(shape, "s")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    (y,) = from_onnx(model).run({"x": x}).values()
    np.testing.assert_array_equal(y, ref)


def _folded_model(op: str, consts: list[np.ndarray], opset: int, **attrs) -> onnx.ModelProto:
    names = [f"c{k}" for k in range(len(consts))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "g", [],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[onnx.numpy_helper.from_array(np.asarray(c), n) for n, c in zip(names, consts, strict=True)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize(
    ("mels", "n_fft", "rate", "lo", "hi"),
    [(8, 64, 16000, 0.0, 8000.0), (20, 512, 22050, 80.0, 7600.0)],
)
def test_mel_weight_matrix_matches_onnxruntime(mels, n_fft, rate, lo, hi) -> None:
    args = [np.int64(mels), np.int64(n_fft), np.int64(rate), np.float32(lo), np.float32(hi)]
    model = _folded_model("MelWeightMatrix", args, 17)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {})
    (y,) = from_onnx(model).run({}).values()
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("channels", [1, 2])
def test_stft_matches_onnxruntime(channels) -> None:
    signal = RNG.standard_normal((2, 50, channels)).astype(np.float32)
    window = np.hanning(12).astype(np.float32)
    step = np.asarray(5, np.int64)
    onesided = 1 if channels == 1 else 0  # a one-sided transform needs a real signal
    (ref,) = run_ort("STFT", [signal, step, window], opset=17, onesided=onesided)
    node = helper.make_node("STFT", ["x", "s", "w"], ["y"], onesided=onesided)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, signal.shape)],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[onnx.numpy_helper.from_array(step, "s"), onnx.numpy_helper.from_array(window, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    (y,) = from_onnx(model).run({"x": signal}).values()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_bitcast_reinterprets_bytes_and_rejects_fp16() -> None:
    x = np.asarray([1.0, -2.5, np.inf], np.float32)
    (y,) = run_ir("bitcast", [x], to="int32")
    np.testing.assert_array_equal(y, x.view(np.int32))
    with pytest.raises(InferError, match="one width"):
        infer_types("bitcast", [TensorType((3,), DType.FP16)], {"to": "int32"})
