"""Lowerings of quantize_linear, dequantize_linear (activation Q/DQ) and reverse_sequence.

Q/DQ take two paths, chosen by the target's MIL dialect:

- iOS 17 and later: MIL ``quantize`` / ``dequantize`` when their inputs fit Apple's definition
  (const scale and zero point, per tensor or per axis, int8/uint8 data);
- otherwise an exact decomposition into plain MIL ops with the IR kernels' numerics:
  ``clip(round(x / scale) + zero_point, lo, hi)`` (MIL ``round`` is half to even, as ONNX) and
  ``(x - zero_point) * scale``.

int8/uint8 on iOS 15/16: the iOS 15/16 definitions of cast, add, sub, clip, identity, ... take
no int8 or uint8 tensors (coremltools' type domains: fp16, fp32, int32, bool), so the
program's builder carries those values as int32 there (``FunctionBuilder.dtype_of``): the same
integer values, exactly, and the decomposition below works on them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.ir.ops.quant import expand_param

LowerFn = Callable[[Lowering], object]


def _per_tensor(lo: Lowering, i: int) -> bool:
    a = lo.need(i)
    return int(np.prod(a.shape)) == 1 and a.rank <= 1


def _param(lo: Lowering, i: int, key: str, dtype: str) -> str | None:
    """Operand ``i`` (scale or zero point) in ``dtype``, broadcastable against x; None if absent."""
    a = lo.arg(i)
    if a is None:
        return None
    x = lo.need(0)
    axis, block = lo.attrs["axis"] % max(x.rank, 1), lo.attrs["block_size"]
    if a.const is not None:
        value = expand_param(np.asarray(a.const), x.shape, axis, block)
        if dtype in ("fp16", "fp32"):
            value = value.astype(np.float32)
            return lo.f(key, float(value)) if value.ndim == 0 else lo.t(value, key)
        value = value.astype(np.int64)
        if value.ndim == 0:
            return lo.p(key, np.int32(value), dtype)
        return lo.t(value.astype(np.int32), key)
    if block:
        raise lo.error(f"a computed {key} of blocked quantization has no MIL form here")
    var = lo.var(a, dtype)  # a computed parameter, cast when its type differs
    if _per_tensor(lo, i):
        return var
    shape = [1] * x.rank
    shape[axis] = x.shape[axis]
    return lo.tmp("reshape", {"x": var, "shape": lo.p(f"{key}_shape", shape)}, shape, dtype, key)


def _native(lo: Lowering) -> bool:
    """Whether MIL quantize/dequantize take this call: iOS 17+, const per-tensor or per-axis
    parameters, int8/uint8 data."""
    if lo.target.mil.opset_number < 17 or lo.attrs["block_size"]:
        return False
    return all(a is None or a.const is not None for a in lo.call.args[1:3])


def _axis_input(lo: Lowering) -> dict[str, str]:
    if _per_tensor(lo, 1):
        return {}
    return {"axis": lo.p("axis", np.int32(lo.attrs["axis"] % lo.need(0).rank))}


def _native_params(lo: Lowering, float_dtype: str, int_dtype: str) -> dict[str, str]:
    scale = np.asarray(lo.const_of(1), np.float32)
    inputs = {"scale": lo.f("scale", float(scale.reshape(()))) if _per_tensor(lo, 1)
              else lo.t(scale.reshape(-1), "scale")}  # fmt: skip
    zp = lo.const_of(2)
    if zp is not None:
        values = np.asarray(zp).astype(np.int64)
        inputs["zero_point"] = (
            lo.p("zero_point", values.reshape(()), int_dtype)
            if _per_tensor(lo, 2)
            else lo.t(values.reshape(-1).astype(int_dtype), "zero_point")
        )
    return inputs | _axis_input(lo)


def _quantize(lo: Lowering) -> str:
    x = lo.need(0)
    dtype = lo.out_dtype()  # int8 or uint8 (int32 carrying them on iOS 15/16)
    if _native(lo):
        inputs = {"input": lo.x(0), "output_dtype": lo.p("output_dtype", dtype, "string")}
        return lo.out("quantize", inputs | _native_params(lo, lo.fdtype, dtype))
    shape = x.shape
    value = lo.tmp("real_div", {"x": lo.x(0), "y": _param(lo, 1, "scale", lo.fdtype)}, shape)
    value = lo.tmp("round", {"x": value}, shape)
    zp = _param(lo, 2, "zero_point", lo.fdtype)
    if zp is not None:
        value = lo.tmp("add", {"x": value, "y": zp}, shape, hint="shifted")
    info = np.iinfo(lo.call.outputs[0][1].numpy)
    value = lo.tmp(
        "clip", {"x": value, "alpha": lo.f("lo", info.min), "beta": lo.f("hi", info.max)}, shape
    )
    return lo.out("cast", {"x": value, "dtype": lo.p("dtype", dtype, "string")})


def _dequantize(lo: Lowering) -> str:
    x = lo.need(0)
    shape, fdtype = x.shape, lo.fdtype
    if x.var is None:  # a constant: its integers as int32 (exact for int8, uint8 and int32)
        source = "int32"
        var = lo.t(np.asarray(x.const).astype(np.int32), "x")
    else:
        var, source = x.var, x.dtype
    if source in ("int8", "uint8") and _native(lo):
        inputs = {"input": var} | _native_params(lo, fdtype, source)
        return lo.out("dequantize", inputs)
    zp_present = lo.arg(2) is not None
    if source == "int32":
        # x - zero_point exactly in int32, as the IR kernel (int64), then to float
        if zp_present:
            var = lo.tmp("sub", {"x": var, "y": _param(lo, 2, "zero_point", "int32")}, shape,
                         "int32", "centred")  # fmt: skip
        value = lo.cast(var, shape, fdtype)
    else:
        # int8/uint8 values and their differences are exact in fp16 and fp32
        value = lo.cast(var, shape, fdtype)
        if zp_present:
            value = lo.tmp("sub", {"x": value, "y": _param(lo, 2, "zero_point", fdtype)}, shape,
                           hint="centred")  # fmt: skip
    return lo.out("mul", {"x": value, "y": _param(lo, 1, "scale", fdtype)})


def _reverse_sequence(lo: Lowering) -> str:
    x, lens = lo.need(0), lo.need(1)
    batch, time = lo.attrs["batch_axis"] % x.rank, lo.attrs["time_axis"] % x.rank
    steps = x.shape[time]
    # MIL wants lengths in [0, steps]; the IR kernel clips them there
    if lens.const is not None:
        lengths = lo.t(np.clip(np.asarray(lens.const, np.int64), 0, steps).astype(np.int32),
                       "lengths")  # fmt: skip
    else:
        lengths = lo.var(lens, "int32")
        lengths = lo.tmp("maximum", {"x": lengths, "y": lo.p("zero", np.int32(0), "int32")},
                         lens.shape, "int32", "lengths_low")  # fmt: skip
        lengths = lo.tmp("minimum", {"x": lengths, "y": lo.p("steps", np.int32(steps), "int32")},
                         lens.shape, "int32", "lengths")  # fmt: skip
    return lo.out(
        "reverse_sequence",
        {
            "x": lo.x(0),
            "lengths": lengths,
            "seq_axis": lo.p("seq_axis", np.int32(time)),
            "batch_axis": lo.p("batch_axis", np.int32(batch)),
        },
    )


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {
        "quantize_linear": _quantize,
        "dequantize_linear": _dequantize,
        "reverse_sequence": _reverse_sequence,
    }
)
