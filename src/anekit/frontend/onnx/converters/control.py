"""ONNX control flow: an ``If`` whose condition is known folds to its branch; one whose
condition comes from the data computes both branches and selects with ``Where``."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError, UnsupportedModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.ir.dtypes import DType


@converter("If")
def if_(ctx: NodeContext) -> tuple[str, ...]:
    cond = ctx.const(0)
    if cond is not None:
        if cond.size != 1:
            raise UnsupportedModelError(f"the condition has {cond.size} elements, not one")
        taken = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        return tuple(ctx.inline(ctx.subgraph(taken)))
    # The condition depends on the data: both branches run (they have no side effects) and
    # a Where keeps one, which is exact when both give the same shapes.
    sources = ctx.graph_inputs_feeding(0)
    fix = " ".join(f"--const {s}=VALUE" for s in sources) or "--const NAME=VALUE"
    hint = (
        f"fix the input(s) the condition depends on to constants ({fix}, constants= in the "
        "API) so that the branch folds"
    )
    try:
        then_out = ctx.inline(ctx.subgraph("then_branch"))
        else_out = ctx.inline(ctx.subgraph("else_branch"))
    except ModelError as exc:
        raise UnsupportedModelError(
            f"its condition is computed from input(s) {sources}, and one branch cannot be "
            f"built for these input shapes ({str(exc).splitlines()[0]})",
            hint=hint,
        ) from None
    shapes = [(ctx.shape_of(a), ctx.shape_of(b)) for a, b in zip(then_out, else_out, strict=True)]
    if any(a != b for a, b in shapes):
        raise UnsupportedModelError(
            f"its condition is computed from input(s) {sources} and its branches give "
            f"different shapes {[list(a) for a, _ in shapes]} vs {[list(b) for _, b in shapes]}",
            hint=hint,
        )
    ctx.note(
        "if-computed-both-ways",
        f"the condition of If '{ctx.name}' is computed from input(s) {sources}: both branches "
        "run and a Where keeps one",
        f"fix {', '.join(sources) or 'the inputs it depends on'} with {fix} to run one branch only",
    )
    cond_bool = ctx.input(0)
    if ctx.type(0).dtype != DType.BOOL:
        cond_bool = ctx.emit("cast", [cond_bool], {"to": DType.BOOL})
    if any(len(ctx.shape_of(a)) < len(ctx.shape(0)) for a in then_out):
        raise UnsupportedModelError(
            f"its condition is computed from input(s) {sources} and has rank "
            f"{len(ctx.shape(0))}, more than an output's",
            hint=hint,
        )
    return tuple(
        ctx.emit_as(k, "where", [cond_bool, a, b])
        for k, (a, b) in enumerate(zip(then_out, else_out, strict=True))
    )
