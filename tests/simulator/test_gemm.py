"""The simulator's C GEMM (``_native.gemm``) and its wrapper against float64 products.

Each output of the kernel is a sequential fp32 sum of K products, so it is within
K * 2**-24 * sum(|a||b|) of the exact value (the classic bound for recursive summation);
the tests check that bound element by element, on shapes that hit every edge of the 6x64
register block, with several threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from anekit.simulator import fp16, gemm
from anekit.simulator.ops.conv import conv
from anekit.simulator.ops.linear import matmul

native = gemm._native


def within_summation_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = (a.shape[1] + 1) * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-37
    return bool(np.all(np.abs(got - exact) <= bound))


def test_the_kernel_runs_here() -> None:
    # CI's machine has AVX-512F and a C compiler: the path the benchmarks measure is tested
    assert gemm.ACCELERATED, "the C GEMM is not in use: pip install -e . on an AVX-512 machine"


@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 1), (5, 3, 7), (6, 768, 64), (7, 768, 64), (13, 100, 100), (12, 17, 65),
     (300, 129, 128), (301, 33, 191), (2304, 768, 64), (6, 1, 16)],
)  # fmt: skip
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_products_are_within_the_summation_bound(m: int, k: int, n: int, threads: int) -> None:
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out = np.full((m, n), np.nan, np.float32)
    native.gemm(a, b, out, m, k, n, threads)
    assert within_summation_bound(out, a, b)


def test_empty_products() -> None:
    out = np.full((4, 5), np.nan, np.float32)
    native.gemm(np.zeros((4, 0), np.float32), np.zeros((0, 5), np.float32), out, 4, 0, 5, 2)
    np.testing.assert_array_equal(out, 0.0)  # a sum of no products is zero
    native.gemm(np.zeros((0, 3), np.float32), np.zeros((3, 5), np.float32),
                np.zeros((0, 5), np.float32), 0, 3, 5, 2)  # fmt: skip


def test_infinities_and_nans_propagate_as_in_ieee_arithmetic() -> None:
    a = np.ones((6, 4), np.float32)
    a[0, 0], a[1, 0] = np.inf, np.nan
    b = np.ones((4, 64), np.float32)
    out = np.empty((6, 64), np.float32)
    native.gemm(a, b, out, 6, 4, 64, 2)
    assert np.all(np.isposinf(out[0])) and np.all(np.isnan(out[1]))
    np.testing.assert_array_equal(out[2:], 4.0)


@pytest.mark.parametrize(
    "a,b,out,sizes",
    [
        (np.zeros((4, 3), np.float64), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), (4, 3, 2)),
        (np.zeros((4, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros((4, 3), np.float32), (4, 3, 2)),
        (np.zeros((4, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), (5, 3, 2)),
        (np.zeros((4, 6), np.float32)[:, ::2], np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), (4, 3, 2)),
        (np.zeros((4, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), (-4, 3, 2)),
        (np.zeros((4, 3), np.float32), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32), (2**62, 2**62, 2)),
    ],
)  # fmt: skip
def test_buffers_that_do_not_match_the_sizes_are_refused(a, b, out, sizes) -> None:  # noqa: ANN001
    with pytest.raises((ValueError, BufferError)):
        native.gemm(a, b, out, *sizes, 1)


def test_a_read_only_output_and_bad_thread_counts_are_refused() -> None:
    a, b = np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)
    out = np.zeros((2, 2), np.float32)
    out.flags.writeable = False
    with pytest.raises((ValueError, BufferError, TypeError)):
        native.gemm(a, b, out, 2, 2, 2, 1)
    for threads in (0, 65):
        with pytest.raises(ValueError, match="threads"):
            native.gemm(a, b, np.zeros((2, 2), np.float32), 2, 2, 2, threads)


def test_concurrent_callers_share_the_pool_safely() -> None:
    # Python threads release the GIL inside gemm: one gets the worker pool, the others
    # compute alone; every product must still be right
    rng = np.random.default_rng(3)
    cases = [
        (rng.standard_normal((600, 256), dtype=np.float32),
         rng.standard_normal((256, 64), dtype=np.float32)) for _ in range(4)
    ]  # fmt: skip
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        a, b = cases[i]
        for _ in range(20):
            out = np.empty((600, 64), np.float32)
            native.gemm(a, b, out, 600, 256, 64, 2)
        results[i] = out

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (a, b) in enumerate(cases):
        assert within_summation_bound(results[i], a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_rebuilds_the_pool() -> None:
    # the parent's workers do not exist in a child; without the fork handler the child's
    # first product would wait for them forever (the timeout turns that into a failure)
    script = (
        "import os, numpy as np\n"
        "from anekit.simulator import gemm\n"
        "a = np.ones((600, 64), np.float32); b = np.ones((64, 64), np.float32)\n"
        "out = np.empty((600, 64), np.float32)\n"
        "gemm._native.gemm(a, b, out, 600, 64, 64, 2)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    out[:] = 0; gemm._native.gemm(a, b, out, 600, 64, 64, 2)\n"
        "    os._exit(0 if (out == 64).all() else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "raise SystemExit(os.waitstatus_to_exitcode(status))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_wrapper_takes_the_kernel_for_weight_products_and_numpy_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, ...]] = []
    real = native.gemm

    def spy(a, b, out, m, k, n, threads, rounded=False):  # noqa: ANN001, ANN202
        calls.append((m, k, n))
        return real(a, b, out, m, k, n, threads, rounded)

    monkeypatch.setattr(gemm, "_native", type("N", (), {"gemm": staticmethod(spy)}))
    rng = np.random.default_rng(4)
    w = rng.standard_normal((512, 256), dtype=np.float32)
    x = rng.standard_normal((1, 256, 64), dtype=np.float32)
    got = gemm.matmul(w, x)
    assert calls == [(512, 256, 64)] and got.shape == (1, 512, 64)
    assert within_summation_bound(got[0], w, x[0])
    # batched (12 heads), small, narrow, float64 or strided products: numpy, same results
    for a, b in [
        (rng.standard_normal((12, 64, 64), dtype=np.float32),) * 2,
        (w[:8], x[0, :, :8]),
        (w, x[0, :, :8]),
        (w.astype(np.float64), x[0]),
        (w[:32, ::2], x[0, ::2]),
    ]:
        np.testing.assert_array_equal(gemm.matmul(a, b), np.matmul(a, b))
    assert len(calls) == 1


def test_conv_and_matmul_kernels_agree_with_and_without_the_c_gemm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 768, 1, 64), dtype=np.float32)
    w = rng.standard_normal((1000, 768, 1, 1), dtype=np.float32)
    bias = rng.standard_normal(1000, dtype=np.float32)
    y = rng.standard_normal((1, 768, 64), dtype=np.float32)
    fast = conv(x, w, bias), matmul(w[:, :, 0, 0], y)
    monkeypatch.setattr(gemm, "ACCELERATED", False)
    slow = conv(x, w, bias), matmul(w[:, :, 0, 0], y)
    for f, s in zip(fast, slow, strict=True):
        assert f.shape == s.shape and f.dtype == s.dtype
        np.testing.assert_allclose(f, s, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "env,expected",
    [({"ANEKIT_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, 3), ({"OMP_NUM_THREADS": "2"}, 2),
     ({"OPENBLAS_NUM_THREADS": "1"}, 1), ({"ANEKIT_NUM_THREADS": "999"}, 64),
     ({"ANEKIT_NUM_THREADS": "x", "OMP_NUM_THREADS": "0", "OPENBLAS_NUM_THREADS": "4"}, 4)],
)  # fmt: skip
def test_thread_count_comes_from_the_environment(
    env: dict[str, str], expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANEKIT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert gemm.thread_count() == expected


def test_blas_is_held_to_one_thread_only_during_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    monkeypatch.setattr(gemm, "THREADS", 2)
    with threadpool_limits(2, user_api="blas"):
        with gemm.blas_on_one_thread():
            inside = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        after = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    assert inside == {1} and after == {2}


def test_results_do_not_depend_on_the_thread_count() -> None:
    # threads split whole rows, and each row is summed the same way: the simulator gives the
    # same bits on a laptop and on a CI runner with one thread
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1001, 300), dtype=np.float32)
    b = rng.standard_normal((300, 70), dtype=np.float32)
    outs = []
    for threads in (1, 2, 5):
        out = np.empty((1001, 70), np.float32)
        native.gemm(a, b, out, 1001, 300, 70, threads)
        outs.append(out)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


def test_changing_thread_counts_between_products_is_safe() -> None:
    # workers left out of one product must not pick up a part of the next one
    rng = np.random.default_rng(7)
    a = rng.standard_normal((240, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    want = np.empty((240, 64), np.float32)
    native.gemm(a, b, want, 240, 64, 64, 1)
    for i in range(400):
        out = np.full((240, 64), np.nan, np.float32)
        native.gemm(a, b, out, 240, 64, 64, (1, 4, 2, 3, 2)[i % 5])
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_a_wide_product_is_shared_out_by_column_panels_with_the_bits_of_one_thread(
    threads: int,
) -> None:
    # fewer rows than columns (a convolution's output channels by its positions): the
    # threads take panels of columns, not rows; each output must still be the one-thread
    # sum, bit for bit: a partial last panel, rows not a multiple of six, blocks of k that
    # resume, and an infinity and a NaN spreading along their row and column
    rng = np.random.default_rng(14)
    m, k, n = 70, 300, 1037
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a[5, 290], b[7, 1030] = np.inf, np.nan
    one = np.empty((m, n), np.float32)
    native.gemm(a, b, one, m, k, n, 1)
    shared = np.full((m, n), -1.0, np.float32)
    native.gemm(a, b, shared, m, k, n, threads)
    np.testing.assert_array_equal(shared.view(np.uint32), one.view(np.uint32))
    assert np.isnan(shared[:, 1030]).all() and np.isinf(shared[5]).sum() > n // 2


def test_wide_and_tall_products_one_after_another_are_safe() -> None:
    # a product split by column panels followed by one split by rows, thread counts
    # changing: no worker may take a chunk of one product as a chunk of the other
    rng = np.random.default_rng(15)
    wide = (rng.standard_normal((24, 64), dtype=np.float32),
            rng.standard_normal((64, 3000), dtype=np.float32))  # fmt: skip
    tall = (rng.standard_normal((300, 64), dtype=np.float32),
            rng.standard_normal((64, 40), dtype=np.float32))  # fmt: skip
    wants = []
    for a, b in (wide, tall):
        want = np.empty((a.shape[0], b.shape[1]), np.float32)
        native.gemm(a, b, want, a.shape[0], a.shape[1], b.shape[1], 1)
        wants.append(want)
    for i in range(200):
        (a, b), want = ((wide, wants[0]), (tall, wants[1]))[i % 2]
        out = np.full(want.shape, np.nan, np.float32)
        native.gemm(a, b, out, a.shape[0], a.shape[1], b.shape[1], (2, 3, 2, 4, 1)[i % 5])
        np.testing.assert_array_equal(out, want)


def _special_products(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose products hold every kind of value the fp16 rounding treats apart:
    normal and subnormal fp16 values, ties, values past 65504 and 65520, -0, infinities and
    NaNs with payloads."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a[0] *= 1e5  # rows of sums past fp16's range
    a[1] *= 1e-6  # and of fp16 subnormals
    a[2], b[:, 3] = 0.0, -0.0  # 0 * -0 sums: +0
    a[3, 1] = np.inf
    b[4, n - 1] = np.float32(np.uint32(0x7FC01234).view(np.float32))  # a NaN with a payload
    a[4, 4] = -np.float32(np.uint32(0x7F801000).view(np.float32))  # a signalling one, negative
    return a, b


@pytest.mark.parametrize("m,k,n,threads", [(70, 300, 1037, 1), (70, 300, 1037, 2),
                                           (301, 33, 191, 2), (7, 5, 9, 1), (12, 600, 65, 3)])  # fmt: skip
def test_a_rounded_product_has_the_bits_of_the_product_rounded_after(m, k, n, threads) -> None:
    """gemm(..., round=True) rounds each finished tile to fp16 values in the kernel: the
    bits of the product rounded by round_to_fp16 afterwards, whichever split the threads
    take (column panels, rows, blocks of k that resume)."""
    a, b = _special_products(m, k, n, m + k + n)
    plain = np.empty((m, n), np.float32)
    native.gemm(a, b, plain, m, k, n, threads)
    assert np.isnan(plain).any() and np.isinf(plain).any() and (np.abs(plain) > 65520).any()
    rounded = np.full((m, n), 7.0, np.float32)
    native.gemm(a, b, rounded, m, k, n, threads, True)
    want = fp16.round_to_fp16(plain)
    assert not np.array_equal(want.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(rounded.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 128, 64), (2, 32, 300)])
@pytest.mark.parametrize("half", [False, True])
def test_matmul_rounded_gives_the_rounded_product_on_every_path(shape, half) -> None:
    """``rounded=True`` returns what the run loop's rounding of the product would: through
    the C GEMM, numpy (a product too small for it) and the fp16-weight kernels."""
    rng = np.random.default_rng(sum(shape))
    w = rng.standard_normal((96, shape[1]), dtype=np.float32) * 300
    x = rng.standard_normal(shape, dtype=np.float32)
    x[0, 0, 0] = np.nan
    for weight in ([w[:5], w] if not half else [w.astype(np.float16)]):
        product = gemm.matmul_half if half else gemm.matmul
        want = fp16.round_to_fp16(product(weight, x))
        got = product(weight, x, rounded=True)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_blocks_of_k_resume_each_outputs_sum_where_it_stopped(threads: int) -> None:
    # the kernel runs k in blocks of 256 and reloads each sum from C between blocks; with
    # the products beyond the first block all zero, every sum must be the first block's,
    # bit for bit (a sum restarted from zero, or resumed from the wrong place, is not)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((50, 600), dtype=np.float32)
    b = rng.standard_normal((600, 80), dtype=np.float32)
    a[:, 256:] = 0.0
    out = np.empty((50, 80), np.float32)
    native.gemm(a, b, out, 50, 600, 80, threads)
    first = np.empty((50, 80), np.float32)
    native.gemm(
        np.ascontiguousarray(a[:, :256]), np.ascontiguousarray(b[:256]), first, 50, 256, 80, 1
    )
    assert np.all(first != 0)  # no signed zero for the + 0 products to turn positive
    np.testing.assert_array_equal(out.view(np.uint32), first.view(np.uint32))
    assert within_summation_bound(out, a, b)


@pytest.mark.parametrize(
    "a_shape,b_shape,strided",
    [((8, 64, 512), (512, 128), False), ((8, 64, 512), (512, 128), True),
     ((2, 3, 80, 192), (1, 1, 192, 64), True), ((400, 96), (1, 1, 96, 64), False),
     ((4, 128, 256), (1, 256, 32), True)],
)  # fmt: skip
def test_batched_rows_times_one_matrix_take_the_kernel_as_one_product(
    a_shape, b_shape, strided, monkeypatch
) -> None:
    """[batch.., M, K] x one matrix is one [batch*M, K] product on the C GEMM (rows copied
    to C order when they are a strided view), of numpy's result shape."""
    rng = np.random.default_rng(sum(a_shape))
    a = rng.standard_normal(a_shape, dtype=np.float32)
    if strided:  # the same values as a non-contiguous view
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
        assert not a.flags.c_contiguous
    b = rng.standard_normal(b_shape, dtype=np.float32)
    calls = []
    kernel = native.gemm
    monkeypatch.setattr(gemm._native, "gemm", lambda *args: calls.append(args[3:6]) or kernel(*args))
    got = gemm.matmul(a, b)
    assert got.shape == np.matmul(a, b).shape
    m = int(np.prod(a_shape[:-1]))
    assert calls == [(m, a_shape[-1], b_shape[-1])]
    rows = got.reshape(m, b_shape[-1])
    assert within_summation_bound(rows, a.reshape(m, -1), b.reshape(b_shape[-2:]))


