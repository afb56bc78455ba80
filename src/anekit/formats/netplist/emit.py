"""IR op -> netplist unit(s): one emitter per op, shared by engine-layer main ops and epilogue steps.

An emitter receives the op's attributes and its operands (live tensors by netplist name,
constants by value) and appends units to a `Chain`; the chain's last unit becomes the
layer's output. Emitters mirror the readers in units.py, so reading back what they write
gives the same ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.formats.netplist.chain import Chain, Operand, Unsupported, dtype_name, half_bits
from anekit.formats.netplist.vocab import (
    ELEMENTWISE_NAMES,
    NEURON_NAMES,
    POOL_NAMES,
    axis_dimension,
)
from anekit.ir import TensorType
from anekit.ir.dtypes import dtype_of_array
from anekit.ir.ops.shape import slice_bounds
from anekit.ir.registry import InferError, infer_types


def _infer(op: str, operands: Sequence[Operand | None], attrs: Mapping[str, Any]) -> TensorType:
    try:
        _, (out,) = infer_types(op, [o.type if o else None for o in operands], attrs)
    except InferError as exc:
        raise Unsupported(f"{op}: {exc}") from None
    return out


def _live(op: str, operands: Sequence[Operand]) -> None:
    if any(o.name is None for o in operands):
        raise Unsupported(f"{op} with a constant operand has no netplist form")


def _window_params(
    rank: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    what: str,
) -> dict[str, Any]:
    sp = rank - 2
    strides = tuple(strides) or (1,) * sp
    pads = tuple(pads) or (0,) * (2 * sp)
    if any(d != 1 for d in tuple(dilations)):
        raise Unsupported(f"{what} dilations {list(dilations)} have no netplist parameter")
    if sp == 3 and (strides[0] != 1 or pads[0] or pads[3]):
        raise Unsupported(f"{what} depth strides and pads have no netplist parameter")
    params: dict[str, Any] = {
        "KernelHeight": int(kernel[-2]),
        "KernelWidth": int(kernel[-1]),
        "Step": [int(strides[-1]), int(strides[-2])],
        "PadTop": int(pads[sp - 2]),
        "PadLeft": int(pads[sp - 1]),
        "PadBot": int(pads[2 * sp - 2]),
        "PadRight": int(pads[2 * sp - 1]),
    }
    if sp == 3:
        params["KernelDepth"] = int(kernel[0])
    return params


# ---- gain/offset --------------------------------------------------------------------------


def _per_channel(const: np.ndarray, x: TensorType, role: str) -> np.ndarray:
    """A GOC operand as C values (or one scalar); anything else is not a gain/offset."""
    if const.size == 1:
        return const.reshape(())
    shape = (1,) * (x.rank - const.ndim) + const.shape
    if (
        const.ndim > x.rank
        or any(d != 1 for i, d in enumerate(shape) if i != 1)
        or shape[1] != x.shape[1]
    ):
        raise Unsupported(f"a GOC {role} of shape {list(const.shape)} is not per-channel")
    return const.reshape(-1)


def goc_unit(
    chain: Chain, x: Operand, gain: np.ndarray | None, offset: np.ndarray | None
) -> Operand:
    params: dict[str, Any] = {}
    group: dict[str, Any] = {}
    for role, prefix, const in (("gain", "Scale", gain), ("offset", "Bias", offset)):
        if const is None:
            continue
        values = _per_channel(np.asarray(const), x.type, role)
        if values.ndim == 0 and values.dtype == np.float16:
            params[f"{prefix}Scalar"] = half_bits(float(values))
            continue
        if values.ndim == 0:  # a wider scalar keeps its precision as a per-channel vector
            values = np.full(x.type.shape[1], values, dtype=values.dtype)
        index, offset_bytes = chain.weights.add(values)
        group.update(
            {
                f"{prefix}Count": int(values.size),
                f"{prefix}Index": index,
                f"{prefix}Offset": offset_bytes,
                f"{prefix}Type": dtype_name(dtype_of_array(values)),
            }
        )
    if group:
        params["BiasScaleGroupData"] = group
    return chain.unit("GOC", [x], params, x.type)


def _goc(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    x, gain, offset = (list(ops) + [None, None])[:3]
    for role, o in (("gain", gain), ("offset", offset)):
        if o is not None and o.const is None:
            raise Unsupported(f"a computed GOC {role} has no netplist form (it must be a constant)")
    return goc_unit(chain, x, gain.const if gain else None, offset.const if offset else None)


# ---- emitters -----------------------------------------------------------------------------


def _conv(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    x, w = ops[0], ops[1]
    bias = ops[2] if len(ops) > 2 else None
    if w.const is None or (bias is not None and bias.const is None):
        raise Unsupported("conv with computed weights has no netplist form")
    if x.type.rank != chain.rank:
        raise Unsupported(f"conv of a rank-{x.type.rank} tensor in a rank-{chain.rank} network")
    out = _infer("conv", [x, w], attrs)
    params = _window_params(
        chain.rank, w.const.shape[2:], attrs["strides"], attrs["pads"], attrs["dilations"], "conv"
    )
    index, offset = chain.weights.add(w.const)
    params.update(
        {
            "KernelIndex": index,
            "KernelOffset": offset,
            "KernelType": dtype_name(dtype_of_array(w.const)),
            "Type": "Conv",
        }
    )
    if attrs["group"] != 1:
        params["NumGroups"] = int(attrs["group"])
    y = chain.unit("Conv", [x], params, out, channels=True)
    if bias is not None:  # as Apple's own converter does: a GOC unit after the Conv
        per_channel = bias.const.astype(out.dtype.numpy).reshape((-1,) + (1,) * (out.rank - 2))
        y = goc_unit(chain, y, None, per_channel)
    return y


def _broadcast_to(
    chain: Chain, x: Operand, shape: tuple[int, ...], *, always: bool = False
) -> Operand:
    """A Broadcast unit to `shape` (none when the shape is already right, unless `always`)."""
    if x.type.shape == shape and not always:
        return x
    if x.type.rank != len(shape):
        raise Unsupported(
            f"broadcasting rank {x.type.rank} to rank {len(shape)} has no netplist form"
        )
    info = []
    for axis, (have, want) in enumerate(zip(x.type.shape, shape, strict=True)):
        if have != want:
            if have != 1:
                raise Unsupported(f"cannot broadcast {list(x.type.shape)} to {list(shape)}")
            info.append({"Dimension": axis_dimension(axis, chain.rank), "Size": int(want)})
    if not info:  # a no-op broadcast still needs one entry
        info.append({"Dimension": axis_dimension(1, chain.rank), "Size": int(shape[1])})
    return chain.unit("Broadcast", [x], {"BroadcastInfo": info}, TensorType(shape, x.type.dtype))


def elementwise(
    chain: Chain, op: str, ops: Sequence[Operand | None], scale: float = 1.0
) -> Operand:
    """A ScaledElementWise unit (Scale * (a op b)); operands are broadcast by Broadcast units."""
    a, b = ops
    out = _infer(op, [a, b], {})
    if a.const is not None or b.const is not None:
        if scale != 1.0:
            raise Unsupported(f"a scaled {op} with a constant operand has no netplist form")
        return _binary_with_constant(chain, op, a, b)
    a, b = _broadcast_to(chain, a, out.shape), _broadcast_to(chain, b, out.shape)
    params = {"Scale": half_bits(scale), "Type": ELEMENTWISE_NAMES[op]}
    return chain.unit("ScaledElementWise", [a, b], params, out)


def binary(op: str) -> Callable[..., Operand]:
    def emit(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
        return elementwise(chain, op, ops)

    return emit


def _binary_with_constant(chain: Chain, op: str, a: Operand, b: Operand) -> Operand:
    """x + c, x - c, c - x and x * c with a per-channel c are gain/offset units."""
    x, c, const_first = (b, a.const, True) if a.const is not None else (a, b.const, False)
    if x.const is not None or op not in ("add", "sub", "mul"):
        raise Unsupported(f"{op} with a constant operand has no netplist form")
    if np.broadcast_shapes(x.type.shape, c.shape) != x.type.shape:
        raise Unsupported(f"{op} broadcasts its input {list(x.type.shape)} to a larger shape")
    c = np.asarray(c, dtype=x.type.dtype.numpy)
    if op == "add":
        return goc_unit(chain, x, None, c)
    if op == "mul":
        return goc_unit(chain, x, c, None)
    if const_first:  # c - x
        return goc_unit(chain, x, np.array(-1, dtype=c.dtype), c)
    return goc_unit(chain, x, None, -c)


def _neuron(op: str) -> Callable[..., Operand]:
    def emit(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
        (x,) = ops
        return chain.unit("Neuron", [x], {"Type": NEURON_NAMES[op]}, _infer(op, [x], attrs))

    return emit


def _pow(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    base, x = ops
    if (
        base.const is None
        or base.const.size != 1
        or float(base.const.reshape(())) != 2.0
        or x.name is None
    ):
        raise Unsupported("pow is only written as Exp2 (2 ** x)")
    out = _infer("pow", [base, x], attrs)
    if out.shape != x.type.shape:
        raise Unsupported("pow broadcasts its input to a larger shape")
    return chain.unit("Neuron", [x], {"Type": "Exp2"}, out)


def _concat(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    _live("concat", ops)
    out = _infer("concat", ops, attrs)
    axis = attrs["axis"] % out.rank
    return chain.unit(
        "Concat", ops, {"Dimension": axis_dimension(axis, chain.rank)}, out, channels=True
    )


def _reshape(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    out = _infer("reshape", ops, attrs)
    if out.rank != chain.rank:
        raise Unsupported(f"a reshape to rank {out.rank} in a rank-{chain.rank} network")
    full = out.shape if out.rank == 5 else (out.shape[0], out.shape[1], 1, *out.shape[2:])
    names = ("Batch", "Channel", "Depth", "Height", "Width")
    return chain.unit(
        "Reshape", ops, {f"Reshaped{n}": int(d) for n, d in zip(names, full, strict=True)}, out
    )


def _slice(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    (x,) = ops
    out = _infer("slice", [x], attrs)
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs["axes"] or tuple(range(len(starts)))
    steps = attrs["steps"] or (1,) * len(starts)
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        axis %= x.type.rank
        begin, _, length = slice_bounds(x.type.shape[axis], start, end, step)
        if step != 1 or length == 0:
            raise Unsupported("only unit-step, non-empty slices are InputView units")
        shape = list(x.type.shape)
        shape[axis] = length
        params = {
            "Dimension": axis_dimension(axis, chain.rank),
            "Offset": int(begin),
            "Size": int(length),
        }
        x = chain.unit("InputView", [x], params, TensorType(tuple(shape), x.type.dtype))
    if x.type != out or x.name == ops[0].name:
        raise Unsupported("this slice has no netplist form")
    return x


def _expand(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    (x,) = ops
    out = _infer("expand", [x], attrs)
    return _broadcast_to(chain, x, out.shape, always=True)


def _pool(op: str) -> Callable[..., Operand]:
    def emit(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
        (x,) = ops
        padded_average = attrs.get("count_include_pad") and any(attrs["pads"])
        if attrs["ceil_mode"] or attrs.get("return_indices") or padded_average:
            raise Unsupported(
                f"{op} with ceil mode, indices or padded averages has no netplist form"
            )
        if chain.rank == 5 and attrs["kernel"][0] != 1:
            raise Unsupported("pooling over depth has no netplist form")
        out = _infer(op, [x], attrs)
        params = _window_params(
            chain.rank, attrs["kernel"], attrs["strides"], attrs["pads"], attrs["dilations"], op
        )
        params.pop("KernelDepth", None)
        params["Type"] = POOL_NAMES[op]
        return chain.unit("Pooling", [x], params, out)

    return emit


def _softmax(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    (x,) = ops
    out = _infer("softmax", [x], attrs)
    axis = attrs["axis"] % x.type.rank
    return chain.unit("Softmax", [x], {"Dimension": axis_dimension(axis, chain.rank)}, out)


def _transpose(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    (x,) = ops
    out = _infer("transpose", [x], attrs)
    perm = [axis_dimension(p, chain.rank) for p in attrs["perm"]]
    return chain.unit("Transpose", [x], {"Permutation": perm}, out)


def _matmul(chain: Chain, attrs: Mapping[str, Any], ops: Sequence[Operand | None]) -> Operand:
    a, b = ops
    _live("matmul", ops)
    if (
        chain.rank != 4
        or a.type.rank != 4
        or b.type.rank != 4
        or a.type.shape[:2] != b.type.shape[:2]
    ):
        raise Unsupported("MatrixMultiplication takes two NCHW tensors with equal N and C")
    return chain.unit("MatrixMultiplication", [a, b], {}, _infer("matmul", ops, attrs))


EMITTERS: Mapping[str, Callable[..., Operand]] = MappingProxyType(
    {
        "conv": _conv,
        "goc": _goc,
        **{op: binary(op) for op in ELEMENTWISE_NAMES},
        **{op: _neuron(op) for op in NEURON_NAMES if op != "pow"},
        "pow": _pow,
        "concat": _concat,
        "reshape": _reshape,
        "slice": _slice,
        "expand": _expand,
        **{op: _pool(op) for op in POOL_NAMES},
        "softmax": _softmax,
        "transpose": _transpose,
        "matmul": _matmul,
    }
)
