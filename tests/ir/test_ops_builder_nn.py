"""The builder's pooling, resampling and transposed-convolution functions against torch."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import ModelError

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(11)


def _run(fn, x: np.ndarray):
    t = anekit.input("x", x.shape)
    out = fn(t)
    outs = out if isinstance(out, tuple) else (out,)
    return list(anekit.graph(list(outs)).run({"x": x}).values())


def test_pools_match_torch() -> None:
    x = RNG.standard_normal((2, 3, 11, 9)).astype(np.float32)
    xt = torch.from_numpy(x)
    (y,) = _run(lambda t: ops.max_pool2d(t, 3, 2, 1, dilation=(1, 2), ceil_mode=True), x)
    ref = F.max_pool2d(xt, 3, 2, 1, dilation=(1, 2), ceil_mode=True)
    np.testing.assert_array_equal(y, ref.numpy())
    (y,) = _run(lambda t: ops.avg_pool2d(t, (3, 2), 2, (1, 1), ceil_mode=True), x)
    ref = F.avg_pool2d(xt, (3, 2), 2, (1, 1), ceil_mode=True)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)
    (y,) = _run(lambda t: ops.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x)
    ref = F.avg_pool2d(xt, 3, 2, 1, count_include_pad=False)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)
    (y,) = _run(lambda t: ops.global_avg_pool(t), x)
    np.testing.assert_allclose(y, F.adaptive_avg_pool2d(xt, 1).numpy(), rtol=1e-5, atol=1e-6)
    (y,) = _run(lambda t: ops.global_max_pool(t), x)
    np.testing.assert_array_equal(y, F.adaptive_max_pool2d(xt, 1).numpy())


def test_max_pool_indices_flatten_the_whole_input() -> None:
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    y, idx = _run(lambda t: ops.max_pool2d(t, 2, return_indices=True), x)
    ref, ref_idx = F.max_pool2d(torch.from_numpy(x), 2, return_indices=True)
    np.testing.assert_array_equal(y, ref.numpy())
    plane = np.arange(6).reshape(2, 3, 1, 1) * 36  # torch's indices are per (n, c) plane
    np.testing.assert_array_equal(idx, ref_idx.numpy() + plane)
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)


def test_lrn_matches_torch_for_odd_sizes() -> None:
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    (y,) = _run(lambda t: ops.lrn(t, 5, alpha=0.2, beta=0.7, k=1.5), x)
    ref = F.local_response_norm(torch.from_numpy(x), 5, alpha=0.2, beta=0.7, k=1.5)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_transpose2d_matches_torch() -> None:
    x = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    kw = dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(1, 2))
    (y,) = _run(lambda t: ops.conv_transpose2d(t, w, b, **kw), x)
    tw, tb = torch.from_numpy(w.copy()), torch.from_numpy(b.copy())  # the builder froze w, b
    ref = F.conv_transpose2d(torch.from_numpy(x), tw, tb, **kw)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("mode", "align", "size", "scale"),
    [
        ("nearest", None, None, 2.0),
        ("nearest", None, (7, 13), None),
        ("nearest-exact", None, (7, 13), None),
        ("bilinear", False, None, 1.5),
        ("bilinear", False, (4, 3), None),
        ("bilinear", True, (7, 13), None),
        ("bicubic", False, (9, 4), None),
        ("bicubic", True, None, 2.0),
    ],
)
def test_interpolate_matches_torch(mode, align, size, scale) -> None:
    x = RNG.standard_normal((1, 2, 6, 5)).astype(np.float32)
    (y,) = _run(lambda t: ops.interpolate(t, size, scale, mode, align), x)
    ref = F.interpolate(torch.from_numpy(x), size, scale, mode, align)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_pixel_shuffle_round_trip_matches_torch() -> None:
    x = RNG.standard_normal((1, 8, 3, 2)).astype(np.float32)
    (y,) = _run(lambda t: ops.pixel_shuffle(t, 2), x)
    np.testing.assert_array_equal(y, F.pixel_shuffle(torch.from_numpy(x), 2).numpy())
    (back,) = _run(lambda t: ops.pixel_unshuffle(t, 2), y)
    np.testing.assert_array_equal(back, x)


def test_builder_argument_errors() -> None:
    t = anekit.input("x", (1, 2, 4, 4))
    with pytest.raises(ModelError, match="exactly one of size and scale_factor"):
        ops.interpolate(t)
    with pytest.raises(ModelError, match="align_corners only applies"):
        ops.interpolate(t, scale_factor=2, align_corners=True)
    with pytest.raises(ModelError, match="rank >= 3"):
        ops.global_avg_pool(anekit.input("v", (2, 3)))


def _onnx_gates(weight: np.ndarray, order: list[int], n: int) -> np.ndarray:
    """torch's stacked gate blocks reordered to ONNX's gate order."""
    blocks = np.split(weight, n, axis=0)
    return np.concatenate([blocks[i] for i in order], axis=0)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_matches_torch(bidirectional) -> None:
    torch.manual_seed(0)
    layer = torch.nn.LSTM(5, 4, bidirectional=bidirectional, batch_first=True)
    dirs = 2 if bidirectional else 1
    p = {k: v.detach().numpy() for k, v in layer.named_parameters()}
    sfx = ["", "_reverse"][:dirs]
    order = [0, 3, 1, 2]  # torch i, f, g, o -> ONNX i, o, f, c
    w = np.stack([_onnx_gates(p[f"weight_ih_l0{s}"], order, 4) for s in sfx])
    r = np.stack([_onnx_gates(p[f"weight_hh_l0{s}"], order, 4) for s in sfx])
    b = np.stack(
        [np.concatenate([_onnx_gates(p[f"bias_ih_l0{s}"], order, 4), _onnx_gates(p[f"bias_hh_l0{s}"], order, 4)]) for s in sfx]
    )  # fmt: skip
    x = RNG.standard_normal((2, 6, 5)).astype(np.float32)
    t = anekit.input("x", x.shape)
    y, y_h, y_c = ops.lstm(
        t, w, r, b, direction="bidirectional" if bidirectional else "forward", batch_first=True
    )
    out = anekit.graph([y, y_h, y_c]).run({"x": x})
    ref, (h, c) = layer(torch.from_numpy(x))
    got = list(out.values())
    np.testing.assert_allclose(got[0].reshape(2, 6, -1), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1].transpose(1, 0, 2), h.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2].transpose(1, 0, 2), c.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gru_with_linear_before_reset_matches_torch() -> None:
    torch.manual_seed(1)
    layer = torch.nn.GRU(3, 4)
    p = {k: v.detach().numpy() for k, v in layer.named_parameters()}
    order = [1, 0, 2]  # torch r, z, n -> ONNX z, r, h
    w = _onnx_gates(p["weight_ih_l0"], order, 3)[None]
    r = _onnx_gates(p["weight_hh_l0"], order, 3)[None]
    b = np.concatenate(
        [_onnx_gates(p["bias_ih_l0"], order, 3), _onnx_gates(p["bias_hh_l0"], order, 3)]
    )[None]
    x = RNG.standard_normal((5, 2, 3)).astype(np.float32)
    y, y_h = ops.gru(anekit.input("x", x.shape), w, r, b, linear_before_reset=True)
    got = list(anekit.graph([y, y_h]).run({"x": x}).values())
    ref, h = layer(torch.from_numpy(x))
    np.testing.assert_allclose(got[0][:, 0], ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], h.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_topk_cumsum_one_hot_and_quantize_match_torch() -> None:
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    t = anekit.input("x", x.shape)
    values, idx = ops.topk(t, 3, axis=1)
    summed = ops.cumsum(t, 1, reverse=True)
    q = ops.quantize_linear(t, np.float32(0.05), np.asarray(10, np.int8), dtype="int8")
    back = ops.dequantize_linear(q, np.float32(0.05), np.asarray(10, np.int8))
    hot = ops.one_hot(ops.argmax(t, 1), 8)
    got = list(anekit.graph([values, idx, summed, q, back, hot]).run({"x": x}).values())
    tx = torch.from_numpy(x)
    ref_v, ref_i = torch.topk(tx, 3, dim=1)
    np.testing.assert_array_equal(got[0], ref_v.numpy())
    np.testing.assert_array_equal(got[1], ref_i.numpy())
    np.testing.assert_allclose(
        got[2], torch.flip(torch.cumsum(torch.flip(tx, [1]), 1), [1]).numpy(), rtol=1e-5, atol=1e-6
    )
    ref_q = torch.quantize_per_tensor(tx, 0.05, 10, torch.qint8)
    np.testing.assert_array_equal(got[3], ref_q.int_repr().numpy())
    np.testing.assert_allclose(got[4], ref_q.dequantize().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(got[5], torch.nn.functional.one_hot(tx.argmax(1), 8).numpy())
