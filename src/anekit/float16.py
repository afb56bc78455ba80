"""float32 -> IEEE float16 arrays, as numpy's cast gives them, in a fraction of its time.

numpy's float16 cast is scalar code (4-7 ns per element here). Every weight the compiler or a
weight update writes goes through this module (124M values for GPT-2, 170M for a
Stories110M-sized weight update), and so does every fp16 surface write of a simulated
session. The C extension ``anekit._native`` converts with F16C (about 0.5 ns per
element, without the GIL so threads overlap); where it was not built, numpy's cast is used.
Both give the same bits: nearest even, overflow to infinity, NaN payloads as numpy keeps
them (the tests compare them on every tie and on random bit patterns).
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import numpy as np

try:  # built by setup.py where a C compiler is found; optional, so numpy is the fallback
    from anekit import _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None

ACCELERATED = _native is not None and hasattr(_native, "to_fp16")


def to_float16(values: np.ndarray) -> np.ndarray:
    """A new C-ordered float16 array holding ``values`` (any float array) rounded as numpy's
    cast rounds them."""
    wide = np.asarray(values, dtype=np.float32, order="C")
    out = np.empty(wide.shape, np.float16)
    narrow_into(wide, out)
    return out


def narrow_into(values: np.ndarray, out: np.ndarray) -> None:
    """Write ``values`` into the float16 array ``out`` (of the same shape) as numpy's cast
    would; in C where both are C-contiguous and ``values`` is float32."""
    if (
        ACCELERATED
        and values.dtype == np.float32
        and values.shape == out.shape
        and values.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        _native.to_fp16(values, out)
        return
    with np.errstate(over="ignore"):
        out[...] = values


# --- one copy of each widened weight per process ---------------------------------------------
# The simulator keeps fp16 weights as float32 holding fp16 values. Programs made from one model
# (a language model's prefill buckets, decode rungs and chunks) carry the same weights, and the
# model's own fp16-valued float32 arrays (its IR constants) hold the same bytes: `share` hands
# every holder of equal bytes one read-only array, keyed by a digest of its bytes. Arrays
# are kept only while someone holds them.
_SHARED: weakref.WeakValueDictionary[tuple, np.ndarray] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()
MIN_SHARED_BYTES = 1 << 16  # smaller arrays cost less than their digest


def share(array: np.ndarray) -> np.ndarray:
    """``array`` (C-contiguous; marked read-only) or a read-only array of the same dtype and
    bytes seen before, reshaped to ``array``'s shape."""
    if array.nbytes < MIN_SHARED_BYTES or not array.flags.c_contiguous:
        return array
    array.flags.writeable = False
    digest = hashlib.blake2b(memoryview(array).cast("B"), digest_size=20).digest()
    key = (array.dtype.str, array.nbytes, digest)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            _SHARED[key] = array  # kept while its holder keeps it
            return array
    return found.reshape(array.shape)
