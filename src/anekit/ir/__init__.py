"""The graph IR: values, nodes, graphs, dtypes and the op registry."""

from anekit.ir.dtypes import DType, to_dtype
from anekit.ir.edit import GraphEditor
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.registry import (
    REQUIRED,
    Attr,
    InferError,
    KernelError,
    OpDef,
    TensorType,
    get_op,
    infer_types,
    op_names,
)

__all__ = [
    "REQUIRED",
    "Attr",
    "DType",
    "Graph",
    "GraphEditor",
    "InferError",
    "KernelError",
    "Node",
    "OpDef",
    "TensorType",
    "Value",
    "get_op",
    "infer_types",
    "op_names",
    "to_dtype",
]
