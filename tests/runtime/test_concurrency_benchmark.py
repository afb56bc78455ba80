"""benchmarks/runtime_concurrency.py --smoke: five real processes (a loader, two updaters,
a recompiler, a cache user) on one bundle and one cache for three seconds; every role does
work and nothing is corrupt, torn or raised unexpectedly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "runtime_concurrency.py"


def test_the_concurrency_stress_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "stress.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(BENCHMARK), "--smoke", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["processes"] == 5 and doc["findings"] == 0
    assert doc["corrupt_bundles"] == 0 and doc["corrupt_reads"] == 0
    assert doc["unexpected_errors"] == 0
    assert set(doc["by_role"]) == {"loader", "updater-w1", "updater-w2", "recompiler", "cache"}
    assert all(row["operations"] > 0 for row in doc["by_role"].values()), doc["by_role"]
    assert doc["final_check"]["leftover_temporary_files"] == []
