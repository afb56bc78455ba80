"""Discrete Fourier transforms along one axis (ONNX DFT), complex values as [..., 2]."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import Attrs, Types, float_only, normalize_axis
from anekit.ir.registry import Attr, InferError, TensorType, declare


def _dft_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    float_only(ins)
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise InferError(f"dft takes [..., 1] (real) or [..., 2] (complex) input, got {x}")
    axis = normalize_axis(attrs["axis"], x.rank)
    if axis == x.rank - 1:
        raise InferError("the transformed axis cannot be the last (real/imaginary) axis")
    n = attrs["length"]
    if n <= 0:
        raise InferError(f"length must be positive, got {n}")
    shape = list(x.shape)
    if attrs["inverse"] and attrs["onesided"]:  # one-sided spectrum to a real signal
        shape[axis], shape[-1] = n, 1
    else:
        shape[axis] = n // 2 + 1 if attrs["onesided"] else n
        shape[-1] = 2
    return [TensorType(tuple(shape), x.dtype)]


@declare(
    "dft",
    inputs=("x",),
    attrs=(
        Attr("axis", "int"),
        Attr("length", "int", doc="transform length: the signal is cut or zero-padded to it"),
        Attr("inverse", "bool", False),
        Attr("onesided", "bool", False, doc="forward: keep n//2+1 bins; inverse: real output"),
    ),
    infer=_dft_infer,
    no_lowering="not lowered yet: MIL has no general DFT op",
)
def dft(x, axis, length, inverse, onesided):
    """the (inverse) DFT of a real or complex signal along axis"""
    axis = axis % x.ndim
    signal = x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None].astype(np.float32)
    spectrum = (np.fft.ifft if inverse else np.fft.fft)(signal, n=length, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return np.stack([spectrum.real, spectrum.imag], axis=-1).astype(np.float32)
