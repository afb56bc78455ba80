"""Run by the resume tests in a fresh process: train some steps from a new trainer or from
a checkpoint, then save. Usage: python -m tests.train.resume_worker CKPT STEPS [--start]."""

from __future__ import annotations

import sys

from anekit.train import Adam, Trainer
from tests.train.models import digits, mlp, mlp_weights


def main(argv: list[str]) -> None:
    path, steps = argv[0], int(argv[1])
    train, _ = digits(256)
    if "--start" in argv:
        model = mlp(32, mlp_weights((64, 32, 10)), dropout=0.2)
        trainer = Trainer(model, "cross_entropy", Adam(lr=3e-3), backend="sim", seed=7)
    else:
        trainer = Trainer.load(path)
    trainer.fit(train, epochs=10, batch_size=32, steps=steps, progress=False)
    trainer.save(path)


if __name__ == "__main__":
    main(sys.argv[1:])
