"""Validators: Apple's reject strings, gated by each target's limits and feature flags."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.ir.engine import EpilogueStep, LayerView, Slot, layer_attrs
from anekit.ir.graph import Graph, Node, Value
from anekit.passes.pipeline import DEFAULT_PIPELINE
from anekit.passes.validate import FEATURE_GATES, validate_layer
from tests.passes.support import compile_checked, row, with_features, with_limits

RNG = np.random.default_rng(2)


def _layer_graph(
    main: str, main_attrs: dict, inputs: list[Value], consts: dict, out: Value, steps=()
) -> tuple[Graph, LayerView]:
    """A one-layer graph built directly (no inference), for envelopes inference would refuse."""
    attrs = layer_attrs(main, main_attrs, len(inputs) + len(consts), steps)
    node = Node(
        "ane_layer", "layer", tuple([v.name for v in inputs] + list(consts)), (out.name,), attrs
    )
    values = {v.name: v for v in inputs} | {out.name: out}
    values |= {k: Value(k, a.shape, "fp32") for k, a in consts.items()}
    g = Graph(inputs=inputs, outputs=[out], nodes=[node], values=values, constants=consts)
    return g, LayerView(node)


def test_conv_kernel_outside_the_targets_range_is_rejected_with_apples_message() -> None:
    m1, m4 = targets.get("m1"), targets.get("m4")
    width = m1.limits.max_kernel + 1  # too wide for M1, within M4's range
    assert width <= m4.limits.max_kernel
    x = anekit.input("x", (1, 2, 4, 32))
    w = RNG.standard_normal((2, 2, 1, width)).astype(np.float32)
    g = anekit.graph(ops.conv2d(x, w, name="wide"))
    # without the kernel split (which would legalise it on M1 too: tests/passes/test_engine_forms.py)
    unsplit = tuple(p for p in DEFAULT_PIPELINE if p != "split_kernels")
    on_m1 = compile_checked(g, "m1", passes=unsplit)
    on_m4 = compile_checked(g, "m4", passes=unsplit)
    assert row(on_m4, "wide").placement == "ane"
    r = row(on_m1, "wide")
    assert r.placement == "cpu"
    assert (
        r.reason
        == f"Invalid conv kernel width = {width}, It should be in [{m1.limits.min_kernel},{m1.limits.max_kernel}]"
    )
    assert [d.code for d in on_m1.diagnostics] == ["conv-kernel-range"]


def test_group_divisibility_message() -> None:
    x, out = Value("x", (1, 6, 4, 4), "fp32"), Value("y", (1, 4, 4, 4), "fp32")
    w = np.zeros((4, 2, 1, 1), np.float32)  # 6 input channels cannot form 4 groups
    g, view = _layer_graph("conv", {"group": 4}, [x], {"w": w}, out)
    found = validate_layer(view, g, targets.get("m4"))
    assert found.message == "input/output channels should be divisible by num group"


def test_matmul_with_three_bottoms_is_rejected() -> None:
    a, b, c = (Value(n, (1, 4, 4), "fp32") for n in "abc")
    g, view = _layer_graph("matmul", {}, [a, b, c], {}, Value("y", (1, 4, 4), "fp32"))
    assert (
        validate_layer(view, g, targets.get("m4")).message
        == "Matrix mult. layer can only have two bottoms"
    )


def test_weights_over_the_kernel_memory_that_cannot_be_split_do_not_fit_the_kmem() -> None:
    x = anekit.input("x", (1, 8, 4, 4))
    w = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)  # depthwise: not split by channels
    target = with_limits("m4", kmem_cap_bytes=w.size * 2 - 2)
    cm = compile_checked(anekit.graph(ops.conv2d(x, w, padding=1, groups=8, name="dw")), target)
    r = row(cm, "dw")
    assert (r.placement, r.reason) == ("cpu", "can not fit the Kmem")


def test_rank_over_the_limit_is_rejected() -> None:
    x = anekit.input("x", (1, 2, 2, 2, 2, 3))
    cm = compile_checked(anekit.graph(ops.relu(x, name="act")), "m4")
    r = row(cm, "act")
    assert (
        r.placement == "cpu"
        and "rank 6" in r.reason
        and str(targets.get("m4").limits.max_rank) in r.reason
    )


def test_integer_tensors_have_no_engine_form() -> None:
    x = anekit.input("x", (1, 8), "int32")
    cm = compile_checked(anekit.graph(ops.add(x, x, name="sum")), "m4")
    r = row(cm, "sum")
    assert r.placement == "cpu" and r.reason.startswith("add on int32 tensors has no engine form")


def test_gated_activation_in_an_epilogue_rejects_the_layer() -> None:
    x = anekit.input("x", (1, 4, 3, 3))
    w = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32)
    g = anekit.graph(ops.sin(ops.conv2d(x, w, name="conv"), name="s"))
    cm = compile_checked(g, with_features("m4", sin_cos=False))
    assert row(cm, "conv").placement == "cpu"
    assert row(cm, "conv").reason == FEATURE_GATES["sin"][2]


@pytest.mark.parametrize("op", sorted(FEATURE_GATES))
def test_every_gate_names_a_real_feature(op: str) -> None:
    feature = FEATURE_GATES[op][0]
    assert isinstance(targets.get("m1").supports(feature), bool)


def test_validator_accepts_a_layer_within_every_limit() -> None:
    x, out = Value("x", (1, 4, 4, 4), "fp32"), Value("y", (1, 4, 4, 4), "fp32")
    w = np.zeros((4, 4, 3, 3), np.float32)
    steps = [EpilogueStep(Slot.POST_ACT, "relu")]
    g, view = _layer_graph("conv", {"pads": (1, 1, 1, 1)}, [x], {"w": w}, out, steps)
    assert validate_layer(view, g, targets.get("m1")) is None


def test_every_feature_gate_gates_an_engine_layer() -> None:
    """A gate on an op without an engine form would never be consulted (eight such entries
    were removed); each gate names a feature of the chip database."""
    import dataclasses

    from anekit.ir.engine import layer_type_of
    from anekit.targets.model import Features

    features = {f.name for f in dataclasses.fields(Features)}
    for op, (feature, _, _) in FEATURE_GATES.items():
        assert layer_type_of(op), op
        assert feature in features, (op, feature)
