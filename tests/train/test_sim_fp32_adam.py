"""sim-fp32 runs the sim step program widened: Adam stays finite where gradients are zero,
and the overflow guard covers the state a step would keep, not only its gradients."""

from __future__ import annotations

import numpy as np

from anekit.train import Adam, Trainer
from tests.train.models import digits, mlp, mlp_weights


def _dead_unit_model():  # noqa: ANN202
    w = mlp_weights()
    w["w0"][:, :5] = 0.0
    w["b0"][:5] = -10.0  # five hidden units never fire: their gradients are exactly zero
    return mlp(32, w)


def test_adam_on_sim_fp32_keeps_zero_gradient_weights_finite() -> None:
    train, _ = digits(128)
    batch = {k: v[:32] for k, v in train.items()}
    t = Trainer(_dead_unit_model(), "cross_entropy", Adam(lr=1e-2), backend="sim-fp32")
    losses = [t.step(batch) for _ in range(3)]
    assert np.isfinite(losses).all() and t.skipped == 0
    assert losses[-1] < losses[0]
    for name, value in t.state_values().items():
        assert np.isfinite(value).all(), name


def test_the_guard_discards_a_step_whose_update_is_not_finite() -> None:
    """The fp32 update form in a program whose constants are fp16 (eps 1e-8 stored as 0):
    finite gradients, 0 / 0 in the update; the step is discarded, the state kept."""
    train, _ = digits(128)
    batch = {k: v[:32] for k, v in train.items()}
    t = Trainer(_dead_unit_model(), "cross_entropy", Adam(lr=1e-2), backend="sim-fp32")
    t.fp16 = False  # the update written for fp32 constants
    before = t.state_values()
    t.step(batch)
    assert t.skipped == 1 and t.step_count == 0
    after = t.state_values()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
