"""IR ops lowered to MIL operations: one function per op family, gathered in one table."""

from anekit.codegen.lower.context import Call, Lowering
from anekit.codegen.lower.dispatch import LOWERINGS, lower_call, supported_ops

__all__ = ["LOWERINGS", "Call", "Lowering", "lower_call", "supported_ops"]
