"""Matrix products for the simulator's kernels: the C GEMM where it runs, numpy's BLAS elsewhere.

A model's weight products (1x1 convs, a weight matrix times activations) are skinny: M and K
are channels, N is the number of tokens (64 for the GPT-2 benchmark). OpenBLAS runs those at
about 70% of what onnxruntime's pre-packed MLAS reaches; ``_native.gemm`` (AVX-512F, see
``_native.c``) matches MLAS. It is used for float32 products of a batch of rows (a matrix, or
activations [batch, tokens, channels] stacked into one) by one matrix, with enough work to
pay for its threads; rows in another memory order are copied to C order first, and so is
a strided matrix shared by at least 64 rows.
Batched products of two batched operands (attention's scores and mixes), small ones, and
every machine without AVX-512F or without the compiled module take ``numpy.matmul``. Both accumulate each output in fp32; results agree to fp32 rounding.

Products numpy keeps (transposed operands, and every product whose bits must stay BLAS's)
run, when large and a CPU is idle, as two halves of the rows shared with a helper thread
(pieces.py, :func:`split_matmul`): BLAS sums each output alike whichever rows share its
call.

While a simulator run uses the GEMM's threads, numpy's BLAS (OpenBLAS here; still used for
batched and small products) is held to one thread (:func:`blas_on_one_thread`): OpenBLAS's
helper threads spin for a while after each call, and with the GEMM's workers also spinning,
three busy threads on two cores made one run in three 50% slower.

Threads: ``ANEKIT_NUM_THREADS``, else ``OMP_NUM_THREADS``, else ``OPENBLAS_NUM_THREADS``, else the
CPUs this process may run on (so a test run that gives BLAS one thread per worker gives the
GEMM one too).
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from . import fp16, pieces

try:
    from anekit import _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None

ACCELERATED = _native is not None and bool(_native.gemm_available())
HALF_WEIGHTS = _native is not None and hasattr(_native, "gemm_f16w")
MIN_WORK = 1 << 21  # multiply-adds below which numpy's call is cheaper than starting threads
MIN_COLUMNS = 16  # narrower products waste the kernel's 64-column register block
_THREAD_VARIABLES = ("ANEKIT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_count() -> int:
    """Threads for one product (1 to 64), from the environment or the CPUs available."""
    for name in _THREAD_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return min(int(value), 64)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 64))


THREADS = thread_count()
# The GEMM's threads for the runs going on now: THREADS, or 1 while no CPU is idle (set for
# each run by blas_on_one_thread; the bits do not depend on it)
_run_threads = THREADS


COPY_ROWS = 64  # rows of ``a`` from which a strided ``b`` is copied for the C GEMM


def _weight_matrix(b: np.ndarray, rows: int) -> np.ndarray | None:
    """``b`` as a 2-D C-contiguous float32 matrix when its leading dimensions are all 1: a
    view, or a copy of a strided ``b`` (a transposed weight in an input gradient) when
    ``rows`` (at least COPY_ROWS) share it: copying k x n values then costs little against
    the product's rows x k x n, which the C GEMM runs on its threads. With fewer rows (a
    weight gradient's few output channels over a long k) numpy reads it in place."""
    if b.ndim < 2 or b.dtype != np.float32 or any(d != 1 for d in b.shape[:-2]):
        return None
    if not b.flags.c_contiguous and rows < COPY_ROWS:
        return None
    # a transposed b (magika's one-hot rows) is copied in register tiles by the C gather
    return fp16.contiguous(b.reshape(b.shape[-2:]))


