"""Recurrent-layer builder ops with ONNX weight layouts: lstm, gru and rnn."""

from __future__ import annotations

from typing import Any

from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, as_tensor, record


def _recurrent(
    op: str,
    x: TensorLike,
    w: TensorLike,
    r: TensorLike,
    bias: TensorLike | None,
    states: tuple[TensorLike | None, ...],
    sequence_lens: TensorLike | None,
    direction: str,
    batch_first: bool,
    name: str | None,
    **extra: Any,
) -> Any:
    attrs = {
        "hidden_size": as_tensor(r).shape[-1],
        "direction": direction,
        "layout": 1 if batch_first else 0,
        **extra,
    }
    return record(op, [x, w, r, bias, sequence_lens, *states], attrs, name=name)


def lstm(
    x: TensorLike,
    w: TensorLike,
    r: TensorLike,
    bias: TensorLike | None = None,
    initial_h: TensorLike | None = None,
    initial_c: TensorLike | None = None,
    *,
    sequence_lens: TensorLike | None = None,
    direction: str = "forward",
    batch_first: bool = False,
    name: str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """ONNX LSTM: returns (y, y_h, y_c).

    Weights are in ONNX's layout: w [directions, 4*hidden, input] and r [directions, 4*hidden,
    hidden] with gates in the order i, o, f, c; bias [directions, 8*hidden] (W then R biases).
    """
    states = (initial_h, initial_c)
    return _recurrent("lstm", x, w, r, bias, states, sequence_lens, direction, batch_first, name)


def gru(
    x: TensorLike,
    w: TensorLike,
    r: TensorLike,
    bias: TensorLike | None = None,
    initial_h: TensorLike | None = None,
    *,
    sequence_lens: TensorLike | None = None,
    direction: str = "forward",
    batch_first: bool = False,
    linear_before_reset: bool = False,
    name: str | None = None,
) -> tuple[Tensor, Tensor]:
    """ONNX GRU: returns (y, y_h). Gates in the order z, r, h; torch.nn.GRU matches
    ``linear_before_reset=True``."""
    return _recurrent(
        "gru", x, w, r, bias, (initial_h,), sequence_lens, direction, batch_first, name,
        linear_before_reset=linear_before_reset,
    )  # fmt: skip


def rnn(
    x: TensorLike,
    w: TensorLike,
    r: TensorLike,
    bias: TensorLike | None = None,
    initial_h: TensorLike | None = None,
    *,
    sequence_lens: TensorLike | None = None,
    direction: str = "forward",
    batch_first: bool = False,
    nonlinearity: str = "tanh",
    name: str | None = None,
) -> tuple[Tensor, Tensor]:
    """ONNX RNN (h_t = f(x_t W^T + h_{t-1} R^T + b)): returns (y, y_h)."""
    dirs = 2 if direction == "bidirectional" else 1
    return _recurrent(
        "rnn", x, w, r, bias, (initial_h,), sequence_lens, direction, batch_first, name,
        activations=(nonlinearity,) * dirs,
    )  # fmt: skip
