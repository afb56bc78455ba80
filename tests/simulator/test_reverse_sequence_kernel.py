"""The simulator's reverse_sequence kernel (MIL, iOS 15/17) against the IR's reference kernel."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.ir.ops.misc import reverse_sequence as ir_reverse_sequence
from anekit.simulator.ops.shape import reverse_sequence
from tests.simulator.milops import run_mil


@pytest.mark.parametrize(("batch_axis", "seq_axis"), [(0, 1), (1, 0), (2, 0), (0, 3), (-1, 1)])
def test_kernel_matches_the_ir_kernel(batch_axis: int, seq_axis: int) -> None:
    rng = np.random.default_rng(abs(batch_axis) * 10 + seq_axis)
    x = rng.uniform(-9, 9, (3, 4, 5, 6)).astype(np.float16).astype(np.float32)
    b, s = batch_axis % 4, seq_axis % 4
    lengths = rng.integers(0, x.shape[s] + 1, x.shape[b]).astype(np.int32)
    lengths[0] = x.shape[s]
    want = ir_reverse_sequence(x, lengths, batch_axis=b, time_axis=s)
    got = reverse_sequence(x, lengths, seq_axis=np.int32(seq_axis), batch_axis=np.int32(batch_axis))
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, x)
    # and through a MIL program, fp16 and fp32
    for dtype in ("fp32", "fp16"):
        (out,) = run_mil("reverse_sequence", {"x": x, "lengths": lengths},
                         {"seq_axis": np.int32(seq_axis), "batch_axis": np.int32(batch_axis)},
                         [want], dtype=dtype)  # fmt: skip
        np.testing.assert_array_equal(out, want)


def test_kernel_refuses_lengths_out_of_range() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="outside"):
        reverse_sequence(x, np.array([4, 1], np.int32), seq_axis=1, batch_axis=0)
    with pytest.raises(ValueError, match="batches"):
        reverse_sequence(x, np.array([1], np.int32), seq_axis=1, batch_axis=0)
