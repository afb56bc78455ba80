"""benchmarks/llm_scale.py --smoke: the real-size benchmark's code paths on SmolLM2's and
Gemma 3's published configurations cut to 2 layers (bf16 checkpoints, child processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_llm_scale_smoke(tmp_path) -> None:
    output = tmp_path / "smoke.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "llm_scale.py"), "--smoke", "--model", "smollm2-135m",
         "--model", "gemma-3-1b", "--output", str(output)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(output.read_text())
    assert [m["model"] for m in doc["models"]] == ["smollm2-135m", "gemma-3-1b"]
    for row in doc["models"]:
        entry = row["contexts"]["64"]
        assert "error" not in entry and "error" not in row["transformers_fp32"], entry
        assert entry["weights"]["source_dtypes"] == ["BF16"]
        assert entry["tokens_equal"] and entry["first_logits_cosine"] >= 0.9999
        assert entry["peak_rss"] > 0 and entry["plan"]["dispatches_per_token"] >= 1
