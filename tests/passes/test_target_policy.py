"""Target policy is data: which decompositions a chip calls for follows from its features, and
an op the engine cannot run in its requested form goes to the CPU instead of being changed."""

from __future__ import annotations

import dataclasses

import numpy as np

import anekit
from anekit import ops, targets
from anekit.passes.context import PassOptions
from anekit.passes.decompose import DECOMPOSITIONS, rules_for

M4 = targets.get("m4")


def _without(target, feature: str):  # noqa: ANN001, ANN202
    return dataclasses.replace(
        target, features=dataclasses.replace(target.features, **{feature: False})
    )


def test_gated_decompositions_follow_the_chip_features() -> None:
    gated = {d.rule.name: d.unless for d in DECOMPOSITIONS if d.unless}
    assert gated == {
        "decompose_instance_norm": "instance_norm",
        "decompose_softmax": "softmax",
        "approximate_gelu": "gelu",
    }
    options = PassOptions()
    for name, feature in gated.items():
        with_it = dataclasses.replace(
            M4, features=dataclasses.replace(M4.features, **{feature: True})
        )
        assert name not in {r.name for r in rules_for(with_it, options)}
        assert name in {r.name for r in rules_for(_without(M4, feature), options)}
    off = dataclasses.replace(options, approximate_gelu=False, decompose_gated_softmax=False)
    names = {r.name for r in rules_for(_without(_without(M4, "softmax"), "gelu"), off)}
    assert not names & {"approximate_gelu", "approximate_erf", "decompose_softmax"}


def test_exact_gelu_without_the_approximation_runs_exactly_on_the_cpu() -> None:
    """With approximate_gelu off an exact GELU is never silently approximated: the engine has
    only the tanh form, so validate sends it to the CPU, which runs MIL gelu EXACT."""
    x = anekit.input("x", (1, 8, 1, 16))
    graph = anekit.graph([ops.gelu(ops.relu(x), name="y")])
    compiled = anekit.compile(graph, "m4", approximate_gelu=False)
    (y,) = [n for n in compiled.graph.nodes if "y" in n.origin]
    assert compiled.placement[y.name].device == "cpu"
    assert "exact GELU" in compiled.placement[y.name].reason
    (cpu,) = [s for s in compiled.bundle.segments if s.device == "cpu"]
    (gelu,) = [o for o in cpu.program.function("main").operations if o.op == "gelu"]
    mode = cpu.program.function("main").producers[gelu.input("mode").name].attribute("val")
    assert "EXACT" in str(mode)
    feeds = {"x": np.linspace(-4, 4, 128, dtype=np.float32).reshape(1, 8, 1, 16)}
    (want,) = graph.run(feeds).values()
    (got,) = compiled.run(feeds, "sim").values()
    np.testing.assert_allclose(got, want, atol=4e-3, rtol=2e-3)  # relu's fp16 output feeds it
    approximated = anekit.compile(graph, "m4")
    assert all(p.device == "ane" for p in approximated.placement.values())
