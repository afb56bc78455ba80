"""`Emitter`: terse node construction on a GraphEditor, used by the gradient rules and the
optimizer. Every helper adds ordinary IR nodes, so what it builds compiles like any graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anekit.ir.edit import GraphEditor


class Emitter:
    """Adds nodes to ``editor``; each call returns the output value name(s)."""

    def __init__(self, editor: GraphEditor, prefix: str = "grad"):
        self.ed = editor
        self.prefix = prefix

    def __call__(self, op: str, *inputs: str | None, **attrs: Any) -> str:
        (out,) = self.ed.add(op, list(inputs), attrs, name=f"{self.prefix}/{op}")
        return out

    def multi(self, op: str, inputs: Sequence[str | None], **attrs: Any) -> tuple[str, ...]:
        return self.ed.add(op, list(inputs), attrs, name=f"{self.prefix}/{op}")

    def outputs(self, named: Mapping[str, str]) -> None:
        """Make the graph's outputs exactly ``named`` (output name -> value), each through an
        identity node so the output carries its name."""
        outs = []
        for name, value in named.items():
            (o,) = self.ed.add("identity", [value], outputs=[name], name=f"out/{name}")
            outs.append(o)
        self.ed.output_names = outs
        self.ed.name_outputs(outs)

    # --- values --------------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...]:
        return self.ed.values[name].shape

    def rank(self, name: str) -> int:
        return len(self.shape(name))

    def const(self, value: Any, like: str | None = None, hint: str = "c") -> str:
        """A constant; scalars take ``like``'s dtype (fp32 if none)."""
        dt = self.ed.values[like].dtype.numpy if like is not None else np.float32
        return self.ed.add_constant(np.asarray(value, dtype=dt), f"{self.prefix}/{hint}")

    def scalar(self, value: float, like: str) -> str:
        return self.const(value, like)

    # --- common shapes of code -----------------------------------------------------------

    def mul(self, a: str, b: str) -> str:
        return self("mul", a, b)

    def add(self, a: str, b: str) -> str:
        return self("add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self("sub", a, b)

    def div(self, a: str, b: str) -> str:
        return self("div", a, b)

    def neg(self, a: str) -> str:
        return self("neg", a)

    def scale(self, a: str, k: float) -> str:
        return self.mul(a, self.scalar(k, a))

    def reshape(self, a: str, shape: Sequence[int]) -> str:
        shape = tuple(int(d) for d in shape)
        return a if self.shape(a) == shape else self("reshape", a, shape=shape)

    def transpose(self, a: str, perm: Sequence[int]) -> str:
        perm = tuple(perm)
        return a if perm == tuple(range(len(perm))) else self("transpose", a, perm=perm)

    def sum_axes(self, a: str, axes: Sequence[int], keepdims: bool = True) -> str:
        if not axes:
            return a
        return self("reduce_sum", a, axes=tuple(axes), keepdims=keepdims)

    def sum_to(self, g: str, shape: Sequence[int]) -> str:
        """Undo numpy broadcasting: sum ``g`` down to ``shape``."""
        shape = tuple(shape)
        gshape = self.shape(g)
        if gshape == shape:
            return g
        lead = len(gshape) - len(shape)
        axes = list(range(lead))
        axes += [lead + i for i, d in enumerate(shape) if d == 1 and gshape[lead + i] != 1]
        return self.reshape(self.sum_axes(g, axes), shape)

    def broadcast_to(self, g: str, shape: Sequence[int]) -> str:
        shape = tuple(shape)
        return g if self.shape(g) == shape else self("expand", g, shape=shape)

    def step(self, x: str, at: float = 0.0) -> str:
        """The unit step at ``at`` as arithmetic: 0 for x <= at, 1 for x >= at + 1/L, linear
        between, with L = 65504 / max(1, |at|).

        The engine has no boolean tensors (a comparison would send the mask to a CPU
        segment); this form stays in fp16 and never makes NaN (x*L overflows to +-inf,
        which the clip maps to 1 or 0). L shrinks with |at| because the compiler may fold
        (x - at) * L into x * L - at * L, whose offset must stay inside fp16."""
        gain = 65504.0 / max(1.0, abs(at))
        shifted = self.sub(x, self.scalar(at, x)) if at else x
        return self("clip", self.scale(shifted, gain), min=0.0, max=1.0)

    def accumulate(self, parts: Sequence[str]) -> str:
        total = parts[0]
        for p in parts[1:]:
            total = self.add(total, p)
        return total