def test_a_strided_matrix_is_copied_for_many_rows_and_left_to_numpy_for_few(monkeypatch) -> None:
    rng = np.random.default_rng(7)
    calls = []
    kernel = native.gemm
    monkeypatch.setattr(gemm._native, "gemm", lambda *args: calls.append(args[3:6]) or kernel(*args))
    a = rng.standard_normal((256, 128), dtype=np.float32)
    b = rng.standard_normal((256, 128), dtype=np.float32).T  # an input gradient's W^T
    got = gemm.matmul(a, b)
    assert calls == [(256, 128, 256)] and within_summation_bound(got, a, b)
    few = rng.standard_normal((32, 4096), dtype=np.float32)  # a weight gradient's rows
    long = rng.standard_normal((64, 4096), dtype=np.float32).T
    np.testing.assert_array_equal(gemm.matmul(few, long), np.matmul(few, long))
    assert len(calls) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_panels_give_the_bits_of_panels_read_in_place(threads: int) -> None:
    """A part of 24+ rows (and k of 32+) reads each panel of B from a packed copy, fewer rows
    read B where it is: each output's sum is the same FMA chain, so a product's rows have
    the bits of the same rows multiplied six at a time (edge columns, blocks of k, NaN and
    infinity included)."""
    rng = np.random.default_rng(13)
    m, k, n = 50, 600, 150
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a[3, 7], b[5, 149] = np.inf, np.nan
    whole = np.empty((m, n), np.float32)
    native.gemm(a, b, whole, m, k, n, threads)
    for r in range(0, m, 6):
        rows = np.ascontiguousarray(a[r : r + 6])
        part = np.empty((len(rows), n), np.float32)
        native.gemm(rows, b, part, len(rows), k, n, 1)
        assert np.array_equal(whole[r : r + 6].view(np.uint32), part.view(np.uint32))


