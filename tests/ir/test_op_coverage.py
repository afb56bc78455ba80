"""One table over every IR op: what each is missing. For each op of the registry it checks

- a converter: some ONNX converter emits it (named in the converter sources, or the ONNX
  op type lowercased, as CumSum -> cumsum);
- a MIL lowering, or the documented reason it has none (OpDef.no_lowering), never both;
- engine traits that resolve: a declared layer type is one ir/engine.py's UNITS knows;
- a simulator kernel for every MIL op its lowering emits (the lowering run on the cases of
  tests/codegen/cases.py, for M1's and M4's engine dialects and the CPU).

An op missing something must be listed in EXEMPT with the reason; the test fails on a new
gap and on an exemption that is no longer needed, printing the whole report.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from anekit import targets
from anekit.codegen.lower import supported_ops as lowered_ops
from anekit.codegen.mil import emit_segment, whole_graph_segment
from anekit.frontend.onnx.converters import CONVERTERS
from anekit.ir.engine import UNITS
from anekit.ir.registry import get_op, op_names
from anekit.simulator import supported_ops as sim_ops
from tests.codegen.cases import ALL_CASES, CPU_ONLY

FRONTEND = Path(__file__).resolve().parents[2] / "src" / "anekit" / "frontend" / "onnx"
CONFIGS = (("m1", "ane"), ("m4", "ane"), ("m4", "cpu"))

# (op, what) -> why it is missing, on purpose
EXEMPT: dict[tuple[str, str], str] = {
    # made by the fuse pass from other ops; no model names them
    ("ane_layer", "converter"): "the engine layer: fuse_epilogues builds it",
    ("goc", "converter"): "the gain/offset unit: fuse_epilogues builds it",
    # their lowerings have test files of their own (test_lower_quant.py,
    # test_lower_reverse_sequence.py, test_lower_grid_sample.py) that run them on the sim
    ("quantize_linear", "sim kernels"): "no case here; test_lower_quant.py runs it on the sim",
    ("dequantize_linear", "sim kernels"): "no case here; test_lower_quant.py runs it on the sim",
    ("reverse_sequence", "sim kernels"): "no case here; its own test runs it on the sim",
    ("grid_sample", "sim kernels"): "no case here; test_lower_grid_sample.py runs it on the sim",
}


def _converter_names() -> set[str]:
    text = "".join(p.read_text() for p in FRONTEND.rglob("*.py"))
    return set(re.findall(r'"([a-z_0-9]+)"', text)) | {k.lower() for k in CONVERTERS}


def _mil_ops_by_ir_op() -> dict[str, set[str]]:
    """IR op -> the MIL ops emitted for the codegen cases it appears in (a case of several ops
    counts all of its MIL ops for each of them: a missing kernel is never overlooked)."""
    found: dict[str, set[str]] = {}
    for case in ALL_CASES:
        graph, _ = case.build(np.random.default_rng(0))
        ops = {n.op for n in graph.nodes}
        for n in graph.nodes:  # an engine layer lowers its main op and its epilogue steps
            if n.op == "ane_layer":
                ops |= {n.attrs["main"], *(step.op for step in n.attrs["epilogue"])}
        for chip, device in CONFIGS:
            if (case.name, device) in CPU_ONLY:
                continue
            seg = emit_segment(graph, whole_graph_segment(graph, device), targets.get(chip))
            mil = {o.op for o in seg.program.function("main").operations}
            for ir_op in ops:
                found.setdefault(ir_op, set()).update(mil - {"const"})
    return found


@pytest.fixture(scope="module")
def report() -> dict[tuple[str, str], str]:
    converters = _converter_names()
    lowered = lowered_ops()
    emitted = _mil_ops_by_ir_op()
    kernels = set(sim_ops())
    gaps: dict[tuple[str, str], str] = {}
    for op in op_names():
        record = get_op(op)
        if op not in converters:
            gaps[(op, "converter")] = "no ONNX converter emits it"
        if (op in lowered) == bool(record.no_lowering):
            gaps[(op, "lowering")] = (
                "a lowering and a no_lowering reason" if op in lowered else "neither"
            )
        if record.layer_type and record.layer_type not in UNITS:
            gaps[(op, "engine traits")] = f"layer type '{record.layer_type}' has no unit"
        if op in lowered:
            if op not in emitted:
                gaps[(op, "sim kernels")] = "no codegen case shows which MIL ops it emits"
            elif emitted[op] - kernels:
                gaps[(op, "sim kernels")] = f"no kernel for {sorted(emitted[op] - kernels)}"
    return gaps


def test_every_op_has_what_it_needs_or_an_exemption(report: dict[tuple[str, str], str]) -> None:
    new = {k: v for k, v in report.items() if k not in EXEMPT}
    stale = sorted(k for k in EXEMPT if k not in report)
    lines = [f"{op:24} {what:14} {why}" for (op, what), why in sorted(report.items())]
    assert not new and not stale, (
        f"missing without exemption: {sorted(new)}\nexempt but no longer missing: {stale}\n"
        + "\n".join(lines)
    )


def test_the_report_covers_every_op() -> None:
    assert len(op_names()) > 100 and all(get_op(op).name == op for op in op_names())
