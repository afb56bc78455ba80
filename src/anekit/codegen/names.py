"""MIL names from IR names: valid identifiers, unique within a program, stable for the same graph."""

from __future__ import annotations

import re

from anekit.formats.mil.types import DTYPES, TYPE_WORDS
from anekit.naming import fresh_name

# Words a MIL reader takes for something other than a variable where a variable may stand.
RESERVED = frozenset(
    {*DTYPES, *TYPE_WORDS, "true", "false", "inf", "nan", "BLOBFILE", "program", "func"}
)
_INVALID = re.compile(r"[^A-Za-z0-9_]+")


def sanitize(name: str) -> str:
    """``name`` as a MIL identifier: runs of other characters become one ``_``.

    ONNX names such as ``/h.0/attn/MatMul_output_0`` become ``h_0_attn_MatMul_output_0``;
    a name that would start with a digit (or be empty) gets a ``v_`` prefix, a reserved
    word (a dtype, ``tensor``, ``true``, ...) a trailing ``_``.
    """
    text = _INVALID.sub("_", name).strip("_")
    if not text or text[0].isdigit():
        text = f"v_{text}"
    if text in RESERVED:
        text += "_"
    return text


class Namer:
    """Hands out MIL names for one program; the same sequence of requests gives the same names.

    ``value(ir_name)`` is the name of an IR value (asked twice, the same answer);
    ``fresh(hint)`` a new name for an op the emitter invents. Clashes get ``_1``, ``_2``, ...
    """

    def __init__(self, reserved: set[str] | frozenset[str] = frozenset()) -> None:
        self._taken: set[str] = set(reserved)
        self._by_value: dict[str, str] = {}

    def fresh(self, hint: str) -> str:
        name = fresh_name(sanitize(hint), self._taken)
        self._taken.add(name)
        return name

    def value(self, ir_name: str) -> str:
        found = self._by_value.get(ir_name)
        if found is None:
            found = self._by_value[ir_name] = self.fresh(ir_name)
        return found

    def has_value(self, ir_name: str) -> bool:
        return ir_name in self._by_value
