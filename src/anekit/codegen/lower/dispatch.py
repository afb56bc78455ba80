"""The lowering table (IR op -> function appending MIL operations) and engine-layer expansion.

An ``ane_layer`` is expanded back into plain MIL ops (ane-compiler: the MIL handed to Apple's
compiler is the pre-fusion form): its main op, then each filled epilogue slot in slot order,
each lowered like an ordinary op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from anekit.codegen.builder import Arg, FunctionBuilder
from anekit.codegen.lower import (
    einsum,
    elementwise,
    grid,
    indexing,
    nn,
    pool,
    quant,
    recurrent,
    resize,
    shape,
)
from anekit.codegen.lower.context import Call, Lowering
from anekit.errors import ModelError
from anekit.ir.registry import TensorType, infer_types

LowerFn = Callable[[Lowering], object]

if TYPE_CHECKING:
    from anekit.targets import Target


def _layer(lo: Lowering) -> str:
    call = lo.call
    attrs = call.attrs
    n_main = attrs["n_main"]
    main_args = call.args[:n_main]
    running = _lower_step(
        lo, attrs["main"], attrs["main_attrs"], main_args, call.hint, last=not attrs["epilogue"]
    )
    steps = attrs["epilogue"]
    for k, step in enumerate(steps):
        operands = tuple(call.args[i] if i >= 0 else None for i in step.operands)
        running = _lower_step(
            lo,
            step.op,
            step.attrs,
            (running, *operands),
            f"{call.hint}_{step.slot.name.lower()}",
            last=k == len(steps) - 1,
        )
    return running.var  # type: ignore[return-value]


def _lower_step(
    lo: Lowering,
    op: str,
    attrs: Mapping,
    args: tuple[Arg | None, ...],
    hint: str,
    *,
    last: bool,
) -> Arg:
    """Lower one op of a layer; returns its result as the next step's operand."""
    types = [TensorType(a.shape, a.ir_dtype) if a is not None else None for a in args]
    norm, outs = infer_types(op, types, attrs)
    (out,) = outs
    step = Call(
        op=op,
        attrs=norm,
        args=args,
        outputs=((out.shape, out.dtype),),
        names=(lo.call.names[0] if last else None,),
        hint=hint,
        origin=lo.call.origin,
    )
    var = lower_call(lo.b, step, lo.target, lo.device)[0]
    return Arg(var, out.shape, lo.b.dtype_of(out.dtype), None, None, out.dtype)


LOWERINGS: Mapping[str, LowerFn] = MappingProxyType(
    {
        **elementwise.LOWERINGS,
        **nn.LOWERINGS,
        **pool.LOWERINGS,
        **shape.LOWERINGS,
        **resize.LOWERINGS,
        **grid.LOWERINGS,
        **indexing.LOWERINGS,
        **einsum.LOWERINGS,
        **recurrent.LOWERINGS,
        **quant.LOWERINGS,
        "ane_layer": _layer,
    }
)


def supported_ops() -> frozenset[str]:
    """The IR ops the MIL emitter can lower."""
    return frozenset(LOWERINGS)


def lower_call(b: FunctionBuilder, call: Call, target: Target, device: str) -> list[str]:
    """Append the MIL operations of ``call``; returns the variables of its outputs."""
    fn = LOWERINGS.get(call.op)
    if fn is None:
        where = f"node '{call.origin}' " if call.origin else ""
        raise ModelError(
            f"{where}uses the IR op '{call.op}', which has no MIL lowering yet",
            hint="the ops the MIL emitter supports: "
            + ", ".join(sorted(op for op in LOWERINGS if op != "ane_layer")),
        )
    result = fn(Lowering(b, call, target, device))
    return list(result) if isinstance(result, list) else [result]  # type: ignore[list-item]
