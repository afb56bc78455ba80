"""Grouped convolutions whose weights only pick inputs (a compiled training step's im2col,
pooling windows and their col2im gradients) are copied instead of multiplied; the copies
must give the GEMM's bits: +0 for -0, 0 where nothing is picked, and NaN propagation from
every input of a group (the GEMM path is taken then)."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.simulator.fp16 import round_to_fp16
from anekit.simulator.ops import conv as conv_ops

PAD = {"pad_type": "custom", "pad": np.array([1, 1, 1, 1], np.int32)}


def _values(shape: tuple[int, ...], seed: int, special: tuple[float, ...] = ()) -> np.ndarray:
    """fp16 values with many signed zeros (as a ReLU's gradient has)."""
    rng = np.random.default_rng(seed)
    x = round_to_fp16(rng.standard_normal(shape).astype(np.float32))
    x[rng.random(shape) < 0.3] = 0.0
    x[rng.random(shape) < 0.3] = -0.0
    flat = x.reshape(-1)
    flat[: len(special)] = special
    return x


def _window_picks(channels: int, k: int) -> np.ndarray:
    """[channels * k * k, 1, k, k]: output c * k * k + t is window position t of channel c."""
    w = np.zeros((channels * k * k, 1, k, k), np.float32)
    for c in range(channels):
        for t in range(k * k):
            w[c * k * k + t, 0, t // k, t % k] = 1.0
    return w


def _shuffled_picks(channels: int, k: int) -> np.ndarray:
    """Picks out of order, one output picking nothing."""
    w = _window_picks(channels, k)[:, :, ::-1, :].copy()
    w[1] = 0.0
    return w


def _both(monkeypatch: pytest.MonkeyPatch, fn, **kwargs) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    fast = fn(**kwargs)
    with monkeypatch.context() as m:
        m.setattr(conv_ops, "PICK_LIMIT", 0)  # every weight takes the GEMM
        slow = fn(**kwargs)
    return fast, slow


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32)
    )


@pytest.mark.parametrize("weights", [_window_picks, _shuffled_picks])
@pytest.mark.parametrize("special", [(), (np.inf,), (np.nan, -np.inf)])
def test_window_picking_conv_gives_the_gemms_bits(weights, special, monkeypatch) -> None:  # noqa: ANN001
    x = _values((3, 4, 9, 7), 1, special)
    w = weights(4, 3)
    assert (conv_ops._picked(w.reshape(4, 9, 9), x) is None) == bool(special)
    fast, slow = _both(monkeypatch, conv_ops.conv, x=x, weight=w, groups=np.int32(4), **PAD)
    assert fast.shape == (3, 36, 9, 7)
    assert _same_bits(fast, slow)
    # the picked values themselves, with -0 made +0
    if not special:
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        assert np.array_equal(fast[:, 4], padded[:, 0, 1:10, 1:8] + np.float32(0))
        assert not np.any(np.signbit(fast[fast == 0]))


def test_pooling_windows_and_their_gradient_give_the_gemms_bits(monkeypatch) -> None:  # noqa: ANN001
    x = _values((2, 3, 8, 6), 2)
    w = _window_picks(3, 2)  # a 2x2 stride-2 pooling's windows
    strides = np.array([2, 2], np.int32)
    fast, slow = _both(
        monkeypatch, conv_ops.conv, x=x, weight=w, strides=strides, groups=np.int32(3)
    )
    assert fast.shape == (2, 12, 4, 3) and _same_bits(fast, slow)
    grad = _values((2, 12, 4, 3), 3)
    fast, slow = _both(monkeypatch, conv_ops.conv_transpose, x=grad, weight=w, strides=strides,
                       groups=np.int32(3))  # fmt: skip
    assert fast.shape == (2, 3, 8, 6) and _same_bits(fast, slow)


@pytest.mark.parametrize("weights", [_window_picks, _shuffled_picks])
@pytest.mark.parametrize("special", [(), (np.nan,)])
def test_col2im_of_overlapping_windows_gives_the_gemms_bits(weights, special, monkeypatch) -> None:  # noqa: ANN001
    grad = _values((3, 36, 9, 7), 4, special)
    grad = np.ascontiguousarray(grad.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)  # strided
    fast, slow = _both(monkeypatch, conv_ops.conv_transpose, x=grad, weight=weights(4, 3),
                       groups=np.int32(4), **PAD)  # fmt: skip
    assert fast.shape == (3, 4, 9, 7) and _same_bits(fast, slow)


def test_real_weights_are_not_picks() -> None:
    x = np.ones((1, 2, 4, 4), np.float32)
    w = _window_picks(2, 2).reshape(2, 4, 4)
    assert conv_ops._picked(w, x) is not None
    for bad in (w * 2, w + (w == 0) * 0.5):
        assert conv_ops._picked(bad, x) is None
    two = w.copy()
    two[0, 0, :2] = 1.0  # one output summing two inputs
    assert conv_ops._picked(two, x) is None
