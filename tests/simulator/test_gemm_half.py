"""Products of fp16 weights held as float16 (``_native.gemm_f16w``, `gemm.matmul_half`) and the
simulator's kernels that read them so (a pointwise conv's weight, a gather's table).

Each output is a float32 sum of K exact products (fp16 widens to float32 exactly), so it is
within K * 2**-24 * sum(|w||x|) of the exact value, whatever order the kernel sums in (8
lanes, then across them); checked element by element against float64 products of the widened
weights, on shapes that hit every edge of the 4-row, 2-column register block and the 8-wide
k loop, with one and two threads, and on the portable scalar loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit.formats.blob import BlobReader, BlobWriter, ChunkedBytes
from anekit.simulator import gemm
from anekit.simulator.ops.conv import conv
from anekit.simulator.ops.gather import gather

native = gemm._native


def within_summation_bound(got: np.ndarray, w: np.ndarray, x: np.ndarray) -> bool:
    wide = w.astype(np.float64)
    exact = wide @ x.astype(np.float64)
    bound = (w.shape[1] + 1) * 2.0**-24 * (np.abs(wide) @ np.abs(x.astype(np.float64))) + 1e-37
    return bool(np.all(np.abs(got - exact) <= bound))


def test_the_kernel_is_built() -> None:
    assert gemm.HALF_WEIGHTS, "the fp16-weight kernel is not in use: pip install -e ."


SHAPES = [(1, 1, 1), (1, 7, 1), (4, 8, 1), (5, 9, 2), (7, 13, 3), (3, 17, 5), (576, 576, 1),
          (1536, 576, 16), (129, 1000, 4), (49, 2048, 1), (8, 0, 3)]  # fmt: skip


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("threads,portable", [(1, False), (2, False), (1, True)])
def test_kernel_matches_float32_products_of_the_widened_weights(m, k, n, threads, portable) -> None:
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    w = (rng.standard_normal((m, k)) * 3).astype(np.float16)
    x = rng.standard_normal((k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    native.gemm_f16w(w, np.ascontiguousarray(x.T), out, m, k, n, threads, portable)
    assert within_summation_bound(out, w, x)
    if k == 0:
        assert np.all(out == 0)


def test_threads_do_not_change_the_bits() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((1003, 515)).astype(np.float16)
    xt = rng.standard_normal((3, 515)).astype(np.float32)
    one, two = np.empty((1003, 3), np.float32), np.empty((1003, 3), np.float32)
    native.gemm_f16w(w, xt, one, 1003, 515, 3, 1)
    native.gemm_f16w(w, xt, two, 1003, 515, 3, 2)
    assert np.array_equal(one, two)


def test_fp16_specials_pass_through_as_float32_would() -> None:
    w = np.array([[np.inf, 1.0], [2.0**-24, 65504.0]], np.float16)  # subnormal, largest normal
    x = np.array([[1.0], [2.0]], np.float32)
    out = np.empty((2, 1), np.float32)
    for portable in (False, True):
        native.gemm_f16w(w, np.ascontiguousarray(x.T), out, 2, 2, 1, 1, portable)
        np.testing.assert_array_equal(out, w.astype(np.float32) @ x)


def test_bad_buffers_are_refused() -> None:
    w = np.zeros((4, 8), np.float16)
    with pytest.raises(ValueError, match="fp16 values"):
        native.gemm_f16w(w, np.zeros((1, 8), np.float32), np.zeros((5, 1), np.float32), 5, 8, 1, 1)
    with pytest.raises(ValueError, match="float32"):
        native.gemm_f16w(w, np.zeros((1, 8), np.float64), np.zeros((4, 1), np.float32), 4, 8, 1, 1)
    with pytest.raises(ValueError, match="threads"):
        native.gemm_f16w(w, np.zeros((1, 8), np.float32), np.zeros((4, 1), np.float32), 4, 8, 1, 0)


def test_matmul_half_takes_batches_and_strided_activations() -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((33, 40)).astype(np.float16)
    x = rng.standard_normal((2, 7, 40)).astype(np.float32).transpose(0, 2, 1)  # [2, 40, 7], strided
    got = gemm.matmul_half(w, x)
    assert got.shape == (2, 33, 7) and got.dtype == np.float32
    for b in range(2):
        assert within_summation_bound(got[b], w, x[b])


def test_pointwise_conv_reads_an_fp16_weight_in_place() -> None:
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((24, 16, 1, 1)).astype(np.float16)
    bias = rng.standard_normal(24).astype(np.float32)
    x = rng.standard_normal((1, 16, 1, 5)).astype(np.float32)
    got = conv(x, weight, bias)
    want = conv(x, weight.astype(np.float32), bias)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a conv the fp16 product does not cover (3x1 kernel) widens and matches too
    wide = rng.standard_normal((4, 16, 3, 1)).astype(np.float16)
    x3 = rng.standard_normal((1, 16, 5, 1)).astype(np.float32)
    np.testing.assert_allclose(conv(x3, wide), conv(x3, wide.astype(np.float32)), rtol=1e-5, atol=1e-5)


def test_gather_of_an_fp16_table_gives_float32_rows() -> None:
    table = np.arange(40, dtype=np.float16).reshape(10, 4) / 8
    rows = gather(table, np.array([[3, -1, 0]], np.int32))
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, table.astype(np.float32)[[3, 9, 0]][None])


def test_a_weight_file_read_from_its_chunks_equals_its_bytes() -> None:
    writer = BlobWriter()
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(n).astype(np.float16) for n in (3, 64, 1000)]
    offsets = [writer.add(a, "fp16") for a in arrays]
    data = writer.to_bytes()
    cuts = [0, 5, 64, 200, 201, 700, len(data)]  # chunk edges inside headers, records and data
    chunked = ChunkedBytes([data[a:b] for a, b in zip(cuts, cuts[1:], strict=False)])
    assert len(chunked) == len(data) and bytes(chunked) == data
    assert bytes(chunked[10:300]) == data[10:300] and bytes(chunked[64:64]) == b""
    with BlobReader(chunked) as reader:
        for offset, a in zip(offsets, arrays, strict=True):
            np.testing.assert_array_equal(reader.read(offset), a)


def test_a_wide_product_widens_blocks_of_rows(monkeypatch) -> None:
    # over WIDE_COLUMNS positions the weights are widened a block of rows at a time
    monkeypatch.setattr(gemm, "WIDEN_VALUES", 3 * 40)  # blocks of 3 rows
    rng = np.random.default_rng(5)
    w = rng.standard_normal((10, 40)).astype(np.float16)
    x = rng.standard_normal((40, gemm.WIDE_COLUMNS + 3)).astype(np.float32)
    assert within_summation_bound(gemm.matmul_half(w, x), w, x)


def _columns_available() -> bool:
    return gemm.HALF_COLUMNS


COLUMN_SHAPES = [(1, 1, 1, 16), (2, 5, 7, 17), (3, 4, 8, 31), (1, 7, 13, 48), (2, 200, 32, 192),
                 (3, 32, 200, 96), (1, 6, 129, 255), (2, 9, 0, 20), (1, 70, 600, 33)]  # fmt: skip


@pytest.mark.parametrize("batch,m,k,n", COLUMN_SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_column_kernel_has_the_row_kernels_bits(batch, m, k, n, threads) -> None:
    """``gemm_f16w_cols`` (positions in the vector lanes, x as it is) sums each output as
    ``gemm_f16w`` does (eight partial sums, added pairwise, then the k % 8 tail), so the
    bits are the same, infinities and NaNs included: every row count modulo its 3-row
    block, k below, at and past multiples of 8, masked column strips, chunks of widened
    rows (k = 600)."""
    if not _columns_available():
        pytest.skip("no AVX-512 column kernel here")
    rng = np.random.default_rng(batch * 10000 + m * 100 + k + n)
    w = (rng.standard_normal((m, k)) * 3).astype(np.float16)
    x = rng.standard_normal((batch, k, n)).astype(np.float32)
    if k > 3:
        w[0, 1] = np.inf
        x[0, 2, 0] = np.nan
        x[-1, k - 1, -1] = -np.inf
    want = np.empty((batch, m, n), np.float32)
    for b in range(batch):
        native.gemm_f16w(w, np.ascontiguousarray(x[b].T), want[b], m, k, n, 1)
    got = np.full((batch, m, n), 7.0, np.float32)
    native.gemm_f16w_cols(w, x, got, batch, m, k, n, threads)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_matmul_half_of_a_small_feature_map_takes_the_column_kernel(monkeypatch) -> None:
    """A pointwise conv over a batch of small feature maps (16 to 255 positions, k at most
    COLUMNS_MAX_K) is one column-kernel call for all samples, strided x copied first: the
    row kernel's bits, sample by sample."""
    if not _columns_available():
        pytest.skip("no AVX-512 column kernel here")
    calls = []
    monkeypatch.setattr(gemm, "_native", _Recording(native, calls))
    rng = np.random.default_rng(6)
    w = rng.standard_normal((24, 40)).astype(np.float16)
    x = rng.standard_normal((3, 50, 40)).astype(np.float32).transpose(0, 2, 1)  # [3, 40, 50]
    got = gemm.matmul_half(w, x)
    assert calls == ["gemm_f16w_cols"]
    for b in range(3):
        want = np.empty((24, 50), np.float32)
        native.gemm_f16w(w, np.ascontiguousarray(x[b].T), want, 24, 40, 50, 1)
        assert np.array_equal(got[b].view(np.uint32), want.view(np.uint32))
    calls.clear()
    gemm.matmul_half(w, x[:, :, :8])  # a few positions: the row kernel, samples as columns
    assert calls == ["gemm_f16w"]


