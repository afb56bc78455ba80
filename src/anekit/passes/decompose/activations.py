"""Activations decomposed: exact GELU and erf as tanh forms, and those with no engine table."""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.decompose.emit import Emit
from anekit.passes.rewrite import Rewriter, rule

GELU_TANH_MAX_ABS_ERROR = 4.74e-4
ERF_TANH_MAX_ABS_ERROR = 3.58e-4
_ERF_A = float(2.0 / np.sqrt(np.pi))
_ERF_B = float(0.044715 * 2.0 * np.sqrt(2.0) * np.sqrt(2.0 / np.pi))


@rule("gelu")
def approximate_gelu(rw: Rewriter, node: Node) -> bool:
    if node.attrs["approximate"] != "none":
        return False
    e = Emit(rw, node)
    y = e("gelu", [node.inputs[0]], {"approximate": "tanh"}, "tanh")
    return e.done(
        y, f"exact GELU replaced by its tanh form (max abs error {GELU_TANH_MAX_ABS_ERROR:g})"
    )


@rule("erf")
def approximate_erf(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    z = node.inputs[0]
    poly = e(
        "add",
        [
            e("mul", [e("mul", [z, z], tag="z2"), e.const(_ERF_B, "b")], tag="bz2"),
            e.const(_ERF_A, "a"),
        ],
        tag="poly",
    )
    y = e("tanh", [e("mul", [z, poly], tag="arg")])
    return e.done(y, f"erf as tanh(a z + b z^3) (max abs error {ERF_TANH_MAX_ABS_ERROR:g})")


@rule("hard_swish", "mish", "selu", "celu", "softsign", "prelu")
def decompose_activation(rw: Rewriter, node: Node) -> bool:
    """Activations without an engine lookup table, written with ones that have one."""
    e = Emit(rw, node)
    x = node.inputs[0]
    op = node.op
    if op == "hard_swish":
        y = e("mul", [x, e("hard_sigmoid", [x], {"alpha": 1.0 / 6.0, "beta": 0.5})], tag="product")
    elif op == "mish":
        y = e("mul", [x, e("tanh", [e("softplus", [x])])], tag="product")
    elif op == "selu":
        y = e(
            "mul",
            [e("elu", [x], {"alpha": node.attrs["alpha"]}), e.const(node.attrs["gamma"], "gamma")],
            tag="scaled",
        )
    elif op == "celu":
        a = node.attrs["alpha"]
        y = e(
            "mul",
            [
                e(
                    "elu",
                    [e("mul", [x, e.const(1.0 / a, "inv_alpha")], tag="scaled_in")],
                    {"alpha": 1.0},
                ),
                e.const(a, "alpha"),
            ],
            tag="scaled",
        )
    elif op == "softsign":
        y = e(
            "div",
            [x, e("add", [e("abs", [x]), e.const(1.0, "one")], tag="denominator")],
            tag="ratio",
        )
    else:  # prelu: relu(x) - slope * relu(-x); a live slope stays on the CPU
        slope = rw.const(node.inputs[1])
        if slope is None:
            return False
        neg = e(
            "mul",
            [e("relu", [e("neg", [x])], tag="relu_neg"), e.const(slope, "slope")],
            tag="negative_part",
        )
        y = e("sub", [e("relu", [x]), neg], tag="combined")
    return e.done(y, f"{op} written with engine activations")
