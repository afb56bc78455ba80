"""Converters for DFT, STFT, and the window functions and MelWeightMatrix (folded to
constants: they depend on sizes only)."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.dtypes import ir_dtype


def _cosine_sum(n: np.ndarray, span: float, coeffs: tuple[float, ...]) -> np.ndarray:
    """sum_k (-1)^k a_k cos(2 pi k n / span): Hann, Hamming and Blackman are all of this form."""
    out = np.zeros(n.shape, dtype=np.float64)
    for k, a in enumerate(coeffs):
        out += (-1) ** k * a * np.cos(2 * np.pi * k * n / span)
    return out


_WINDOWS = {
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 1 - 25 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@converter(*_WINDOWS)
def window(cx: NodeContext):
    size = cx.ints_input(0, "size")
    if len(size) != 1 or size[0] < 0:
        raise ModelError(f"window size must be one non-negative integer, got {list(size)}")
    n = size[0]
    span = n if cx.attr("periodic", 1) else n - 1
    dtype = ir_dtype(cx.attr("output_datatype", 1), "the window output_datatype")
    with np.errstate(divide="ignore", invalid="ignore"):  # a 1-point symmetric window
        values = _cosine_sum(np.arange(n), span, _WINDOWS[cx.op_type])
    return cx.constant(values.astype(dtype.numpy), "window")


@converter("DFT")
def dft(cx: NodeContext):
    rank = len(cx.shape(0))
    if cx.opset < 20:
        axis = cx.attr("axis", 1)
    else:
        axis = cx.ints_input(2, "axis", default=(-2,))[0]
    axis %= rank
    inverse, onesided = cx.attr("inverse", 0), cx.attr("onesided", 0)
    if cx.input(1) is not None:
        length = cx.ints_input(1, "dft_length")[0]
    elif inverse and onesided:
        length = 2 * (cx.shape(0)[axis] - 1)
    else:
        length = cx.shape(0)[axis]
    attrs = {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided}
    return cx.emit("dft", [cx.input(0)], attrs, final=True)


@converter("STFT")
def stft(cx: NodeContext):
    """Frames gathered from the signal, weighted by the window, then a DFT per frame."""
    b, length, channels = cx.shape(0)
    step = cx.ints_input(1, "frame_step")[0]
    window = cx.input(2)
    if cx.input(3) is not None:
        size = cx.ints_input(3, "frame_length")[0]
    else:
        size = cx.shape(2)[0] if window is not None else length
    if step <= 0 or not 0 < size <= length:
        raise ModelError(f"frame_step {step} and frame_length {size} do not fit {length} samples")
    frames = 1 + (length - size) // step
    cx.reserve((frames, size), np.int64, "the frame indices")
    index = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    x = cx.emit("gather", [cx.input(0), cx.constant(index.astype(np.int64), "frames")], {"axis": 1})
    if window is not None:
        x = cx.emit("mul", [x, cx.emit("reshape", [window], {"shape": (1, 1, size, 1)})])
    attrs = {"axis": 2, "length": size, "onesided": cx.attr("onesided", 1)}
    return cx.emit("dft", [x], attrs, final=True)


@converter("MelWeightMatrix")
def mel_weight_matrix(cx: NodeContext):
    """Triangular mel filters over the DFT bins: a constant of its (constant) arguments."""
    mels = cx.ints_input(0, "num_mel_bins")[0]
    n_fft = cx.ints_input(1, "dft_length")[0]
    rate = cx.ints_input(2, "sample_rate")[0]
    lo_hz = float(cx.require_const(3, "lower_edge_hertz").reshape(-1)[0])
    hi_hz = float(cx.require_const(4, "upper_edge_hertz").reshape(-1)[0])
    to_mel = lambda hz: 2595 * np.log1p(hz / 700) / np.log(10)  # noqa: E731
    edges = np.arange(mels + 2) * (to_mel(hi_hz) - to_mel(lo_hz)) / (mels + 2) + to_mel(lo_hz)
    edges = 700 * np.expm1(edges / 2595 * np.log(10))
    edges = (((n_fft + 1) * edges) // rate).astype(np.int64)
    lo, mid, hi = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    j = np.arange(n_fft // 2 + 1)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where((j >= lo) & (j <= mid) & (mid > lo), (j - lo) / (mid - lo), 0.0)
        fall = np.where((j >= mid) & (j < hi), (hi - j) / (hi - mid), np.nan)
    weights = np.where(np.isnan(fall), np.where((mid == lo) & (j == mid), 1.0, rise), fall)
    dtype = ir_dtype(cx.attr("output_datatype", 1), "the MelWeightMatrix output_datatype")
    return cx.constant(weights.astype(dtype.numpy), "mel_weights")