class _Recording:
    """The C module, recording which product kernels are called."""

    def __init__(self, module, calls: list) -> None:  # noqa: ANN001
        self.module, self.calls = module, calls

    def __getattr__(self, name: str):  # noqa: ANN204
        if name.startswith("gemm_f16w"):
            self.calls.append(name)
        return getattr(self.module, name)


def test_column_kernel_refuses_bad_buffers() -> None:
    if not _columns_available():
        pytest.skip("no AVX-512 column kernel here")
    w = np.zeros((4, 8), np.float16)
    with pytest.raises(ValueError, match="fp16 values"):
        native.gemm_f16w_cols(w, np.zeros((1, 8, 16), np.float32), np.zeros((1, 5, 16), np.float32),
                              1, 5, 8, 16, 1)  # fmt: skip
    with pytest.raises(ValueError, match="out must hold 128 values"):  # two samples' worth
        native.gemm_f16w_cols(w, np.zeros((2, 8, 16), np.float32), np.zeros((1, 4, 16), np.float32),
                              2, 4, 8, 16, 1)  # fmt: skip
    with pytest.raises(ValueError, match="float32"):
        native.gemm_f16w_cols(w, np.zeros((1, 8, 16), np.float64), np.zeros((1, 4, 16), np.float32),
                              1, 4, 8, 16, 1)  # fmt: skip
    with pytest.raises(ValueError, match="threads"):
        native.gemm_f16w_cols(w, np.zeros((1, 8, 16), np.float32), np.zeros((1, 4, 16), np.float32),
                              1, 4, 8, 16, 0)  # fmt: skip


