"""Softmax and the normalisation builder ops (layer, RMS, batch, instance, group, local response)."""

from __future__ import annotations

import numpy as np

from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, as_tensor, record


def softmax(x: TensorLike, axis: int = -1, *, name: str | None = None) -> Tensor:
    return record("softmax", [x], {"axis": axis}, name=name)


def log_softmax(x: TensorLike, axis: int = -1, *, name: str | None = None) -> Tensor:
    return record("log_softmax", [x], {"axis": axis}, name=name)


def layer_norm(
    x: TensorLike,
    weight: TensorLike | None = None,
    bias: TensorLike | None = None,
    eps: float = 1e-5,
    axis: int = -1,
    *,
    name: str | None = None,
) -> Tensor:
    """Normalise over axes [axis, rank) (the last axis by default), then scale and shift."""
    return record("layer_norm", [x, weight, bias], {"axis": axis, "epsilon": eps}, name=name)


def rms_norm(
    x: TensorLike,
    weight: TensorLike | None = None,
    eps: float = 1e-5,
    axis: int = -1,
    *,
    name: str | None = None,
) -> Tensor:
    return record("rms_norm", [x, weight], {"axis": axis, "epsilon": eps}, name=name)


def batch_norm(
    x: TensorLike,
    mean: TensorLike,
    var: TensorLike,
    weight: TensorLike | None = None,
    bias: TensorLike | None = None,
    eps: float = 1e-5,
    *,
    name: str | None = None,
) -> Tensor:
    """Inference-mode batch norm over axis 1 with running statistics."""
    x = as_tensor(x)
    c = x.shape[1]
    weight = np.ones(c, np.float32) if weight is None else weight
    bias = np.zeros(c, np.float32) if bias is None else bias
    return record("batch_norm", [x, weight, bias, mean, var], {"epsilon": eps}, name=name)


def instance_norm(
    x: TensorLike,
    weight: TensorLike,
    bias: TensorLike,
    eps: float = 1e-5,
    *,
    name: str | None = None,
) -> Tensor:
    return record("instance_norm", [x, weight, bias], {"epsilon": eps}, name=name)


def group_norm(
    x: TensorLike,
    num_groups: int,
    weight: TensorLike,
    bias: TensorLike,
    eps: float = 1e-5,
    *,
    name: str | None = None,
) -> Tensor:
    return record(
        "group_norm", [x, weight, bias], {"num_groups": num_groups, "epsilon": eps}, name=name
    )


def lrn(
    x: TensorLike,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    *,
    name: str | None = None,
) -> Tensor:
    """Local response norm across channels (ONNX LRN; equals torch's for odd sizes)."""
    attrs = {"size": size, "alpha": alpha, "beta": beta, "bias": k}
    return record("lrn", [x], attrs, name=name)
