"""Exact resume: N steps straight equal k steps, a save, a load in a new process and N-k
more steps, bit for bit on sim (parameters, moments, generator, data order)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.train import checkpoint
from anekit.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def _worker(path: Path, steps: int, start: bool) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    args = [sys.executable, "-m", "tests.train.resume_worker", str(path), str(steps)]
    subprocess.run(args + (["--start"] if start else []), check=True, env=env, cwd=ROOT)


def test_resume_in_a_new_process_is_bit_identical(tmp_path):
    straight, resumed = tmp_path / "straight.ckpt", tmp_path / "resumed.ckpt"
    _worker(straight, 11, start=True)  # 11 steps of 8 per epoch: crosses an epoch boundary
    _worker(resumed, 5, start=True)
    _worker(resumed, 6, start=False)
    a, b = Trainer.load(straight), Trainer.load(resumed)
    assert a.step_count == b.step_count == 11 and a.epoch == b.epoch == 1
    sa, sb = a.state_values(), b.state_values()
    assert sorted(sa) == sorted(sb)
    for name in sa:
        assert np.array_equal(sa[name], sb[name]), name
    assert a.history == b.history
    assert np.array_equal(a.order, b.order) and a.position == b.position


def test_corrupt_checkpoints_are_refused(tmp_path):
    from anekit.train import SGD
    from tests.train.models import mlp, mlp_weights

    path = tmp_path / "m.ckpt"
    Trainer(mlp(4, mlp_weights()), optimizer=SGD(lr=0.1), backend="reference").save(path)
    assert checkpoint.read(path)[0]["step"] == 0
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte somewhere in the arrays
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(bytes(data))
    with pytest.raises(FormatError):
        checkpoint.read(bad)
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    with pytest.raises(FormatError, match="refusing to overwrite"):
        Trainer.load(path).save(other)
    assert other.read_text() == "mine"