@pytest.mark.skipif(not gemm.ACCELERATED, reason="the C GEMM needs AVX-512F")
@pytest.mark.parametrize("lead", [(), (1,), (1, 1)])
@pytest.mark.parametrize("given_out", [False, True])
def test_a_transposed_matrix_is_multiplied_as_the_transposed_product(lead, given_out) -> None:
    """A [k, n] operand laid out transposed (magika's one-hot rows after a layout transpose)
    is not copied: the C GEMM computes b.T @ a.T and the result is transposed back, with
    the bits of the product of its C-order copy (each output the same FMA chain over k),
    signed zeros and infinities included."""
    rng = np.random.default_rng(len(lead) + given_out)
    a = rng.standard_normal((64, 257)).astype(np.float32)
    a[3, :5] = [np.inf, -0.0, 0.0, np.nan, 1e-40]
    stored = rng.standard_normal((2048, 257)).astype(np.float32)
    stored[::97, 7] = -0.0
    b = stored.T.reshape(*lead, 257, 2048)  # a transposed view
    assert not b.flags.c_contiguous and gemm._transposed_product(a, b, None) is not None
    out = np.full((*lead, 64, 2048), np.nan, np.float32) if given_out else None
    got = gemm.matmul(a, b, out=out)
    want = gemm.matmul(a, np.ascontiguousarray(b))
    assert got.shape == want.shape == (*lead, 64, 2048)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    if given_out:
        assert got.base is out or got is out
