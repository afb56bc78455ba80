"""Engine graphs built by hand: a small builder and the published workloads the model is checked on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from anekit.cost.calibration import Anchor, Calibration
from anekit.cost.estimate import Estimate, estimate_graph
from anekit.errors import InternalError
from anekit.ir.engine import EpilogueStep, Slot, layer_attrs
from anekit.ir.graph import Graph, Value


class EngineGraphBuilder:
    """Builds an engine graph (``ane_layer`` nodes) through GraphEditor.

    >>> b = EngineGraphBuilder("demo")
    >>> x = b.input("x", (1, 64, 8, 8))
    >>> y = b.conv(x, 64, kernel=1, activation="relu")
    >>> g = b.build([y])
    """

    def __init__(self, name: str = "engine", seed: int = 0):
        self._editor = Graph(
            inputs=(), outputs=(), nodes=(), values={}, constants={}, name=name
        ).edit()
        self._rng = np.random.default_rng(seed)

    def input(self, name: str, shape: Sequence[int]) -> str:
        self._editor.inputs.append(
            Value(self._editor.declare_value(name, shape, "fp32"), shape, "fp32")
        )
        return name

    def shape(self, value: str) -> tuple[int, ...]:
        return self._editor.value(value).shape

    def constant(self, shape: Sequence[int], hint: str = "w", dtype: Any = np.float16) -> str:
        array = (self._rng.standard_normal(tuple(shape)) * 0.05).astype(np.float32)
        return self._editor.add_constant(
            array.astype(dtype) if dtype is not np.float16 else array, hint
        )

    def layer(
        self,
        main: str,
        inputs: Sequence[str],
        main_attrs: Mapping[str, Any] | None = None,
        *,
        epilogue: Sequence[tuple[Slot, str, Sequence[str]]] = (),
        name: str | None = None,
    ) -> str:
        """One engine layer: ``main`` on ``inputs`` then epilogue (slot, op, operand values)."""
        operands = list(inputs)
        steps = []
        for slot, op, extra in epilogue:
            idx = []
            for v in extra:
                operands.append(v)
                idx.append(len(operands) - 1)
            steps.append(EpilogueStep(slot, op, operands=tuple(idx)))
        attrs = layer_attrs(main, main_attrs or {}, len(inputs), steps)
        (out,) = self._editor.add("ane_layer", operands, attrs, name=name or main)
        return out

    def conv(
        self,
        x: str,
        out_channels: int,
        *,
        kernel: int = 1,
        stride: int = 1,
        activation: str | None = None,
        name: str | None = None,
    ) -> str:
        c = self.shape(x)[1]
        w = self.constant((out_channels, c, kernel, kernel))
        pad = kernel // 2
        attrs = {"strides": (stride, stride), "pads": (pad,) * 4}
        epi = [(Slot.POST_ACT, activation, ())] if activation else []
        return self.layer("conv", [x, w], attrs, epilogue=epi, name=name or "conv")

    def linear(self, x: str, out_features: int, name: str | None = None) -> str:
        """A matmul against a constant weight [K, N]."""
        w = self.constant((self.shape(x)[-1], out_features))
        return self.layer("matmul", [x, w], name=name or "linear")

    def build(self, outputs: Sequence[str]) -> Graph:
        self._editor.output_names = list(outputs)
        self._editor.name_outputs(list(outputs))
        graph = self._editor.build()
        graph.validate()
        return graph


def conv_stack(depth: int, channels: int, height: int, width: int, kernel: int = 1) -> Graph:
    """``depth`` same-shape convolutions with ReLU, each feeding the next."""
    b = EngineGraphBuilder(f"conv_stack_{depth}x{channels}")
    x = b.input("x", (1, channels, height, width))
    for k in range(depth):
        x = b.conv(x, channels, kernel=kernel, activation="relu", name=f"conv{k}")
    return b.build([x])


def single_conv(channels: int, height: int, width: int, kernel: int, stride: int = 1) -> Graph:
    b = EngineGraphBuilder("conv")
    x = b.input("x", (1, channels, height, width))
    return b.build([b.conv(x, channels, kernel=kernel, stride=stride)])


def single_matmul(m: int, k: int, n: int) -> Graph:
    """x[1, 1, M, K] @ W[K, N] with a constant weight, kept a matmul (not a 1x1 convolution)."""
    b = EngineGraphBuilder("matmul")
    x = b.input("x", (1, 1, m, k))
    return b.build([b.linear(x, n)])


def single_elementwise(op: str, shape: Sequence[int]) -> Graph:
    b = EngineGraphBuilder(op)
    x = b.input("x", tuple(shape))
    return b.build([b.layer(op, [x])])


def single_pool(channels: int, height: int, width: int, kind: str = "max_pool") -> Graph:
    b = EngineGraphBuilder(kind)
    x = b.input("x", (1, channels, height, width))
    y = b.layer(kind, [x], {"kernel": (2, 2), "strides": (2, 2)})
    return b.build([y])


def attention_block(seq: int, dim: int, name: str = "attention") -> Graph:
    """One single-head attention block in the engine's [1, 1, S, D] form.

    q, k, v projections (matmuls against constant weights), scores = q @ kT (k projected
    straight into [D, S]), softmax, then probabilities @ v.
    """
    b = EngineGraphBuilder(name)
    x = b.input("x", (1, 1, seq, dim))
    xt = b.input("xt", (1, 1, dim, seq))
    q = b.linear(x, dim, name="q_proj")
    wk = b.constant((dim, dim))
    kt = b.layer("matmul", [wk, xt], name="k_proj")  # [D, D] @ [D, S] -> kT [D, S]
    v = b.linear(x, dim, name="v_proj")
    scale = b.constant((1,), hint="scale")
    scores = b.layer("matmul", [q, kt], epilogue=[(Slot.GOC, "goc", [scale])], name="scores")
    probs = b.layer("softmax", [scores], {"axis": -1}, name="softmax")
    out = b.layer("matmul", [probs, v], name="value_matmul")
    return b.build([out])


_BUILDERS: Mapping[str, Callable[[Mapping[str, Any]], Graph]] = {
    "conv_stack": lambda s: conv_stack(
        s["depth"], s["channels"], s["height"], s["width"], s.get("kernel", 1)
    ),
    "conv": lambda s: single_conv(
        s["channels"], s["height"], s["width"], s["kernel"], s.get("stride", 1)
    ),
    "matmul": lambda s: single_matmul(s["m"], s["k"], s["n"]),
    "elementwise": lambda s: single_elementwise(s["op"], s["shape"]),
    "pool": lambda s: single_pool(s["channels"], s["height"], s["width"], s["pool"]),
    "attention": lambda s: attention_block(s["seq"], s["dim"]),
}


def build_workload(spec: Mapping[str, Any]) -> Graph:
    """The engine graph a calibration anchor describes (``spec["kind"]`` names the builder)."""
    try:
        return _BUILDERS[spec["kind"]](spec)
    except KeyError as exc:
        raise InternalError(f"calibration workload {dict(spec)}: missing {exc}") from None


def anchor_estimate(
    anchor: Anchor, calibration: Calibration | None = None
) -> tuple[float, Estimate]:
    """The model's value for an anchor, in the anchor's metric, and the estimate behind it."""
    est = estimate_graph(build_workload(anchor.workload), anchor.target, calibration=calibration)
    if anchor.metric == "tflops":
        return est.flops / est.total_s / 1e12, est
    return (est.total_s * 1e6 if anchor.metric == "us" else est.total_ms), est
