"""The trained model: a Graph with the trained values as constants, or the source ONNX
model with its initializers replaced."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anekit import atomic
from anekit.ir.graph import Graph
from anekit.train.modes import dropout_rate


def export_graph(model: Graph, state: Mapping[str, np.ndarray]) -> Graph:
    ed = model.edit()
    for name, value in state.items():
        if name in ed.constants:
            ed.constants[name] = np.asarray(value, dtype=ed.constants[name].dtype)
    for v in list(ed.inputs):
        if dropout_rate(v.name) is not None:  # evaluation: keep everything
            ed.inputs.remove(v)
            ed.constants[v.name] = np.ones(v.shape, v.dtype.numpy)
    return ed.build()


def onnx_sources(proto, graph: Graph) -> dict[str, tuple[str, bool]]:
    """For each float constant of ``graph`` that holds an ONNX initializer: (initializer
    name, transposed). The importer keeps initializer names, except where it folded a
    transpose into the weight (Gemm with transB): those are matched by value."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    found: dict[str, tuple[str, bool]] = {}
    for name, array in graph.constants.items():
        if array.dtype.kind != "f":
            continue
        if name in inits and inits[name].shape == array.shape:
            found[name] = (name, False)
            continue
        if array.ndim == 2:
            matches = [n for n, a in inits.items()
                       if a.shape == array.shape[::-1] and np.array_equal(a.T, array)]  # fmt: skip
            if len(matches) == 1:
                found[name] = (matches[0], True)
    return found


def export_onnx(proto, sources: Mapping[str, tuple[str, bool]], state: Mapping[str, np.ndarray],
                path: str | os.PathLike[str]) -> Path:  # fmt: skip
    """``proto`` with the initializers behind trained constants replaced (atomic write)."""
    import onnx
    from onnx import numpy_helper

    from anekit.errors import ModelError

    lost = sorted(n for n in state if n not in sources)
    values = {}
    for name, value in state.items():
        if name not in sources:
            continue
        init, transposed = sources[name]
        values[init] = np.asarray(value).T if transposed else np.asarray(value)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for init in out.graph.initializer:
        if init.name in values:
            dtype = numpy_helper.to_array(init).dtype
            init.CopyFrom(
                numpy_helper.from_array(np.ascontiguousarray(values[init.name], dtype), init.name)
            )
    if lost:
        raise ModelError(f"trained values {lost} have no ONNX initializer to go back to")
    # a fixed temporary name would be shared by two writers; replace_file's is unique
    return atomic.replace_file(path, lambda handle: handle.write(out.SerializeToString()))
