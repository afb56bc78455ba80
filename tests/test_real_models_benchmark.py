"""`benchmarks/real_models.py --smoke`: the models shipped in tests/data/real_models go through
the benchmark's recording session (onnxruntime's InferenceSession replaced, the simulator's
answers handed back), and the JSON it writes says what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_smoke_run_writes_agreeing_results(tmp_path: Path) -> None:
    out = tmp_path / "real_models.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "real_models.py"), "--smoke", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["smoke"] is True and doc["wrong_answers"] == 0 and doc["refused_models"] == []
    models = {m["file"]: m for case in doc["cases"] for m in case["models"]}
    assert set(models) == {"silero_vad.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx"}
    for m in models.values():
        assert m["calls"] == 1 and m["compiles"] == 1 and m["min_cosine"] > 0.999
        assert m["time_ratio"] > 0 and m["compile_seconds_max"] > 0
    # the VAD's sample rate (a 0-d integer feed) was fixed as a constant: its If folded
    assert "(('sr', 16000),)" in models["silero_vad.onnx"]["shapes"][0]
    assert all(case["decoded_agree"] for case in doc["cases"])
