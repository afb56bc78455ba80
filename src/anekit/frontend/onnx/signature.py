"""A model's declared inputs and outputs as the ONNX file states them (symbolic dimensions
kept), and the `--shape` hint for its dynamic dimensions.

The hint lists every dynamic dimension of every input at once, by its symbolic name, and
suggests sizes the model's own shape arithmetic accepts: a size is offered only when the
model imports with it (a detector whose feature maps are upsampled and concatenated refuses
H = W = 1, for example); dimensions that share a symbolic name get one size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import onnx

from anekit.frontend.onnx.converters.dtypes import ONNX_DTYPES
from anekit.frontend.onnx.loader import onnx_type_name

# Sizes tried for the non-batch dynamic dimensions, smallest first. Dimension 0 of an input
# of rank 2 or more is taken as the batch and set to 1; no other dimension is offered 1,
# which imports for most models (a 1x1 image, a 1-token sequence) and means nothing.
_CANDIDATES = (32, 64, 128, 224, 256, 320, 512, 640)
_TRIAL_SECONDS = 10.0  # the search stops here and says so


@dataclass(frozen=True)
class Declared:
    """One input or output: its name, element type and dims (an int, a symbolic name, or
    None for an unnamed unknown size); ``dims`` is None when no shape is declared."""

    name: str
    dtype: str
    dims: tuple[int | str | None, ...] | None

    def dynamic(self) -> list[int]:
        """Indices of the dimensions without a fixed size."""
        return [k for k, d in enumerate(self.dims or ()) if not isinstance(d, int) or d < 0]

    def shape_text(self) -> str:
        if self.dims is None:
            return f"{self.dtype}[?]"
        sep = "x" if not self.dynamic() else ", "  # "x" would run into symbolic names
        return f"{self.dtype}[{sep.join(_dim_text(d) for d in self.dims)}]"


def _dim_text(d: int | str | None) -> str:
    return (str(d) if d >= 0 else "?") if isinstance(d, int) else (d or "?")


def _dim_name(k: int, d: int | str | None) -> str:
    if isinstance(d, int):  # a negative size: some exporters write -1 for "any"
        return f"{k} (declared {d}, which is not a size)"
    return f"{k} ('{d}')" if d else f"{k} (unnamed)"


def _declared(vi: onnx.ValueInfoProto) -> Declared:
    tt = vi.type.tensor_type
    dtype = (
        ONNX_DTYPES[tt.elem_type].value
        if tt.elem_type in ONNX_DTYPES
        else onnx_type_name(tt.elem_type)
    )
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return Declared(vi.name, dtype, None)
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return Declared(vi.name, dtype, tuple(dims))


def declared_inputs(proto: onnx.ModelProto) -> list[Declared]:
    """The graph inputs that are not initializers, as declared."""
    weights = {t.name for t in proto.graph.initializer}
    return [_declared(vi) for vi in proto.graph.input if vi.name not in weights]


def declared_outputs(proto: onnx.ModelProto) -> list[Declared]:
    return [_declared(vi) for vi in proto.graph.output]


def dynamic_dimensions_text(inputs: list[Declared]) -> str:
    """ "input 'x' fp32[batch, 3, h, w]: dimensions 0 ('batch'), 2 ('h'), 3 ('w'); ..." """
    parts = []
    for v in inputs:
        if v.dims is None:
            parts.append(f"input '{v.name}' has no declared shape")
            continue
        dynamic = v.dynamic()
        if dynamic:
            dims = ", ".join(_dim_name(k, v.dims[k]) for k in dynamic)
            word = "dimension" if len(dynamic) == 1 else "dimensions"
            parts.append(f"input '{v.name}' {v.shape_text()}: {word} {dims}")
    return "; ".join(parts)


def suggest_shapes(
    inputs: list[Declared], imports: Callable[[dict[str, tuple[int, ...]]], str | None]
) -> tuple[dict[str, tuple[int, ...]] | None, str]:
    """Sizes for every dynamic dimension that the model imports with, and how they were
    found (or why none was).

    ``imports(shapes)`` tries the model with the given input shapes: None when it imports,
    else the error. Batch dimensions are 1, the other dynamic ones take each candidate size
    together, smallest first."""
    dynamic = [v for v in inputs if v.dims is not None and v.dynamic()]
    if not dynamic:
        return None, ""

    def shapes_with(size: int) -> dict[str, tuple[int, ...]]:
        by_name: dict[str, int] = {}
        out = {}
        for v in dynamic:
            dims = []
            for k, d in enumerate(v.dims or ()):
                if isinstance(d, int) and d >= 0:
                    dims.append(d)
                    continue
                want = 1 if k == 0 and len(v.dims or ()) > 1 else size
                dims.append(by_name.setdefault(d, want) if isinstance(d, str) else want)
            out[v.name] = tuple(dims)
        return out

    start, error = time.monotonic(), None
    for size in _CANDIDATES:
        if time.monotonic() - start > _TRIAL_SECONDS:
            return None, f"no size below {size} imports within {_TRIAL_SECONDS:.0f} s"
        shapes = shapes_with(size)
        error = imports(shapes)
        if error is None:
            only_batch = all(k == 0 and len(v.dims or ()) > 1 for v in dynamic for k in v.dynamic())
            how = "" if only_batch else "the smallest size tried that the model imports with"
            return shapes, how
    return None, f"with every size tried from {_CANDIDATES[0]} to {_CANDIDATES[-1]}: {error}"


def placeholder_shapes(inputs: list[Declared]) -> dict[str, str]:
    """Each dynamic dimension by its symbolic name in capitals (D1, D2, ... when unnamed)."""
    out, unnamed = {}, 0
    for v in inputs:
        dims = []
        for d in v.dims or ():
            if isinstance(d, int) and d >= 0:
                dims.append(str(d))
            elif isinstance(d, str) and d != "?":
                dims.append(d.upper())
            else:
                unnamed += 1
                dims.append(f"D{unnamed}")
        out[v.name] = "x".join(dims)
    return out


def shape_option_text(shapes: dict[str, tuple[int, ...]]) -> str:
    return " ".join(f"--shape {k}={'x'.join(map(str, v))}" for k, v in shapes.items())