def test_a_wide_product_of_one_block_writes_each_sample_in_place() -> None:
    """Weights that fit one widened block are widened once for all samples and each
    sample's product is written straight into the result: the bits of the float32 product
    of the widened weights, sample by sample (the C GEMM's here, numpy's for a product too
    small for it)."""
    rng = np.random.default_rng(9)
    for m, k, n in [(32, 16, 3000), (5, 3, gemm.WIDE_COLUMNS)]:
        w = rng.standard_normal((m, k)).astype(np.float16)
        x = rng.standard_normal((2, k, n)).astype(np.float32)
        got = gemm.matmul_half(w, x)
        for b in range(2):
            want = gemm.matmul(w.astype(np.float32), x[b])
            assert np.array_equal(got[b].view(np.uint32), want.view(np.uint32))


def test_matmul_into_out_gives_the_bits_of_a_fresh_result() -> None:
    rng = np.random.default_rng(10)
    for m, k, n in [(64, 64, 2000), (3, 5, 7)]:  # the C GEMM, numpy's product
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        out = np.empty((m, n), np.float32)
        assert gemm.matmul(a, b, out=out) is not None
        assert np.array_equal(out.view(np.uint32), gemm.matmul(a, b).view(np.uint32))


def test_few_positions_of_several_samples_are_one_product_with_the_same_bits() -> None:
    """Fewer than COLUMNS_MIN positions per sample (an SE block's [N, C, 1, 1]): the samples'
    positions are the columns of one gemm_f16w call, each summed as its own call sums it."""
    rng = np.random.default_rng(11)
    for batch, n in [(3, 1), (2, 5), (4, 15)]:
        w = rng.standard_normal((22, 88)).astype(np.float16)
        x = rng.standard_normal((batch, 88, n)).astype(np.float32)
        x[0, 0, 0] = np.nan
        got = gemm.matmul_half(w, x)
        assert got.flags.c_contiguous
        for b in range(batch):
            want = np.empty((22, n), np.float32)
            native.gemm_f16w(w, np.ascontiguousarray(x[b].T), want, 22, 88, n, 1)
            assert np.array_equal(got[b].view(np.uint32), want.view(np.uint32))


def test_one_sample_of_few_positions_is_one_gemm_f16w_call() -> None:
    """A recurrent step's gates ([1, K, 1] and other single samples of fewer than COLUMNS_MIN
    positions, contiguous or strided): gemm_f16w's bits, in the product's shape."""
    rng = np.random.default_rng(13)
    for batch, n in [((1,), 1), ((), 3), ((1, 1), 15)]:
        w = rng.standard_normal((40, 24)).astype(np.float16)
        x = rng.standard_normal((*batch, 24, 2 * n)).astype(np.float32)[..., ::2]
        x[(0,) * len(batch) + (0, 0)] = np.nan if n == 3 else -0.0
        got = gemm.matmul_half(w, x)
        want = np.empty((40, n), np.float32)
        native.gemm_f16w(w, np.ascontiguousarray(x.reshape(24, n).T), want, 40, 24, n, 1)
        assert got.shape == (*batch, 40, n)
        assert np.array_equal(got.reshape(40, n).view(np.uint32), want.view(np.uint32))
        rounded = gemm.matmul_half(w, x, rounded=True)  # and rounded to fp16 where it is
        want16 = want.astype(np.float16).astype(np.float32)
        assert np.array_equal(rounded.reshape(40, n).view(np.uint32), want16.view(np.uint32))
