"""ONNX op converters, one module per op family; CONVERTERS is the op table."""

from anekit.frontend.onnx.converters import elementwise, linalg, nn, reduce, shape  # noqa: F401
from anekit.frontend.onnx.converters._table import CONVERTERS, converter

__all__ = ["CONVERTERS", "converter"]
