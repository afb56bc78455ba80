"""The trained model: a Graph with the trained values as constants, or the source ONNX
model with its initializers replaced."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

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


def export_onnx(proto, state: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> Path:
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for init in out.graph.initializer:
        if init.name in state:
            dtype = numpy_helper.to_array(init).dtype
            init.CopyFrom(numpy_helper.from_array(np.asarray(state[init.name], dtype), init.name))
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    onnx.save(out, tmp)
    os.replace(tmp, path)
    return path
