"""benchmarks/llm_export.py --smoke runs the export benchmark's code on a small model cut into
chunks and writes its JSON (the 1B-class figures come from the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_export_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "llm_export.py"), "--smoke", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["smoke"] and len(doc["packages"]) == 5  # four one-layer chunks and the head
    assert doc["every_package_within_program_limit"]
    assert all(p["functions"] == ["decode", "prefill_64"] for p in doc["packages"])
    assert [p["states"] for p in doc["packages"]] == [2, 2, 2, 2, 0]
    # shared weights: well under the two copies two functions would need (the rest is
    # each chunk's rotary tables, which are not parameters)
    assert doc["weight_bytes_over_fp16_parameters"] < 1.3
    assert doc["export_seconds"] > 0 and doc["export_peak_rss_bytes"] > 0
