"""Functional ops of the builder API (torch-like signatures over the IR ops)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.builder.tensor import Tensor, as_tensor, constant, record
from anekit.ir.dtypes import DType, to_dtype

__all__ = [
    "abs",
    "add",
    "argmax",
    "attention",
    "batch_norm",
    "cast",
    "clamp",
    "clip",
    "concat",
    "conv1d",
    "conv2d",
    "cos",
    "div",
    "einsum",
    "elu",
    "embedding",
    "equal",
    "erf",
    "exp",
    "expand",
    "flatten",
    "gather",
    "gelu",
    "greater",
    "group_norm",
    "hard_sigmoid",
    "hard_swish",
    "identity",
    "instance_norm",
    "layer_norm",
    "leaky_relu",
    "less",
    "linear",
    "log",
    "log_softmax",
    "matmul",
    "maximum",
    "minimum",
    "mul",
    "neg",
    "pad",
    "permute",
    "pow",
    "reciprocal",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_sum",
    "relu",
    "reshape",
    "rms_norm",
    "rsqrt",
    "sigmoid",
    "silu",
    "sin",
    "slice",
    "softmax",
    "softplus",
    "split",
    "sqrt",
    "squeeze",
    "sub",
    "tanh",
    "tile",
    "transpose",
    "unsqueeze",
    "where",
    "clamp",
    "permute",
    "avg_pool1d",
    "avg_pool2d",
    "conv_transpose2d",
    "depth_to_space",
    "global_avg_pool",
    "global_max_pool",
    "interpolate",
    "lrn",
    "max_pool1d",
    "max_pool2d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "resize",
    "upsample",
    "cumsum",
    "dequantize_linear",
    "gather_nd",
    "gru",
    "lstm",
    "one_hot",
    "quantize_linear",
    "rnn",
    "scatter_elements",
    "scatter_nd",
    "topk",
]

TensorLike = Any  # a Tensor, a numpy array or a Python number


def _pair(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise ModelError(f"{what} needs {n} values, got {list(v)}")
    return v


# --- elementwise -----------------------------------------------------------------------


def add(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("add", [a, b], name=name)


def sub(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("sub", [a, b], name=name)


def mul(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("mul", [a, b], name=name)


def div(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("div", [a, b], name=name)


def pow(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:  # noqa: A001
    return record("pow", [a, b], name=name)


def maximum(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("maximum", [a, b], name=name)


def minimum(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("minimum", [a, b], name=name)


def _unary(op: str):
    def fn(x: TensorLike, *, name: str | None = None) -> Tensor:
        return record(op, [x], name=name)

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op}."
    return fn


neg = _unary("neg")
abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
reciprocal = _unary("reciprocal")
erf = _unary("erf")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
silu = _unary("silu")
softplus = _unary("softplus")
hard_swish = _unary("hard_swish")
sin = _unary("sin")
cos = _unary("cos")
identity = _unary("identity")


def rsqrt(x: TensorLike, *, name: str | None = None) -> Tensor:
    return record("reciprocal", [record("sqrt", [x])], name=name)


def leaky_relu(x: TensorLike, alpha: float = 0.01, *, name: str | None = None) -> Tensor:
    return record("leaky_relu", [x], {"alpha": alpha}, name=name)


def elu(x: TensorLike, alpha: float = 1.0, *, name: str | None = None) -> Tensor:
    return record("elu", [x], {"alpha": alpha}, name=name)


def hard_sigmoid(
    x: TensorLike, alpha: float = 1 / 6, beta: float = 0.5, *, name: str | None = None
) -> Tensor:
    return record("hard_sigmoid", [x], {"alpha": alpha, "beta": beta}, name=name)


def gelu(x: TensorLike, approximate: str = "none", *, name: str | None = None) -> Tensor:
    """GELU, exact ('none') or the tanh approximation ('tanh')."""
    return record("gelu", [x], {"approximate": approximate}, name=name)


def clip(
    x: TensorLike, min: float | None = None, max: float | None = None, *, name: str | None = None
) -> Tensor:  # noqa: A002
    return record("clip", [x], {"min": min, "max": max}, name=name)


clamp = clip


def cast(x: TensorLike, dtype: str | DType, *, name: str | None = None) -> Tensor:
    return record("cast", [x], {"to": to_dtype(dtype)}, name=name)


def where(cond: TensorLike, a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return record("where", [cond, as_tensor(a, like), as_tensor(b, like)], name=name)


def equal(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("equal", [a, b], name=name)


def less(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("less", [a, b], name=name)


def greater(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("greater", [a, b], name=name)


# --- softmax and normalisation ----------------------------------------------------------


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


# --- linear algebra and convolution -------------------------------------------------------


def matmul(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("matmul", [a, b], name=name)


def linear(
    x: TensorLike, weight: TensorLike, bias: TensorLike | None = None, *, name: str | None = None
) -> Tensor:
    """x @ weight^T + bias, with weight [out_features, in_features] as in torch.nn.Linear."""
    if isinstance(weight, Tensor):
        wt = record("transpose", [weight], {"perm": (1, 0)})
    else:
        wt = constant(np.ascontiguousarray(np.asarray(weight, dtype=np.float32).T))
    y = record("matmul", [x, wt], name=None if bias is not None else name)
    return y if bias is None else record("add", [y, bias], name=name)


def einsum(equation: str, *operands: TensorLike, name: str | None = None) -> Tensor:
    return record("einsum", list(operands), {"equation": equation}, name=name)


def attention(
    q: TensorLike,
    k: TensorLike,
    v: TensorLike,
    mask: TensorLike | None = None,
    *,
    scale: float | None = None,
    causal: bool = False,
    name: str | None = None,
) -> Tensor:
    """Scaled dot-product attention softmax(q k^T * scale + mask) v over the last two axes."""
    return record("attention", [q, k, v, mask], {"scale": scale, "causal": causal}, name=name)


def _conv(x, weight, bias, stride, padding, dilation, groups, n, name):
    weight = as_tensor(weight)
    kernel = weight.shape[2:]
    strides = _pair(stride, n, "stride")
    dil = _pair(dilation, n, "dilation")
    if padding == "valid":
        pads = (0,) * (2 * n)
    elif padding == "same":
        total = [(k - 1) * d for k, d in zip(kernel, dil, strict=True)]
        pads = tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    else:
        p = _pair(padding, n, "padding")
        pads = p + p
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": groups}
    return record("conv", [x, weight, bias], attrs, name=name)


def conv2d(
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
    """2-d convolution as torch.nn.functional.conv2d (padding may be 'same' or 'valid')."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, name)


