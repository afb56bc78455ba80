"""The IR attention kernel: torch's scaled_dot_product_attention on masks and causality,
and ONNX's rule that a query row with every key masked attends to nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ir.ort_oracle import run_ir

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(4)


def _qkv(lq: int, lk: int) -> list[np.ndarray]:
    return [RNG.standard_normal((2, 3, n, 8)).astype(np.float32) for n in (lq, lk, lk)]


@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
def test_attention_matches_torch_sdpa(mask_kind) -> None:
    q, k, v = _qkv(5, 7)
    mask = None
    if mask_kind == "bool":
        mask = RNG.random((5, 7)) > 0.3
        mask[:, 0] = True  # keep every row alive: torch gives NaN for dead rows
    elif mask_kind == "float":
        mask = RNG.standard_normal((2, 1, 5, 7)).astype(np.float32)
    (y,) = run_ir("attention", [q, k, v, mask], scale=0.3)
    tm = None if mask is None else torch.from_numpy(mask)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=tm, scale=0.3
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_causal_is_aligned_bottom_right() -> None:
    q, k, v = _qkv(3, 6)  # three new queries after three cached keys
    (y,) = run_ir("attention", [q, k, v, None], causal=True)
    keep = np.tril(np.ones((3, 6), dtype=bool), k=3)
    (ref,) = run_ir("attention", [q, k, v, keep])
    np.testing.assert_array_equal(y, ref)
    (top_left,) = run_ir("attention", [q, k, v, np.tril(np.ones((3, 6), dtype=bool))])
    assert not np.allclose(y, top_left)


def test_a_fully_masked_row_gives_zeros_not_nan() -> None:
    q, k, v = _qkv(4, 4)
    mask = np.ones((4, 4), dtype=bool)
    mask[2] = False
    (y,) = run_ir("attention", [q, k, v, mask])
    assert np.isfinite(y).all()
    assert not y[:, :, 2].any() and y[:, :, 1].any()
    additive = np.where(mask, 0.0, -np.inf).astype(np.float32)
    (y2,) = run_ir("attention", [q, k, v, additive])
    np.testing.assert_array_equal(y, y2)
