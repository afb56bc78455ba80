"""Every com.microsoft op onnxruntime's own Python tools (its quantizers and transformer
optimizer) can write is either converted or listed with the reason in docs/real_models.md,
and the doc's table of converted ops is the converter table's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import onnxruntime

from anekit.frontend.onnx import CONVERTERS

MS = "com.microsoft."
DOC = Path(__file__).resolve().parents[2] / "docs" / "real_models.md"


def _written_by_onnxruntimes_tools() -> set[str]:
    """com.microsoft schema names quoted in onnxruntime's quantization and transformers
    packages, and the QOperator names its quantizer builds as "QLinear" + op_type."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c
    from onnxruntime.quantization import registry

    schemas = {s.name for s in ort_c.get_all_operator_schema() if s.domain == "com.microsoft"}
    root = Path(onnxruntime.__file__).parent
    text = "\n".join(
        p.read_text(errors="replace")
        for folder in ("quantization", "transformers")
        for p in sorted((root / folder).rglob("*.py"))
    )
    found = {n for n in schemas if re.search(rf"[\"']{n}[\"']", text)}
    for op, quantizer in registry.QLinearOpsRegistry.items():
        if '"QLinear" + node.op_type' in inspect.getsource(quantizer) and f"QLinear{op}" in schemas:
            found.add(f"QLinear{op}")
    return found


def _doc_tables() -> tuple[set[str], set[str]]:
    """The op names in the first column of the section's two tables: converted, refused."""
    section = DOC.read_text().split("## com.microsoft ops", 1)[1].split("\n## ", 1)[0]
    converted, refused = section.split("and not converted, and why", 1)
    names = []
    for part in (converted, refused):
        rows = [line for line in part.splitlines() if line.startswith("| `")]
        names.append({n for row in rows for n in re.findall(r"`([A-Z]\w+)`", row.split("|")[1])})
    return names[0], names[1]


def test_every_op_onnxruntimes_tools_write_is_converted_or_documented_as_refused() -> None:
    converted_ms = {k.removeprefix(MS) for k in CONVERTERS if k.startswith(MS)}
    default_domain = {k for k in CONVERTERS if "." not in k}  # e.g. Range, Pad: written as ONNX's
    _, refused = _doc_tables()
    written = _written_by_onnxruntimes_tools()
    assert {"DynamicQuantizeLSTM", "QAttention", "QLinearAveragePool", "GroupNorm"} <= written
    assert written - converted_ms - default_domain - refused == set()
    assert refused & converted_ms == set(), "an op listed as refused has a converter"


def test_the_docs_table_of_converted_ops_is_the_converter_table() -> None:
    converted_ms = {k.removeprefix(MS) for k in CONVERTERS if k.startswith(MS)}
    documented, _ = _doc_tables()
    assert documented == converted_ms
