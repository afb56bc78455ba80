"""The ONNX frontend: `from_onnx` and the op table."""

from anekit.frontend.onnx.converters import CONVERTERS
from anekit.frontend.onnx.importer import from_onnx

__all__ = ["CONVERTERS", "from_onnx", "supported_onnx_ops"]


def supported_onnx_ops() -> list[str]:
    """The ONNX op types (default domain) the importer converts."""
    return sorted(CONVERTERS)
