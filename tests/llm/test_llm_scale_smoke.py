"""benchmarks/llm_scale.py --smoke: the real-size benchmark's code paths on the published
configurations of SmolLM2-135M, Qwen3-0.6B, Llama-3.2-1B (llama3 rotary scaling) and
Gemma-3-1B cut to 2 layers and a 2048-token vocabulary: bf16 checkpoints, child processes,
greedy tokens equal to transformers fp32."""

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
        [sys.executable, str(ROOT / "benchmarks" / "llm_scale.py"), "--smoke", "--max-memory", "8G", "--output", str(output)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(output.read_text())
    assert [m["model"] for m in doc["models"]] == ["smollm2-135m", "qwen3-0.6b", "llama-3.2-1b", "gemma-3-1b"]
    for row in doc["models"]:
        entry = row["contexts"]["64"]
        assert "error" not in entry and "error" not in row["transformers_fp32"], entry
        assert entry["weights"]["source_dtypes"] == ["BF16"]
        assert entry["tokens_equal"] and entry["first_logits_cosine"] >= 0.9999
        assert entry["peak_rss"] > 0 and entry["plan"]["dispatches_per_token"] >= 1
