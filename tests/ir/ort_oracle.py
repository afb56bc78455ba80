"""Test helpers: run one ONNX node in onnxruntime (the oracle) and one IR op's kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from anekit.ir.dtypes import to_dtype
from anekit.ir.registry import TensorType, get_op, infer_types


def run_ort(
    op_type: str, inputs: list[np.ndarray | None], n_out: int = 1, opset: int = 22, **attrs: Any
) -> list[np.ndarray]:
    """One ONNX node in onnxruntime; a None input is an absent optional input."""
    import onnxruntime as ort

    names = ["" if a is None else f"i{k}" for k, a in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    present = [(n, a) for n, a in zip(names, inputs, strict=True) if a is not None]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in present
        ],
        [helper.make_empty_tensor_value_info(o) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(present))


def run_ir(op: str, inputs: list[np.ndarray | None], **attrs: Any) -> list[np.ndarray]:
    """One IR op: inference, then its kernel; checks the kernel against the inferred types."""
    types = [None if a is None else TensorType(a.shape, to_dtype(a.dtype)) for a in inputs]
    norm, out_types = infer_types(op, types, attrs)
    wide = [a.astype(np.float32) if a is not None and a.dtype == np.float16 else a for a in inputs]
    result = get_op(op).kernel(*wide, **norm)
    result = list(result) if isinstance(result, tuple) else [result]
    for r, t in zip(result, out_types, strict=True):
        assert np.shape(r) == t.shape, f"kernel shape {np.shape(r)} != inferred {t.shape}"
    return [np.asarray(r).astype(t.dtype.numpy) for r, t in zip(result, out_types, strict=True)]


def types(*shapes: tuple[int, ...], dtype: str = "fp32") -> list[TensorType]:
    return [TensorType(s, to_dtype(dtype)) for s in shapes]
