"""The pipeline as data: pass names in order, each a pure (Graph, PassContext) -> Graph."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

from anekit.errors import InternalError
from anekit.ir.graph import Graph
from anekit.passes.canonicalize import canonicalize
from anekit.passes.context import PassContext
from anekit.passes.decompose import decompose
from anekit.passes.fuse import fuse_epilogues
from anekit.passes.layout import layout
from anekit.passes.legalize import legalize
from anekit.passes.legalize_forms import engine_forms
from anekit.passes.legalize_kernels import split_kernels
from anekit.passes.legalize_reshapes import fold_reshapes
from anekit.passes.matmul_to_conv import matmul_to_conv
from anekit.passes.segment import segment
from anekit.passes.validate import validate

# The passes issue 16 added to avoid CPU fallbacks; DEFAULT_PIPELINE without them is the
# "before" of benchmarks/cpu_fallback_zoo.py.
LEGALISING_PASSES = ("engine_forms", "split_kernels", "fold_reshapes")

PassFn = Callable[[Graph, PassContext], Graph]
# (pass name, graph before, graph after): lets tests check every step
Observer = Callable[[str, Graph, Graph], None]

PASSES = MappingProxyType(
    {
        "canonicalize": canonicalize,
        "decompose": decompose,
        "engine_forms": engine_forms,
        "layout": layout,
        "split_kernels": split_kernels,
        "matmul_to_conv": matmul_to_conv,
        "fold_reshapes": fold_reshapes,
        "fuse_epilogues": fuse_epilogues,
        "legalize": legalize,
        "validate": validate,
        "segment": segment,
    }
)

# canonicalize runs again after the passes whose output it simplifies: decompositions
# expose constants and neutral ops, and layout conversions between engine ops cancel.
DEFAULT_PIPELINE: tuple[str, ...] = (
    "canonicalize",
    "decompose",
    "engine_forms",
    "canonicalize",
    "layout",
    "split_kernels",
    "matmul_to_conv",
    "canonicalize",
    "fold_reshapes",
    "fuse_epilogues",
    "legalize",
    "validate",
    "segment",
)


def origins(graph: Graph) -> set[str]:
    return {o for n in graph.nodes for o in n.origin}


def run_pipeline(
    graph: Graph,
    ctx: PassContext,
    passes: Sequence[str] = DEFAULT_PIPELINE,
    *,
    observe: Observer | None = None,
    check: bool = False,
) -> Graph:
    """Run ``passes`` in order, logging a PassRecord and per-node events for each.

    ``check`` validates the graph after every pass (a failure is a bug in that pass).
    """
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise ValueError(f"unknown pass(es) {unknown}; known: {', '.join(PASSES)}")
    for name in passes:
        ctx.begin(name)
        before = origins(graph)
        start = time.perf_counter()
        out = PASSES[name](graph, ctx)
        ctx.vanished(sorted(before - origins(out)))
        ctx.end(time.perf_counter() - start)
        if check:
            try:
                out.validate()
            except Exception as exc:  # noqa: BLE001 - report which pass broke the graph
                raise InternalError(f"pass '{name}' produced an invalid graph: {exc}") from exc
        if observe is not None:
            observe(name, graph, out)
        graph = out
    return graph


def stamp_origins(graph: Graph) -> Graph:
    """A copy of ``graph`` whose every node's origin is its own name (the report's rows)."""
    return graph.replace(nodes=[n.with_(origin=(n.name,)) for n in graph.nodes])


def pass_names() -> Iterable[str]:
    return tuple(PASSES)
