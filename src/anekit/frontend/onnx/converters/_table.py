"""The ONNX op table: op type -> converter function (filled by the converter modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anekit.frontend.onnx.context import NodeContext

Converter = Callable[["NodeContext"], "str | tuple[str, ...]"]
CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register a converter for ONNX op types: a default-domain op by its name, another
    domain's as "domain.Name" (e.g. "com.microsoft.Gelu")."""

    def wrap(fn: Converter) -> Converter:
        for t in op_types:
            if t in CONVERTERS:
                raise ValueError(f"ONNX op {t} has two converters")
            CONVERTERS[t] = fn
        return fn

    return wrap
