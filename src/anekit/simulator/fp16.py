"""fp16 storage in fp32 arrays: fast exact rounding of float32 values to fp16, and the conversions.

The simulator keeps fp16 values in float32 arrays (so arithmetic runs in fp32 and matmuls use
BLAS sgemm); every fp16-typed result is rounded once with :func:`round_to_fp16`. numpy's own
float16 casts are scalar code (2 to 4 ns per element here), several times the cost of the
arithmetic, so values are rounded on their bit patterns instead:

- by the C extension ``_native`` when it was built (``ACCELERATED``): an F16C conversion to
  fp16 and back (IEEE rounding, 8 values per instruction pair, about 0.1 ns per element)
  where the CPU has AVX2 and F16C, else one vectorised branch-free loop (0.2-0.3 ns); the
  arithmetic ops of large values round in the same pass as they compute
  (:func:`binary_rounded`);
- otherwise in numpy, in blocks that stay in the L2 cache, with a few simple ufunc passes
  (about 0.05-0.15 ns per element each, 1 ns in all).

Both give numpy's IEEE conversion bit for bit (the tests compare them on every tie and on
random bit patterns). The numpy passes:

- ``|x| + m - m`` with ``m = 2**(e + 13)`` (``e`` the exponent of ``x``, at least -14) leaves
  exactly the 11 significant bits of an fp16 normal number, or the 2**-24 grid of an fp16
  subnormal, rounded to nearest-even by the fp32 adder itself; the sign is put back by bit
  operations, so -0 stays -0;
- anything at or above 65520 in magnitude (which rounds to infinity in fp16), infinities and
  NaNs take numpy's float16 cast, which is exact IEEE conversion; so do small arrays, where
  the cast is cheaper than the passes' fixed costs.

The ``maximum`` with the exponent floor takes an array, not a scalar: numpy vectorises the
array-array loop only (0.15 against 0.3 ns per element).

Overflow gives infinity, as IEEE 754 conversion does: the simulator does not saturate at
±65504 (clamping before softmax or normalisation is a model-side practice, FACTS section 3).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit import float16

try:  # built by setup.py where a C compiler is found; optional, so numpy is the fallback
    from anekit import _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None

ACCELERATED = _native is not None  # True when the C rounding loop is in use

_ABS = np.uint32(0x7FFFFFFF)
_SIGN = np.uint32(0x80000000)
_EXPONENT = np.uint32(0x7F800000)
_MIN_NORMAL_EXPONENT = 0x38800000  # 2**-14, the smallest fp16 normal
_SHIFT = np.uint32(13 << 23)  # multiplies the magic number by 2**13
_OVERFLOW = 0x477FF000  # bits of 65520.0: at or above it, fp16 rounding gives infinity
BLOCK = 1 << 16  # elements per block: the block and two scratch blocks stay in the L2 cache
SMALL = 2048  # below this many elements numpy's cast is faster than the passes


def _floor() -> np.ndarray:
    floor = np.full(BLOCK, _MIN_NORMAL_EXPONENT, np.uint32)
    floor.flags.writeable = False
    return floor


_FLOOR = _floor()  # read-only constant: the exponent floor, as an array


def _cast(values: np.ndarray) -> None:
    """Round float32 ``values`` (C-contiguous) in place through an exact float16 cast: the C
    conversions there and back where built (numpy's own cast bit for bit, 40x faster)."""
    to_fp16, from_fp16 = _converter("to_fp16"), _converter("from_fp16")
    if to_fp16 is not None and from_fp16 is not None and values.flags.c_contiguous:
        bits = np.empty(values.shape, np.uint16)
        to_fp16(values, bits)
        from_fp16(bits, values)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        values[...] = values.astype(np.float16)


def _round_block(bits: np.ndarray, magnitude: np.ndarray, magic: np.ndarray) -> None:
    """Round the float32 values whose bit patterns are ``bits`` (1-D, writeable) in place;
    ``magnitude`` and ``magic`` are scratch blocks of the same size."""
    np.bitwise_and(bits, _ABS, out=magnitude)
    if not magnitude.max() < _OVERFLOW:  # inf, NaN or |x| >= 65520: exact cast
        _cast(bits.view(np.float32))
        return
    np.bitwise_and(magnitude, _EXPONENT, out=magic)
    np.maximum(magic, _FLOOR[: magic.size], out=magic)
    magic += _SHIFT
    m = magic.view(np.float32)
    rounded = magnitude.view(np.float32)
    rounded += m
    rounded -= m
    np.bitwise_and(bits, _SIGN, out=bits)
    np.bitwise_or(bits, magnitude, out=bits)


def round_to_fp16(values: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """``values`` (float32) rounded to the nearest fp16 values, still as float32.

    With ``in_place`` the array itself is rounded (it must be writeable and own its data).
    Float arrays of other types are converted first; the result is always C-contiguous.
    """
    if not isinstance(values, np.ndarray):
        values = np.array(values, dtype=np.float32)
        in_place = True
    if values.dtype == np.float32 and not values.flags.c_contiguous:
        values = contiguous(values)  # a transposed view: gathered tile by tile
        in_place = True
    elif values.dtype != np.float32:
        values = np.asarray(
            values, dtype=np.float32, order="C"
        )  # keeps rank 0 (not ascontiguousarray)
        in_place = True
    elif not in_place:
        values = values.copy()
    if _native is not None:
        if _native.round_in_place(values):  # left |x| >= 65520, inf and NaN as they were
            _cast(values)  # exact for those, and a no-op on the values already rounded
        return values
    return round_with_numpy(values)


def binary_rounded(
    op: int, x: np.ndarray, y: np.ndarray, shape: tuple[int, ...] | None
) -> np.ndarray | None:
    """``x + y``, ``x - y``, ``x * y`` or ``x / y`` (``op`` 0 to 3) rounded to fp16 in one C
    pass (1.6x the ufunc and the rounding pass), for C-contiguous float32 operands of the
    result's ``shape`` or of one value. None where that does not apply (other operands,
    no C extension, no AVX2/F16C) or where a result needs the exact conversion (|r| >=
    65520, infinite, NaN): the caller then computes it with numpy, as before."""
    binary_round = _converter("binary_round")
    if (
        binary_round is None
        or shape is None
        or type(x) is not np.ndarray
        or type(y) is not np.ndarray
        or x.dtype != np.float32
        or y.dtype != np.float32
        or not (x.shape == shape or x.size == 1)
        or not (y.shape == shape or y.size == 1)
        or not (x.flags.c_contiguous and y.flags.c_contiguous)
    ):
        return None
    out = np.empty(shape, np.float32)
    return out if binary_round(op, x, y, out) == 0 else None


def round_with_numpy(values: np.ndarray) -> np.ndarray:
    """Round a C-contiguous float32 array in place with numpy alone (the fallback path)."""
    size = values.size
    if size < SMALL:
        if size:
            _cast(values)
        return values
    bits = values.reshape(-1).view(np.uint32)
    scratch = np.empty((2, min(size, BLOCK)), np.uint32)
    for start in range(0, size, BLOCK):
        block = bits[start : start + BLOCK]
        n = block.size
        _round_block(block, scratch[0, :n], scratch[1, :n])
    return values


def is_fp16_exact(values: np.ndarray) -> bool:
    """True when every element of a float32 array is an fp16 value (a check for tests)."""
    return bool(np.array_equal(values, round_to_fp16(values), equal_nan=True))


def _widening_table() -> np.ndarray:
    table = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = table.astype(np.float32)
    out.flags.writeable = False
    return out


# Every fp16 bit pattern's float32 value: widening by table lookup is exact by construction
# and several times faster than numpy's float16 cast (weights are widened once, at load).
_WIDEN = _widening_table()


def _converter(name: str):
    """The C conversion between float32 and fp16 bits (F16C, ~0.05 ns per element against
    numpy's ~2 ns cast), or None: no extension, or one built before it had them."""
    return getattr(_native, name, None)


def widen_fp16(values: np.ndarray) -> np.ndarray:
    """float16 (or any float) array to float32 holding the same values (exact for float16)."""
    values = np.asarray(values)
    if values.dtype == np.float16:
        from_fp16 = _converter("from_fp16")
        if from_fp16 is not None and values.flags.c_contiguous:
            out = np.empty(values.shape, np.float32)
            from_fp16(values, out)
            return out
        # np.asarray: indexing with a 0-d array gives a numpy scalar, not an array
        return np.asarray(_WIDEN[np.asarray(values, order="C").view(np.uint16)])
    return np.asarray(values, dtype=np.float32)


def narrow_into(values: np.ndarray, out: np.ndarray) -> None:
    """Write ``values`` into the float16 array ``out`` (of the same shape) as numpy's cast
    would: nearest even, overflow to infinity; exact for values already fp16 (a surface
    write)."""
    if float16.ACCELERATED and values.dtype == np.float32 and out.flags.c_contiguous:
        # a strided view (a transposed result) is gathered first: still far cheaper
        values = contiguous(values)
    float16.narrow_into(values, out)


def narrow_to_float16(values: np.ndarray) -> np.ndarray:
    """float32 holding fp16 values to a float16 array (exact, since the values fit)."""
    with np.errstate(over="ignore"):
        return values.astype(np.float16)


BATCHES = 64  # at most this many 2-D slices of a 3-D view are gathered one by one


def contiguous(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A float32 array as a C-contiguous copy (the array itself when it is one already), in
    ``out`` (C-contiguous, of its shape) if given. A view that is 2-D once its size-1 axes
    are dropped (a transpose) is copied by the C extension in register blocks, 3-10x faster
    than numpy's column-by-column walk, and so is a 3-D one slice by slice (a batch of
    transposes, as attention's head layouts are); the bits are copied as they are."""
    if values.flags.c_contiguous and out is None:
        return values
    gather = _converter("gather")
    if gather is not None and values.dtype == np.float32:
        squeezed = np.squeeze(values)
        if squeezed.ndim == 2 and not values.flags.c_contiguous:
            out = np.empty(values.shape, np.float32) if out is None else out
            gather(squeezed, out)
            return out
        if squeezed.ndim == 3 and len(squeezed) <= BATCHES and squeezed.strides[2] != 4:
            out = np.empty(values.shape, np.float32) if out is None else out
            slices = out.reshape(squeezed.shape)
            for i, part in enumerate(squeezed):
                gather(part, slices[i])
            return out
    if out is not None:
        out[...] = values
        return out
    return np.ascontiguousarray(values)


GATHER_MIN = 4096  # elements: below, numpy's strided walk is as cheap as a gather


def gathered(value: Any) -> Any:
    """A large strided float32 operand of an elementwise step as a C-contiguous copy."""
    if (
        type(value) is np.ndarray
        and value.size >= GATHER_MIN
        and not value.flags.c_contiguous
        and value.dtype == np.float32
        and 0 not in value.strides  # a broadcast: numpy reads it well, a copy would not
    ):
        return contiguous(value)
    return value
