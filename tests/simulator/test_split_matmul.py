"""gemm.split_matmul: a large numpy product run as two row halves on two threads must give
numpy's one-call bits (the simulator's results must not depend on the split), for
contiguous and transposed operands, odd sizes and values with NaNs and infinities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anekit.simulator import gemm, pieces

# NaN and infinities are part of the drawn values: numpy's warnings about them are expected
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _operand(rows: int, cols: int, transposed: bool, rng: np.random.Generator) -> np.ndarray:
    a = rng.standard_normal((cols, rows) if transposed else (rows, cols)).astype(np.float32)
    a[rng.random(a.shape) < 0.2] = 0.0
    return a.T if transposed else a


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 70), st.integers(0, 300), st.integers(gemm.MIN_COLUMNS, 90), st.booleans(), st.booleans(),
       st.booleans(), st.integers(0, 10**6))  # fmt: skip
def test_split_product_gives_the_one_call_bits(m, extra, n, ta, tb, special, seed) -> None:
    k = -(-gemm.HALF_WORK // ((m // 2) * n)) + extra  # halves just large enough, and more
    rng = np.random.default_rng(seed)
    a, b = _operand(m, k, ta, rng), _operand(k, n, tb, rng)
    if special:
        a = a.copy()
        a[0, 0], a[-1, -1] = np.nan, np.inf
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pieces, "spare_cpu", lambda threads: True)  # whatever the load
        mp.setattr(gemm, "SPLIT_WORK", 0)  # the halves' size is what matters
        got = gemm.split_matmul(a[None], b[None])
    assert got is not None and got.shape == (1, m, n)
    want = np.matmul(a[None], b[None])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_split_is_refused_where_numpy_takes_another_path() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pieces, "spare_cpu", lambda threads: True)
        mp.setattr(gemm, "SPLIT_WORK", 0)
        assert gemm.split_matmul(a, a.T) is None  # syrk
        assert gemm.split_matmul(a[:, ::2], a[::2]) is None  # not BLAS-ready
        assert gemm.split_matmul(a[None].repeat(2, 0), a) is None  # a real batch
        assert gemm.split_matmul(a, a[:, :1]) is None  # matrix-vector
        assert gemm.split_matmul(a, a[:, :9].copy()) is None  # narrow: halves stream all of b
        assert gemm.split_matmul(a.astype(np.float64), a) is None
        assert gemm.split_matmul(a[:16, :16], a[:16, :16].copy()) is None  # small kernels
        assert gemm.split_matmul(a, a.copy()) is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pieces, "spare_cpu", lambda threads: True)
        assert gemm.split_matmul(a[:32], a.copy()) is None  # too small to pay for the thread
        assert gemm.split_matmul(a, a.copy()) is not None
        mp.setattr(pieces, "spare_cpu", lambda threads: False)
        assert gemm.split_matmul(a, a.copy()) is None  # no idle CPU for the helper


def test_conv_transpose_product_in_halves_gives_the_one_call_bits() -> None:
    """conv_transpose's product of its transposed weights and x (numpy's) runs as two halves
    when large: the output's bits are those of one call."""
    from anekit.simulator.ops.conv import conv_transpose

    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 24, 40, 300)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    w = rng.standard_normal((24, 24, 2, 2)).astype(np.float32)
    strides = np.array([2, 2], np.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pieces, "spare_cpu", lambda threads: False)
        one = conv_transpose(x, w, strides=strides)
        split, done = gemm.split_matmul, []
        mp.setattr(pieces, "spare_cpu", lambda threads: True)
        mp.setattr(gemm, "split_matmul", lambda a, b: done.append(split(a, b)) or done[-1])
        halves = conv_transpose(x, w, strides=strides)
    assert done and done[0] is not None  # the product ran in halves
    assert np.array_equal(one.view(np.uint32), halves.view(np.uint32))