def _transposed_product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
    """``a @ b`` for one matrix ``a`` [m, k] and a ``b`` [k, n] laid out transposed (its
    transpose C-contiguous: magika's one-hot rows after a layout transpose), as the C GEMM's
    ``b.T @ a.T`` transposed back: no copy of the large ``b`` (a [257, 2048] copy cost more
    than the product), and the bits of the copy's product, each output the same FMA chain
    over k. None where it does not apply."""
    if a.ndim != 2 or b.dtype != np.float32 or any(d != 1 for d in b.shape[:-2]):
        return None
    m, k = a.shape
    matrix = b.reshape(b.shape[-2:])
    n = matrix.shape[1]
    if matrix.shape[0] != k or not matrix.T.flags.c_contiguous or matrix.flags.c_contiguous:
        return None
    if m < COPY_ROWS or m * k * n < MIN_WORK or n < m:
        return None  # fewer rows: numpy reads b in place, as _weight_matrix leaves it
    result = np.empty((n, m), np.float32)
    _native.gemm(matrix.T, np.ascontiguousarray(a.T), result, n, k, m, _run_threads)
    shape = (*b.shape[:-2], m, n)
    return fp16.contiguous(result.T, None if out is None else out.reshape(m, n)).reshape(shape)


def matmul(
    a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *, rounded: bool = False
) -> np.ndarray:
    """``numpy.matmul(a, b)`` (same shape and dtype), through the C GEMM when it applies: a
    float32 ``a`` of any batch shape times one matrix ``b`` is one product of ``a``'s rows
    (stacked, copied to C order if they are not) by ``b``. With ``out`` (C-contiguous
    float32 of the product's shape) the product is written there (the C GEMM writes it in
    place; the other paths' result is copied in) and returned in the product's shape.
    With ``rounded`` the values come back rounded to fp16 values, as the run loop rounds an
    fp16 result: by the C GEMM tile by tile while in cache, else after the product."""
    if ACCELERATED and a.ndim >= 2 and a.dtype == np.float32 and b.ndim >= 2:
        k = a.shape[-1]
        m = a.size // k if k else 0
        transposed = _transposed_product(a, b, out)
        if transposed is not None:
            return rounded_in_place(transposed) if rounded else transposed
        y = _weight_matrix(b, m)
        if y is not None and k == y.shape[0]:
            n = y.shape[1]
            if n >= MIN_COLUMNS and m * k * n >= MIN_WORK:
                x = np.ascontiguousarray(a.reshape(m, k))
                batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
                result = np.empty((m, n), np.float32) if out is None else out
                _native.gemm(x, y, result, m, k, n, _run_threads, rounded)
                return result.reshape((*batch, a.shape[-2], n))
    product = split_matmul(a, b)
    product = np.matmul(a, b) if product is None else product
    if out is not None:
        out[...] = product
        product = out
    return rounded_in_place(product) if rounded else product


def rounded_in_place(values: np.ndarray) -> np.ndarray:
    """``values`` (a C-contiguous float32 array the caller made, or a slice of one) rounded
    to fp16 values where they are."""
    result = fp16.round_to_fp16(values, in_place=True)
    if result is not values:  # the path without the C extension rounds a copy
        values[...] = result
    return values


F16W_THREADED = 1 << 18  # multiply-adds from which the fp16-weight product uses its threads
# From this many columns (positions) the float32 GEMM's 6x64 blocks beat the fp16 kernel's 4x2
# (a CNN's pointwise conv over an image: 2x here); the weights are then widened a block of
# rows at a time, WIDEN_VALUES values (16 MB of float32) at most.
WIDE_COLUMNS = 256
WIDEN_VALUES = 1 << 22
# From this many columns, with at most COLUMNS_MAX_K inputs (a CNN's pointwise conv over a small
# feature map), ``gemm_f16w_cols`` runs the same sums with the positions in its vector lanes,
# all samples in one call and x untransposed: 1.3-2.3x gemm_f16w on PP-OCR's shapes (3 x
# [200, 32] @ [32, 192]: 165 -> 80 us). With fewer columns (a decode step's tokens) or longer
# k (its broadcast weights then come from L2) gemm_f16w is as fast or faster.
HALF_COLUMNS = HALF_WEIGHTS and ACCELERATED and hasattr(_native, "gemm_f16w_cols")
COLUMNS_MIN = 16
COLUMNS_MAX_K = 256


