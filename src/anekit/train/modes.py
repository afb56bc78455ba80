"""Training-mode forms of a model graph: batch statistics, dropout masks, fp16 clamps.

- batch_norm normalises with the batch's own mean and (biased) variance; its running
  statistics become extra outputs (``<mean>.next``, ``<var>.next``) the trainer carries
  as state, updated as torch does (momentum 0.1, unbiased variance).
- Dropout is a product with a mask input the host draws from the trainer's generator
  (the engine has no random numbers); the builder's `dropout` names that input
  ``<name>.dropout_p<per-mille>``, so the trainer knows the rate. In evaluation and
  export the mask is all ones.
- Activations are clamped to +-65504 before every softmax and norm (Orion section
  7.2): an fp16 overflow there turns the loss into NaN.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

import anekit
from anekit.frontend.builder.tensor import Tensor
from anekit.ir.dtypes import FP16_MAX
from anekit.ir.graph import Graph
from anekit.train.emit import Emitter

_MASK = re.compile(r"^(?P<name>.+)\.dropout_p(?P<permille>\d{1,3})$")
CLAMPED_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "group_norm",
               "instance_norm")  # fmt: skip


def dropout(x: Tensor, p: float, *, name: str) -> Tensor:
    """Builder dropout: ``x`` times a host-drawn mask input (see the module docstring)."""
    permille = round(p * 1000)
    if not 0 <= permille < 1000:
        raise anekit.ModelError(f"dropout '{name}': the rate must be in [0, 1), got {p}")
    return x * anekit.input(f"{name}.dropout_p{permille}", x.shape, x.dtype)


def dropout_rate(input_name: str) -> float | None:
    """The rate of a dropout mask input, or None for an ordinary input."""
    m = _MASK.match(input_name)
    return int(m["permille"]) / 1000 if m else None


def dropout_mask(rng: np.random.Generator, shape: tuple[int, ...], p: float) -> np.ndarray:
    """Inverted dropout: kept elements scaled by 1 / (1 - p), as torch does."""
    keep = rng.random(shape) >= p
    return (keep / np.float32(1.0 - p)).astype(np.float32)


def clamp_for_fp16(graph: Graph) -> Graph:
    """Clip the input of every softmax and norm to the fp16 range."""
    ed = graph.edit()
    e = Emitter(ed, prefix="fp16_clamp")
    for node in graph.nodes:
        if node.op in CLAMPED_OPS and graph.values[node.inputs[0]].dtype.is_float:
            clipped = e("clip", node.inputs[0], min=-FP16_MAX, max=FP16_MAX)
            ed.set_node(node.with_(inputs=(clipped, *node.inputs[1:])))
    return ed.build()


def convs_as_matmuls(graph: Graph, weights: Iterable[str]) -> Graph:
    """Convolutions whose weight is trained, as window patches and a matmul: the engine
    bakes convolution kernels into the program, so a kernel that changes every step would
    send the convolution to a CPU segment; a matmul takes two computed operands."""
    from anekit.train.vjp.conv import conv_as_matmul, geometry

    trained = set(weights)
    ed = graph.edit()
    e = Emitter(ed, prefix="conv")
    for node in graph.nodes:
        if node.op != "conv" or node.inputs[1] not in trained:
            continue
        x, w = node.inputs[:2]
        kernel = graph.values[w].shape[2:]
        y = conv_as_matmul(e, x, w, geometry(kernel, node.attrs), node.attrs["group"])
        if len(node.inputs) > 2 and node.inputs[2]:
            co = graph.values[w].shape[0]
            y = e.add(y, e.reshape(node.inputs[2], (1, co) + (1,) * len(kernel)))
        ed.replace_uses(node.output, y)
        ed.remove(node)
    return ed.build()


BROADCASTING = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "where", "prelu")


def explicit_ranks(graph: Graph, computed: Iterable[str]) -> Graph:
    """Give every computed operand of a broadcasting op its output's rank (leading 1s).

    A parameter broadcast against activations ([d] against [B, T, d]) was a constant the
    compiler folded into the layer; as a state input it is a tensor the layout pass must
    move to the engine's layout, which it does for operands of the output's rank."""
    computed = set(computed)
    ed = graph.edit()
    e = Emitter(ed, prefix="rank")
    for node in graph.nodes:
        if node.op not in BROADCASTING:
            continue
        rank = len(graph.values[node.outputs[0]].shape)
        ins = list(node.inputs)
        for k, name in enumerate(ins):
            shape = graph.values[name].shape if name else None
            if name in computed and shape is not None and len(shape) < rank:
                ins[k] = e.reshape(name, (1,) * (rank - len(shape)) + shape)
        if ins != list(node.inputs):
            ed.set_node(node.with_(inputs=tuple(ins)))
    return ed.build()


def batch_statistics(graph: Graph, momentum: float = 0.1) -> tuple[Graph, dict[str, str]]:
    """batch_norm with the batch's statistics; returns the graph and, for each running
    statistic that is a constant, the output carrying its update."""
    ed = graph.edit()
    e = Emitter(ed, prefix="batch_norm")
    updates: dict[str, str] = {}
    for node in graph.nodes:
        if node.op != "batch_norm":
            continue
        x, scale, bias, mean, var = node.inputs
        shape = graph.values[x].shape
        axes = (0, *range(2, len(shape)))
        per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
        mu = e("reduce_mean", x, axes=axes, keepdims=True)
        centered = e.sub(x, mu)
        sigma2 = e("reduce_mean", e.mul(centered, centered), axes=axes, keepdims=True)
        eps = e.scalar(node.attrs["epsilon"], x)
        y = e.div(centered, e("sqrt", e.add(sigma2, eps)))
        y = e.add(e.mul(y, e.reshape(scale, per_channel)), e.reshape(bias, per_channel))
        ed.replace_uses(node.output, y)
        ed.remove(node)
        count = int(np.prod(shape)) // shape[1]
        for stat, batch, correction in ((mean, mu, 1.0), (var, sigma2, count / max(count - 1, 1))):
            if stat not in graph.constants:
                continue
            batch = e.reshape(batch, (shape[1],))
            new = e.add(e.scale(stat, 1.0 - momentum), e.scale(batch, momentum * correction))
            (named,) = ed.add("identity", [new], outputs=[f"{stat}.next"], name=f"{stat}.next")
            updates[stat] = named
    if updates:
        ed.output_names = [*ed.output_names, *updates.values()]
        ed.name_outputs(ed.output_names)
    return ed.build(), updates
