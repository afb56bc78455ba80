"""Every benchmark script runs in its --smoke mode (seconds, tiny sizes, the same code paths),
so none rots between measurements. Scripts are discovered: a new one is covered at once."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
# script -> (the optional dataset it reads, why it cannot run without it)
NEEDS = {
    "train_fashion_mnist.py": (
        FASHION_MNIST,
        "trains on Debian's dataset-fashion-mnist (`make fashion-mnist` installs it)",
    ),
}


# script -> its own test, which runs its --smoke and checks what it measures (the language-model
# benchmarks: minutes of child processes each; running them here too would double that)
OWN_TEST = {
    "llm_scale.py": REPO / "tests" / "llm" / "test_llm_scale_smoke.py",
    "llm_export.py": REPO / "tests" / "llm" / "test_export_benchmark.py",
}
RUN_HERE = [p for p in SCRIPTS if p.name not in OWN_TEST]


def test_benchmarks_with_their_own_smoke_test_are_run_there() -> None:
    for script, test in OWN_TEST.items():
        text = test.read_text()
        assert (BENCHMARKS / script).exists() and script in text and '"--smoke"' in text, test


def _results_digest() -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (BENCHMARKS / "results").iterdir()
        if p.is_file()
    }


def test_every_benchmark_is_found_and_has_a_smoke_mode() -> None:
    assert len(SCRIPTS) >= 20
    missing = [p.name for p in SCRIPTS if "add_smoke(" not in p.read_text()]
    assert not missing, f"benchmarks without --smoke: {missing}"


@pytest.mark.parametrize("script", RUN_HERE, ids=[p.stem for p in RUN_HERE])
def test_benchmark_smoke(script: Path, tmp_path: Path) -> None:
    dataset, reason = NEEDS.get(script.name, (None, ""))
    if dataset is not None and not dataset.exists():
        pytest.skip(f"{script.name}: {dataset} is absent; the script {reason}")
    before = _results_digest()
    env = {
        **os.environ,
        "ANEKIT_SMOKE_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{script.name} --smoke failed:\n{done.stdout}\n{done.stderr}"
    written = sorted(p.name for p in tmp_path.iterdir() if ".smoke." in p.name)
    assert written, f"{script.name} --smoke wrote no *.smoke.* result into $ANEKIT_SMOKE_DIR"
    assert _results_digest() == before, f"{script.name} --smoke changed benchmarks/results"
