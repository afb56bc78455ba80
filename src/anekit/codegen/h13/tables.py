"""The activation tables the writer puts in kernel tile 0 (layout: anekit.formats.hwx.h13)."""

from __future__ import annotations

import math

import numpy as np

from anekit.formats.hwx.h13 import LUT_ENTRIES, LUT_FIRST, LUT_LOW, LUT_SAMPLES, LUT_STEP


def _phi(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _phi_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


# Each function saturates at both ends of [-8, 8], where the table clamps: GELU is written
# as x * Phi(x) (the table holds the gate Phi) so that large inputs stay exact.
FUNCTIONS = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu_gate": _phi,
    "gelu_gate_tanh": _phi_tanh,
}


def activation_table(name: str) -> bytes:
    """The 128-byte table of `name` sampled on [-8, 8] at a step of 0.5, fp16."""
    table = np.zeros(LUT_ENTRIES, np.float16)
    x = LUT_LOW + LUT_STEP * np.arange(LUT_SAMPLES, dtype=np.float64)
    table[LUT_FIRST : LUT_FIRST + LUT_SAMPLES] = FUNCTIONS[name](x)
    return table.tobytes()