def conv1d(
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
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, name)


# --- shapes -------------------------------------------------------------------------------


def _resolve_shape(x: Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ModelError(f"reshape target {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.type.numel % known:
            raise ModelError(f"cannot reshape {list(x.shape)} to {shape}")
        shape[shape.index(-1)] = x.type.numel // known
    return tuple(shape)


def reshape(x: TensorLike, shape: Sequence[int], *, name: str | None = None) -> Tensor:
    """Reshape to ``shape`` (one -1 allowed)."""
    x = as_tensor(x)
    return record("reshape", [x], {"shape": _resolve_shape(x, shape)}, name=name)


def flatten(x: TensorLike, start_dim: int = 1, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    start = start_dim % max(x.rank, 1)
    return reshape(x, x.shape[:start] + (-1,), name=name)


def squeeze(x: TensorLike, axes: Sequence[int] | None = None, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    axes_n = (
        {a % x.rank for a in axes}
        if axes is not None
        else {i for i, d in enumerate(x.shape) if d == 1}
    )
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes_n], name=name)


def unsqueeze(x: TensorLike, axes: Sequence[int] | int, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    out_rank = x.rank + len(axes)
    pos = {a % out_rank for a in axes}
    it = iter(x.shape)
    return reshape(x, [1 if i in pos else next(it) for i in range(out_rank)], name=name)


def transpose(
    x: TensorLike, perm: Sequence[int] | None = None, *, name: str | None = None
) -> Tensor:
    """Permute axes (reverse them when ``perm`` is None)."""
    x = as_tensor(x)
    perm = tuple(reversed(range(x.rank))) if perm is None else tuple(p % x.rank for p in perm)
    return record("transpose", [x], {"perm": perm}, name=name)


permute = transpose


def concat(xs: Sequence[TensorLike], axis: int = 0, *, name: str | None = None) -> Tensor:
    return record("concat", list(xs), {"axis": axis}, name=name)


def split(
    x: TensorLike, sizes: Sequence[int], axis: int = 0, *, name: str | None = None
) -> tuple[Tensor, ...]:
    out = record("split", [x], {"axis": axis, "sizes": tuple(sizes)}, name=name)
    return out if isinstance(out, tuple) else (out,)


def slice(  # noqa: A001
    x: TensorLike,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"starts": starts, "ends": ends, "axes": axes or (), "steps": steps or ()}
    return record("slice", [x], attrs, name=name)


def gather(x: TensorLike, indices: TensorLike, axis: int = 0, *, name: str | None = None) -> Tensor:
    if not isinstance(indices, Tensor):
        indices = constant(np.asarray(indices, dtype=np.int64))
    return record("gather", [x, indices], {"axis": axis}, name=name)


def embedding(ids: TensorLike, table: TensorLike, *, name: str | None = None) -> Tensor:
    """Rows of ``table`` [vocab, dim] selected by integer ``ids``."""
    return gather(table, ids, axis=0, name=name)


def expand(x: TensorLike, shape: Sequence[int], *, name: str | None = None) -> Tensor:
    return record("expand", [x], {"shape": tuple(shape)}, name=name)


def tile(x: TensorLike, repeats: Sequence[int], *, name: str | None = None) -> Tensor:
    return record("tile", [x], {"repeats": tuple(repeats)}, name=name)


def pad(
    x: TensorLike,
    pads: Sequence[int],
    mode: str = "constant",
    value: float = 0.0,
    *,
    name: str | None = None,
) -> Tensor:
    """Pad with ONNX-style ``pads`` (all begins, then all ends)."""
    return record("pad", [x], {"pads": tuple(pads), "mode": mode, "value": value}, name=name)


# --- reductions ---------------------------------------------------------------------------


def _reduce(op: str):
    def fn(
        x: TensorLike,
        axes: Sequence[int] | int | None = None,
        keepdims: bool = True,
        *,
        name: str | None = None,
    ) -> Tensor:
        axes_t = () if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
        return record(op, [x], {"axes": axes_t, "keepdims": keepdims}, name=name)

    fn.__name__ = op
    fn.__doc__ = f"{op} over ``axes`` (all axes when None)."
    return fn


reduce_sum = _reduce("reduce_sum")
reduce_mean = _reduce("reduce_mean")
reduce_max = _reduce("reduce_max")
reduce_min = _reduce("reduce_min")


def argmax(
    x: TensorLike, axis: int = -1, keepdims: bool = False, *, name: str | None = None
) -> Tensor:
    return record("argmax", [x], {"axis": axis, "keepdims": keepdims}, name=name)


# --- pooling, resampling and transposed convolution ---------------------------------------


def _window(x, kernel_size, stride, padding, dilation, n):
    kernel = _pair(kernel_size, n, "kernel_size")
    strides = kernel if stride is None else _pair(stride, n, "stride")
    p = _pair(padding, n, "padding")
    return {
        "kernel": kernel,
        "strides": strides,
        "pads": p + p,
        "dilations": _pair(dilation, n, "dilation"),
    }


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
    attrs = _window(x, kernel_size, stride, padding, dilation, 2)
    attrs.update(ceil_mode=ceil_mode, return_indices=return_indices)
    return record("max_pool", [x], attrs, name=name)


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
    attrs = _window(x, kernel_size, stride, padding, dilation, 1)
    return record("max_pool", [x], {**attrs, "ceil_mode": ceil_mode}, name=name)


def avg_pool2d(
    x: TensorLike,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    name: str | None = None,
) -> Tensor:
    """2-d average pooling as torch.nn.functional.avg_pool2d (pads counted by default)."""
    attrs = _window(x, kernel_size, stride, padding, 1, 2)
    attrs.update(ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return record("avg_pool", [x], attrs, name=name)


def avg_pool1d(
    x: TensorLike,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: int | Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    name: str | None = None,
) -> Tensor:
    attrs = _window(x, kernel_size, stride, padding, 1, 1)
    attrs.update(ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return record("avg_pool", [x], attrs, name=name)


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
    p = _pair(padding, 2, "padding")
    attrs = {
        "strides": _pair(stride, 2, "stride"),
        "pads": p + p,
        "dilations": _pair(dilation, 2, "dilation"),
        "output_padding": _pair(output_padding, 2, "output_padding"),
        "group": groups,
    }
    return record("conv_transpose", [x, weight, bias], attrs, name=name)


def resize(
    x: TensorLike,
    sizes: Sequence[int],
    *,
    scales: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    antialias: bool = False,
    name: str | None = None,
) -> Tensor:
    """Resample to the full output shape ``sizes`` with ONNX Resize semantics.

    ``scales`` (per axis) maps coordinates; it defaults to sizes / input shape.
    """
    shape = as_tensor(x).shape
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != len(shape):
        raise ModelError(f"sizes {list(sizes)} must give every axis of the {len(shape)}-d input")
    if scales is None:
        scales = tuple(o / i if i else 1.0 for o, i in zip(sizes, shape, strict=True))
    attrs = {
        "sizes": sizes,
        "scales": tuple(scales),
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "antialias": antialias,
    }
    return record("resize", [x], attrs, name=name)


_INTERPOLATE_MODES = {
    # torch mode -> (IR mode, nearest rounding, coordinates without align_corners)
    "nearest": ("nearest", "floor", "asymmetric"),
    "nearest-exact": ("nearest", "round_prefer_ceil", "half_pixel"),
    "linear": ("linear", "floor", "pytorch_half_pixel"),
    "bilinear": ("linear", "floor", "pytorch_half_pixel"),
    "trilinear": ("linear", "floor", "pytorch_half_pixel"),
    "bicubic": ("cubic", "floor", "pytorch_half_pixel"),
}


def interpolate(
    x: TensorLike,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    *,
    name: str | None = None,
) -> Tensor:
    """Resample the spatial axes as torch.nn.functional.interpolate (N, C, spatial...)."""
    shape = as_tensor(x).shape
    sp = len(shape) - 2
    if mode not in _INTERPOLATE_MODES:
        raise ModelError(
            f"unknown interpolate mode '{mode}'; use one of {list(_INTERPOLATE_MODES)}"
        )
    if (size is None) == (scale_factor is None):
        raise ModelError("interpolate takes exactly one of size and scale_factor")
    if size is not None:
        out = _pair(size, sp, "size")
        factors = tuple(o / i for o, i in zip(out, shape[2:], strict=True))
    else:
        if isinstance(scale_factor, int | float):
            factors = (float(scale_factor),) * sp
        else:
            factors = tuple(float(s) for s in scale_factor)
        if len(factors) != sp:
            raise ModelError(f"scale_factor needs {sp} values, got {list(factors)}")
        out = tuple(int(np.floor(i * f)) for i, f in zip(shape[2:], factors, strict=True))
    ir_mode, rounding, coords = _INTERPOLATE_MODES[mode]
    if align_corners:
        if ir_mode == "nearest":
            raise ModelError("align_corners only applies to the linear and cubic modes")
        coords = "align_corners"
    return resize(
        x,
        shape[:2] + out,
        scales=(1.0, 1.0) + factors,
        mode=ir_mode,
        coordinate_transformation_mode=coords,
        nearest_mode=rounding,
        name=name,
    )


def upsample(
    x: TensorLike, scale_factor: float | Sequence[float], mode: str = "nearest", *, name=None
) -> Tensor:
    """interpolate(x, scale_factor=..., mode=...)."""
    return interpolate(x, scale_factor=scale_factor, mode=mode, name=name)


def depth_to_space(
    x: TensorLike, block_size: int, mode: str = "DCR", *, name: str | None = None
) -> Tensor:
    """Channel blocks to b x b spatial tiles (ONNX DepthToSpace)."""
    return record("depth_to_space", [x], {"block_size": block_size, "mode": mode}, name=name)


def pixel_shuffle(x: TensorLike, upscale_factor: int, *, name: str | None = None) -> Tensor:
    """torch.nn.functional.pixel_shuffle (depth_to_space in CRD order)."""
    return depth_to_space(x, upscale_factor, "CRD", name=name)


def pixel_unshuffle(x: TensorLike, downscale_factor: int, *, name: str | None = None) -> Tensor:
    """torch.nn.functional.pixel_unshuffle (space_to_depth in CRD order)."""
    attrs = {"block_size": downscale_factor, "mode": "CRD"}
    return record("space_to_depth", [x], attrs, name=name)


# --- recurrent layers, ordering, indexing and quantization ---------------------------------


def _recurrent(op, x, w, r, bias, states, sequence_lens, direction, batch_first, name, **extra):
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


def topk(
    x: TensorLike, k: int, axis: int = -1, largest: bool = True, *, name: str | None = None
) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) of the k largest (or smallest) entries, sorted."""
    return record("topk", [x], {"k": k, "axis": axis, "largest": largest}, name=name)


def cumsum(
    x: TensorLike,
    axis: int,
    exclusive: bool = False,
    reverse: bool = False,
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    return record("cumsum", [x], attrs, name=name)


def one_hot(
    indices: TensorLike,
    depth: int,
    axis: int = -1,
    values: Sequence[float] = (0.0, 1.0),
    dtype: str | DType = "fp32",
    *,
    name: str | None = None,
) -> Tensor:
    """values[1] at each index along a new axis of size depth, values[0] elsewhere."""
    table = constant(np.asarray(values, dtype=to_dtype(dtype).numpy))
    return record("one_hot", [indices, table], {"depth": depth, "axis": axis}, name=name)


def gather_nd(
    x: TensorLike, indices: TensorLike, batch_dims: int = 0, *, name: str | None = None
) -> Tensor:
    return record("gather_nd", [x, indices], {"batch_dims": batch_dims}, name=name)


def scatter_nd(
    x: TensorLike,
    indices: TensorLike,
    updates: TensorLike,
    reduction: str = "none",
    *,
    name: str | None = None,
) -> Tensor:
    return record("scatter_nd", [x, indices, updates], {"reduction": reduction}, name=name)


def scatter_elements(
    x: TensorLike,
    indices: TensorLike,
    updates: TensorLike,
    axis: int = 0,
    reduction: str = "none",
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"axis": axis, "reduction": reduction}
    return record("scatter_elements", [x, indices, updates], attrs, name=name)


def quantize_linear(
    x: TensorLike,
    scale: TensorLike,
    zero_point: TensorLike | None = None,
    axis: int = 1,
    dtype: str | DType = "uint8",
    *,
    name: str | None = None,
) -> Tensor:
    """saturate(round(x / scale) + zero_point) as int8/uint8; per tensor or per ``axis``."""
    attrs = {"axis": axis, "dtype": dtype}
    if zero_point is not None and not isinstance(zero_point, Tensor):
        zero_point = constant(np.asarray(zero_point), dtype=dtype)
    return record("quantize_linear", [x, _param(scale), zero_point], attrs, name=name)


def _param(value: TensorLike) -> Tensor:
    """A scale or zero point as a tensor of its own dtype (not the data's)."""
    return value if isinstance(value, Tensor) else constant(np.asarray(value))


def dequantize_linear(
    x: TensorLike,
    scale: TensorLike,
    zero_point: TensorLike | None = None,
    axis: int = 1,
    *,
    name: str | None = None,
) -> Tensor:
    """(x - zero_point) * scale; per tensor or per ``axis``."""
    zp = None if zero_point is None else _param(zero_point)
    return record("dequantize_linear", [x, _param(scale), zp], {"axis": axis}, name=name)
