"""Golden: anekit's emission of the netplists Apple compiled, against Apple's .hwx field by field.

benchmarks/hwx_golden.py holds the cases (which netplist each program came from) and the
explanation of every field that differs; these tests hold the floor it reaches."""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hwx_golden.py"
# the fraction of register fields equal, per program (zin 4.2.1 is the compiler anekit follows)
FLOOR = {"relu": 1.0, "sigmoid": 1.0, "conv": 1.0, "model_golden": 1.0, "gemm": 0.98,
         "sum": 0.99, "concat": 0.99, "mul_zin5": 0.96, "mul_zin7": 0.83}  # fmt: skip


@cache
def _golden():
    spec = importlib.util.spec_from_file_location("hwx_golden_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("program", sorted(FLOOR))
def test_emitted_fields_match_apple(program):
    row = _golden().compare(program)
    assert row["descriptors"][0] == row["descriptors"][1]
    assert row["fraction"] >= FLOOR[program], row["differences"]
    unexplained = [d["field"] for d in row["differences"] if not d["why"]]
    assert not unexplained, unexplained


def test_the_zin4_programs_without_l2_padding_match_exactly():
    for program in ("relu", "sigmoid", "conv", "model_golden"):
        assert _golden().compare(program)["differences"] == []


def test_golden_benchmark_smoke(tmp_path):
    out = tmp_path / "golden.json"
    assert _golden().main(["--smoke", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [row["program"] for row in doc["rows"]] == ["relu", "sum"]
    assert doc["unexplained"] == [] and doc["equal"] <= doc["total"]
