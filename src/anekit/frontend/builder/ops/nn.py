"""Convolution and pooling builder ops: conv1d/2d, conv_transpose2d, max/avg and global pools."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anekit.errors import ModelError
from anekit.frontend.builder.ops.common import TensorLike, named, per_axis
from anekit.frontend.builder.tensor import Tensor, as_tensor, record


def _conv_nd(n: int, doc: str) -> Callable[..., Tensor]:
    def conv(
        x: TensorLike,
        weight: TensorLike,
        bias: TensorLike | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        *,
        name: str | None = None,
    ) -> Tensor:
        weight = as_tensor(weight)
        kernel = weight.shape[2:]
        strides = per_axis(stride, n, "stride")
        dil = per_axis(dilation, n, "dilation")
        if padding == "valid":
            pads = (0,) * (2 * n)
        elif padding == "same":
            total = [(k - 1) * d for k, d in zip(kernel, dil, strict=True)]
            pads = tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
        else:
            p = per_axis(padding, n, "padding")
            pads = p + p
        attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": groups}
        return record("conv", [x, weight, bias], attrs, name=name)

    return named(conv, f"conv{n}d", doc)


conv1d = _conv_nd(
    1, "1-d convolution as torch.nn.functional.conv1d (padding may be 'same' or 'valid')."
)
conv2d = _conv_nd(
    2, "2-d convolution as torch.nn.functional.conv2d (padding may be 'same' or 'valid')."
)


def conv_transpose2d(
    x: TensorLike,
    weight: TensorLike,
    bias: TensorLike | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
    *,
    name: str | None = None,
) -> Tensor:
    """2-d transposed convolution as torch.nn.functional.conv_transpose2d.

    ``weight`` is [in_channels, out_channels / groups, kH, kW].
    """
    p = per_axis(padding, 2, "padding")
    attrs = {
        "strides": per_axis(stride, 2, "stride"),
        "pads": p + p,
        "dilations": per_axis(dilation, 2, "dilation"),
        "output_padding": per_axis(output_padding, 2, "output_padding"),
        "group": groups,
    }
    return record("conv_transpose", [x, weight, bias], attrs, name=name)


def _pool(
    op: str,
    x: TensorLike,
    n: int,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None,
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    name: str | None,
    **flags: Any,
) -> Tensor:
    """One ``op`` pool over ``n`` spatial axes; the stride defaults to the kernel."""
    kernel = per_axis(kernel_size, n, "kernel_size")
    strides = kernel if stride is None else per_axis(stride, n, "stride")
    p = per_axis(padding, n, "padding")
    attrs = {
        "kernel": kernel,
        "strides": strides,
        "pads": p + p,
        "dilations": per_axis(dilation, n, "dilation"),
        **flags,
    }
    return record(op, [x], attrs, name=name)


def max_pool2d(
    x: TensorLike,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    name: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """2-d max pooling as torch.nn.functional.max_pool2d (stride defaults to the kernel).

    With ``return_indices`` also returns int64 indices flattened over the whole input
    (ONNX's convention; torch's are per (n, c) plane).
    """
    return _pool(
        "max_pool", x, 2, kernel_size, stride, padding, dilation, name,
        ceil_mode=ceil_mode, return_indices=return_indices,
    )  # fmt: skip


def max_pool1d(
    x: TensorLike,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    *,
    name: str | None = None,
) -> Tensor:
    """1-d max pooling as torch.nn.functional.max_pool1d (stride defaults to the kernel)."""
    return _pool(
        "max_pool", x, 1, kernel_size, stride, padding, dilation, name, ceil_mode=ceil_mode
    )


def _avg_pool_nd(n: int, doc: str) -> Callable[..., Tensor]:
    def avg_pool(
        x: TensorLike,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        *,
        name: str | None = None,
    ) -> Tensor:
        return _pool(
            "avg_pool", x, n, kernel_size, stride, padding, 1, name,
            ceil_mode=ceil_mode, count_include_pad=count_include_pad,
        )  # fmt: skip

    return named(avg_pool, f"avg_pool{n}d", doc)


avg_pool1d = _avg_pool_nd(
    1, "1-d average pooling as torch.nn.functional.avg_pool1d (pads counted by default)."
)
avg_pool2d = _avg_pool_nd(
    2, "2-d average pooling as torch.nn.functional.avg_pool2d (pads counted by default)."
)


def _spatial_axes(x: TensorLike) -> tuple[int, ...]:
    rank = as_tensor(x).type.rank
    if rank < 3:
        raise ModelError(f"global pooling needs rank >= 3 (N, C, spatial...), got rank {rank}")
    return tuple(range(2, rank))


def global_avg_pool(x: TensorLike, *, name: str | None = None) -> Tensor:
    """Mean over every spatial axis, kept as size 1 (N, C, 1, ...)."""
    return record("reduce_mean", [x], {"axes": _spatial_axes(x), "keepdims": True}, name=name)


def global_max_pool(x: TensorLike, *, name: str | None = None) -> Tensor:
    """Max over every spatial axis, kept as size 1 (N, C, 1, ...)."""
    return record("reduce_max", [x], {"axes": _spatial_axes(x), "keepdims": True}, name=name)