def matmul_half(weight: np.ndarray, x: np.ndarray, *, rounded: bool = False) -> np.ndarray:
    """``weight @ x`` for an fp16 ``weight`` [M, K] (held as float16: the one copy of a
    model's weights) and float32 ``x`` [..., K, N]: float32 [..., M, N], each output a float32
    sum over K of exact fp16-to-float32 products. ``_native.gemm_f16w`` widens the weights in
    registers as it reads them (half the bytes of a float32 copy), and ``gemm_f16w_cols``
    sums as it does over a small feature map (see COLUMNS_MIN); for wide products, or
    without them, blocks of rows are widened in turn and multiplied as float32, so the
    temporary stays small. ``rounded``: as :func:`matmul`'s."""
    m, k = weight.shape
    n = x.shape[-1]
    batch = x.shape[:-2]
    if HALF_WEIGHTS and n < COLUMNS_MIN and 0 < x.size == k * n:
        # one sample of a few positions (a recurrent step's gates): the per-sample loop's
        # call below, without its bookkeeping
        out = _f16w_sample(weight, x.reshape(k, n), np.empty((m, n), np.float32))
        return (rounded_in_place(out) if rounded else out).reshape((*batch, m, n))
    rows = x.reshape(-1, k, n)
    out = np.empty((rows.shape[0], m, n), np.float32)
    if HALF_COLUMNS and COLUMNS_MIN <= n < WIDE_COLUMNS and k <= COLUMNS_MAX_K:
        # every sample at once, x read as it is: gemm_f16w's sums, bit for bit
        threads = THREADS if m * k * n * rows.shape[0] >= F16W_THREADED else 1
        x32 = np.ascontiguousarray(rows, dtype=np.float32)
        _native.gemm_f16w_cols(np.ascontiguousarray(weight), x32, out, len(rows), m, k, n, threads)
        return (rounded_in_place(out) if rounded else out).reshape((*batch, m, n))
    if HALF_WEIGHTS and n < COLUMNS_MIN and len(rows) > 1:
        # a few positions per sample (an SE block's pooled channels): the samples' positions
        # as the columns of one product (each column is summed alone, so the bits are the
        # per-sample calls')
        xt = np.ascontiguousarray(rows.transpose(0, 2, 1).reshape(-1, k), dtype=np.float32)
        columns = np.empty((m, len(xt)), np.float32)
        threads = THREADS if m * k * len(xt) >= F16W_THREADED else 1
        _native.gemm_f16w(np.ascontiguousarray(weight), xt, columns, m, k, len(xt), threads)
        out[...] = columns.reshape(m, len(rows), n).transpose(1, 0, 2)
        return (rounded_in_place(out) if rounded else out).reshape((*batch, m, n))
    step = max(1, WIDEN_VALUES // max(k, 1))
    whole = None  # the weights widened once for every sample, when they fit in one block
    for b in range(rows.shape[0]):
        if HALF_WEIGHTS and n < WIDE_COLUMNS:
            _f16w_sample(weight, rows[b], out[b])
        elif step >= m:  # one block: the product written straight into out
            if whole is None:
                whole = weight.astype(np.float32)
            matmul(whole, rows[b], out=out[b], rounded=rounded)
            continue
        else:
            for lo in range(0, m, step):
                out[b, lo : lo + step] = matmul(weight[lo : lo + step].astype(np.float32), rows[b])
        if rounded:
            rounded_in_place(out[b])
    return out.reshape((*batch, m, n))


def _f16w_sample(weight: np.ndarray, sample: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` [M, N] = fp16 ``weight`` [M, K] @ one sample [K, N] by ``_native.gemm_f16w``
    (which reads the sample transposed), on its threads when the product is large."""
    m, k = weight.shape
    n = sample.shape[-1]
    xt = np.ascontiguousarray(sample.T, dtype=np.float32)
    threads = THREADS if m * k * n >= F16W_THREADED else 1
    _native.gemm_f16w(np.ascontiguousarray(weight), xt, out, m, k, n, threads)
    return out


SPLIT_WORK = 1 << 22  # multiply-adds from which numpy's product runs as two halves at once
# Each half must stay above OpenBLAS's small-matrix kernels (taken up to 1e6 multiply-adds,
# with sums in another order): above, every product of a shape is summed alike.
HALF_WORK = 1 << 21


def _blas_matrix(a: np.ndarray) -> bool:
    """The last two axes as BLAS reads them: one of unit stride, the other a leading
    dimension at least as long as a row (numpy's test for handing a product to BLAS)."""
    rows, cols = a.shape[-2:]
    s0, s1 = a.strides[-2:]
    size = a.itemsize
    return (s1 == size and s0 % size == 0 and s0 >= size * max(cols, 1)) or (
        s0 == size and s1 % size == 0 and s1 >= size * max(rows, 1)
    )


def split_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``numpy.matmul(a, b)`` of one large float32 matrix product (leading axes all 1) as
    two products of half the rows, one on a helper thread (numpy lets go of the GIL in
    BLAS), or None when it does not apply. BLAS computes every output the same way
    whichever rows share its call (a sum over k in k-blocks fixed by k alone), so the
    bits are those of one call. Operands BLAS would not take as they are, a product of a
    matrix and its own transpose (BLAS's syrk), narrow products (a 3x3 kernel's weight
    gradient, [16, 50176] x [50176, 9]: both halves stream all of the long operand, 0.52
    -> 0.87 ms), matrix-vector shapes and halves small enough for BLAS's small-matrix
    kernels stay one call."""
    if a.ndim < 2 or b.ndim < 2 or a.size * b.shape[-1] < SPLIT_WORK:
        return None  # small: most products stop at this first test
    if a.dtype != np.float32 or b.dtype != np.float32:
        return None
    if any(d != 1 for d in (*a.shape[:-2], *b.shape[:-2])):
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if b.shape[-2] != k or m < 4 or n < MIN_COLUMNS or m * n * k < SPLIT_WORK:
        return None
    if (m // 2) * n * k < HALF_WORK:
        return None
    if not (_blas_matrix(a) and _blas_matrix(b)) or np.may_share_memory(a, b):
        return None
    if not pieces.spare_cpu(THREADS):
        return None
    x, y = a.reshape(a.shape[-2:]), b.reshape(b.shape[-2:])
    out = np.empty((m, n), np.float32)
    pieces.run(lambda lo, hi: np.matmul(x[lo:hi], y, out=out[lo:hi]), m)
    return out.reshape((1,) * (max(a.ndim, b.ndim) - 2) + (m, n))


_blas: list[Any] = []  # threadpoolctl's controllers of the loaded BLAS libraries
_modules_seen = -1  # len(sys.modules) when they were found: an import since may have loaded a BLAS


class _OneBlasThread:
    """numpy's BLAS libraries held to one thread inside the block, then set back: the
    libraries' own get/set calls (about 3 us), where threadpoolctl's ``limit`` lists every
    library again (about 16 us, three times per run of a three-segment model). The GEMM
    runs on THREADS threads when a CPU is idle (pieces.spare_cpu), else on one: on this
    2-core machine at load 6, PP-OCRv4 det took 3.8 s on one thread and 4.2-4.3 s on two
    (workers the OS took the CPU from held their chunks), the 48x192 classifier 15-23 ms
    against 31-34 ms."""

    def __enter__(self) -> None:
        global _run_threads
        _run_threads = THREADS if pieces.spare_cpu(THREADS) else 1
        self.saved = [(lib, lib.num_threads) for lib in _blas]
        for lib, threads in self.saved:
            if threads != 1:
                lib.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        for lib, threads in self.saved:
            if threads != 1:
                lib.set_num_threads(threads)


def blas_on_one_thread() -> AbstractContextManager[Any]:
    """Context for one simulator run: numpy's BLAS limited to one thread while the GEMM's
    workers run, and the GEMM's threads chosen for the run (a no-op where the GEMM does not
    run or has one thread)."""
    global _blas, _modules_seen
    if not ACCELERATED or THREADS < 2:
        return nullcontext()
    if len(sys.modules) != _modules_seen:
        from threadpoolctl import ThreadpoolController

        # found again after imports: a library loaded since (scipy's own OpenBLAS, say) would
        # otherwise keep its threads beside the GEMM's
        _blas = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        _modules_seen = len(sys.modules)
    return _OneBlasThread()
