"""Helpers for the pass tests: compile builder graphs, find layers, check numerics per pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit import targets
from anekit.compiler import CompiledModel
from anekit.compiler import compile as compile_model
from anekit.ir.engine import UNITS, LayerView
from anekit.ir.graph import Graph, Node
from anekit.ir.interpret import check_feeds, run_node
from anekit.passes.context import PassContext, PassOptions
from anekit.passes.explain import OpReport
from anekit.passes.pipeline import DEFAULT_PIPELINE, run_pipeline, stamp_origins
from anekit.targets import Target

# every pass but decompose's GELU approximation is exact up to fp32 rounding
EXACT_RTOL = 1e-5


def rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected| (0 for two zero tensors)."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    scale = float(np.abs(e).max(initial=0.0))
    err = float(np.abs(a - e).max(initial=0.0))
    return err / scale if scale else err


def layers(cm: CompiledModel) -> list[Node]:
    """Engine layers placed on the ANE, in execution order."""
    return [
        n for n in cm.graph.nodes if n.op == "ane_layer" and cm.placement[n.name].device == "ane"
    ]


def compute_layers(cm: CompiledModel) -> list[Node]:
    """Engine layers that compute (mac or planar unit), i.e. not pure data movement."""
    return [n for n in layers(cm) if UNITS[LayerView(n).layer_type] != "dma"]


def row(cm: CompiledModel, node: str) -> OpReport:
    found = [r for r in cm.ops if r.node == node]
    assert len(found) == 1, f"no single row for {node}: {[r.node for r in cm.ops]}"
    return found[0]


def layer_of(cm: CompiledModel, node: str) -> LayerView:
    """The layer whose main op or epilogue implements original node ``node``."""
    holders = [n for n in cm.graph.nodes if node in n.origin and n.op == "ane_layer"]
    assert len(holders) == 1, f"{node} is in {len(holders)} layers"
    return LayerView(holders[0])


def with_features(target: str | Target, **changes: Any) -> Target:
    """A hypothetical target: a real one with some feature gates changed (for gate tests)."""
    t = targets.get(target)
    return dataclasses.replace(
        t, name=f"{t.name}-test", features=dataclasses.replace(t.features, **changes)
    )


def with_limits(target: str | Target, **changes: Any) -> Target:
    t = targets.get(target)
    top = {k: changes.pop(k) for k in ("kmem_cap_bytes", "onchip_budget_bytes") if k in changes}
    return dataclasses.replace(
        t, name=f"{t.name}-test", limits=dataclasses.replace(t.limits, **changes), **top
    )


class IncrementalRunner:
    """Runs successive graphs of a pipeline on the reference kernels, recomputing only what
    changed: a node that is the same (immutable) object as in the previous graph and reads
    values that are unchanged gives the same outputs, so they are reused. Everything else
    runs through `run_node`, exactly as `Graph.run` would."""

    def __init__(self, feeds: Mapping[str, np.ndarray]):
        self.feeds = feeds
        self._cache: dict[int, tuple[Node, tuple, list[np.ndarray], tuple]] = {}
        self.recomputed = 0

    def run(self, graph: Graph) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = {**graph.constants, **check_feeds(graph, self.feeds)}
        token: dict[str, object] = {k: ("input", k) for k in self.feeds}
        token |= {k: ("const", id(v)) for k, v in graph.constants.items()}
        cache: dict[int, tuple[Node, tuple, list[np.ndarray], tuple]] = {}
        for node in graph.nodes:
            ins = tuple(token[i] if i else None for i in node.inputs)
            hit = self._cache.get(id(node))
            if hit is not None and hit[0] is node and hit[1] == ins:
                outs, toks = hit[2], hit[3]
            else:
                args = [env[i] if i else None for i in node.inputs]
                outs = run_node(node, args, [graph.values[o] for o in node.outputs])
                toks = tuple(object() for _ in node.outputs)
                self.recomputed += 1
            cache[id(node)] = (node, ins, outs, toks)
            env.update(zip(node.outputs, outs, strict=True))
            token.update(zip(node.outputs, toks, strict=True))
        self._cache = cache
        return {name: env[name] for name in graph.output_names}


def check_every_pass(
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    target: str | Target = "m4",
    *,
    rtol: float = EXACT_RTOL,
    **options: Any,
) -> dict[str, float]:
    """Run the pipeline; assert each pass's output graph matches its input on ``feeds``.

    Returns the worst relative error per pass. Each graph is evaluated incrementally (see
    `IncrementalRunner`); the output of a pass is the input of the next.
    """
    ctx = PassContext(targets.get(target), PassOptions(**options))
    graph = stamp_origins(graph)
    runner = IncrementalRunner(feeds)
    before = runner.run(graph)
    worst: dict[str, float] = {}

    def observe(name: str, old: Graph, new: Graph) -> None:
        nonlocal before
        after = runner.run(new)
        assert list(after) == list(before), f"{name} changed the outputs {list(before)}"
        err = max(rel_err(after[k], before[k]) for k in before)
        worst[name] = max(worst.get(name, 0.0), err)
        assert err <= rtol, f"pass {name} changed the outputs by {err:.3g} (tolerance {rtol:g})"
        before = after

    run_pipeline(graph, ctx, DEFAULT_PIPELINE, observe=observe, check=True)
    return worst


def compile_checked(graph: Graph, target: str | Target = "m4", **options: Any) -> CompiledModel:
    """Compile and check the compiled graph against the source on random feeds."""
    cm = compile_model(graph, target, **options)
    cm.graph.validate()
    feeds = random_feeds(graph)
    want, got = graph.run(feeds), cm.run(feeds)
    for k in want:
        assert rel_err(got[k], want[k]) <= EXACT_RTOL, k
    return cm


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        if v.dtype.is_float:
            feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype.numpy)
        else:
            feeds[v.name] = rng.integers(0, 8, v.shape).astype(v.dtype.numpy)
    return feeds
