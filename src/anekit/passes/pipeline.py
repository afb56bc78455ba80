"""The pipeline as data: pass names in order, each pass with the facts it needs and provides."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from anekit.errors import AnekitError, InternalError
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
from anekit.passes.recognize import recognize
from anekit.passes.results import PipelineResult
from anekit.passes.scaling import scale_inputs
from anekit.passes.segment import segment
from anekit.passes.validate import validate

# The passes that rewrite ops into engine forms to avoid CPU fallbacks; DEFAULT_PIPELINE without them is the
# "before" of benchmarks/cpu_fallback_zoo.py.
LEGALISING_PASSES = ("engine_forms", "split_kernels", "fold_reshapes")

# (pass name, graph before, graph after): lets tests check every step
Observer = Callable[[str, Graph, Graph], None]


@dataclass(frozen=True)
class Pass:
    """A pass and its contract: the facts it ``needs`` from earlier passes (handed to it as
    keyword arguments) and the facts it ``provides``. A fact is a value a pass returns beside
    the graph (validate's verdicts, segment's placement) or a property of the graph it leaves
    (``engine_layers``: nodes the engine can run are ane_layer nodes). A pass with facts to
    provide returns (graph, {fact: value}); the others return the graph."""

    run: Callable[..., Any]
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()


PASSES: Mapping[str, Pass] = MappingProxyType(
    {
        "scale_inputs": Pass(scale_inputs),
        "canonicalize": Pass(canonicalize),
        "recognize": Pass(recognize),
        "decompose": Pass(decompose),
        "engine_forms": Pass(engine_forms),
        "layout": Pass(layout),
        "split_kernels": Pass(split_kernels),
        "matmul_to_conv": Pass(matmul_to_conv),
        "fold_reshapes": Pass(fold_reshapes),
        "fuse_epilogues": Pass(fuse_epilogues, provides=("engine_layers",)),
        "legalize": Pass(legalize, needs=("engine_layers",)),
        "validate": Pass(validate, needs=("engine_layers",), provides=("verdicts",)),
        "segment": Pass(segment, needs=("verdicts",), provides=("placement", "segments")),
    }
)

# scale_inputs (a no-op unless the input_scales option asks) comes first: canonicalize then
# folds what it wrote. recognize runs on the canonical graph (pow(x, 2) already x * x, duplicates merged), before
# decompose lowers what it raised through the fp16-safe forms.
# canonicalize runs again after the passes whose output it simplifies: decompositions
# expose constants and neutral ops, and layout conversions between engine ops cancel.
DEFAULT_PIPELINE: tuple[str, ...] = (
    "scale_inputs",
    "canonicalize",
    "recognize",
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
_GRAPH_PROPERTIES = ("engine_layers",)  # facts that are properties of the graph, not values


def origins(graph: Graph) -> set[str]:
    return {o for n in graph.nodes for o in n.origin}


def check_contracts(passes: Sequence[str]) -> None:
    """Every pass of ``passes`` is known and finds the facts it needs provided before it."""
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise AnekitError(f"unknown pass(es) {unknown}", hint=f"known passes: {', '.join(PASSES)}")
    provided: set[str] = set()
    for name in passes:
        spec = PASSES[name]
        missing = [f for f in spec.needs if f not in provided]
        if missing:
            givers = sorted({p for p, s in PASSES.items() if set(missing) & set(s.provides)})
            raise AnekitError(
                f"pass '{name}' needs {', '.join(missing)}, which no earlier pass provides",
                hint=f"run {' and '.join(givers)} before {name} (the default pipeline: "
                f"{', '.join(DEFAULT_PIPELINE)})",
            )
        provided.update(spec.provides)


# the environment variable that turns on validation after every pass (see run_pipeline)
VERIFY_PASSES_ENV = "ANEKIT_VERIFY_PASSES"


def run_pipeline(
    graph: Graph,
    ctx: PassContext,
    passes: Sequence[str] = DEFAULT_PIPELINE,
    *,
    observe: Observer | None = None,
    check: bool | None = None,
) -> PipelineResult:
    """Run ``passes`` in order, logging a PassRecord and per-node events for each, and return
    the final graph with the facts the passes provided. The contracts are checked first: a
    pipeline lacking a pass another one needs is an error before any pass runs.

    ``check`` validates the graph after every pass (a failure is a bug in that pass); by
    default it is on when the environment sets ``ANEKIT_VERIFY_PASSES=1`` (the test suite
    does), off otherwise (validation costs time on every compile).
    """
    if check is None:
        check = os.environ.get(VERIFY_PASSES_ENV) == "1"
    check_contracts(passes)
    facts: dict[str, Any] = {}
    for name in passes:
        spec = PASSES[name]
        ctx.begin(name)
        before = origins(graph)
        start = time.perf_counter()
        out = spec.run(
            graph, ctx, **{f: facts[f] for f in spec.needs if f not in _GRAPH_PROPERTIES}
        )
        out, provided = out if isinstance(out, tuple) else (out, {})
        facts.update(provided)
        facts.update({f: True for f in spec.provides if f in _GRAPH_PROPERTIES})
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
    return PipelineResult(
        graph,
        verdicts=facts.get("verdicts", MappingProxyType({})),
        placement=facts.get("placement", MappingProxyType({})),
        segments=facts.get("segments", ()),
    )


def stamp_origins(graph: Graph) -> Graph:
    """A copy of ``graph`` whose every node's origin is its own name (the report's rows)."""
    return graph.replace(nodes=[n.with_(origin=(n.name,)) for n in graph.nodes])
