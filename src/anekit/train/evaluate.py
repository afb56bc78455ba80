"""Evaluation of a trainer's current model: the exported graph run on the trainer's backend
in batches of the model's own (static) batch size, the last one padded; loss and accuracy
are computed on the host from the outputs of the real rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.train.step import TARGET


def evaluate(
    trainer: Any, data: Mapping[str, np.ndarray], batch_size: int | None = None
) -> dict[str, float]:
    model = trainer.export()
    output = model.output_names[0]
    rows = model.inputs[0].shape[0]
    run = _runner(trainer, model)
    t_all = np.asarray(data[TARGET])
    n = len(t_all)
    outputs = []
    for start in range(0, n, rows):
        batch = {v.name: _padded(np.asarray(data[v.name])[start:start + rows], rows)
                 for v in model.inputs}  # fmt: skip
        out = np.asarray(run(batch)[output], np.float64)
        outputs.append(out[: min(rows, n - start)])
    y = np.concatenate(outputs)
    if trainer.loss == "cross_entropy":
        z = y.reshape(-1, y.shape[-1])
        logp = z - z.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        if t_all.dtype.kind in "iu":
            labels = t_all.reshape(-1)
            return {"loss": float(-logp[np.arange(len(labels)), labels].mean()),
                    "accuracy": float((z.argmax(-1) == labels).mean())}  # fmt: skip
        return {"loss": float(-(t_all.reshape(z.shape) * logp).sum(-1).mean())}
    if trainer.loss == "mse":
        return {"loss": float(((y - t_all) ** 2).mean())}
    raise ModelError("evaluate() computes the built-in losses only; run trainer.export()")


def _padded(a: np.ndarray, rows: int) -> np.ndarray:
    if len(a) == rows:
        return a
    return np.concatenate([a, np.repeat(a[-1:], rows - len(a), axis=0)])


def _runner(trainer: Any, model: Any) -> Any:
    if trainer.backend == "reference":
        return model.run
    from anekit.compiler import compile as compile_model

    program = compile_model(model, trainer.chip).program
    return lambda feeds: program.run(feeds, backend=trainer.backend)
