"""Converters for DFT and the window functions (folded to constants: they depend on a size only)."""

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
