"""A small run of Orion's stability test: fresh process per step, no NaN, loss falling."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_chains_of_two_fresh_process_steps(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "train_stability", ROOT / "benchmarks" / "train_stability.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(chains=2, steps=2, pretrain_steps=2, workdir=tmp_path)
    assert result["nan_inf_occurrences"] == 0
    assert result["skipped_steps_per_chain"] == [0, 0]
    assert result["loss_falling_every_step"] == 2
    losses = np.array(result["losses"])
    assert np.isfinite(losses).all() and (losses[:, 1] < losses[:, 0]).all()
