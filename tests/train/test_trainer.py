"""Trainer: steps match torch on the fp32 reference, training on sim learns digits,
checkpoints restore exactly and refuse corrupt files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anekit.train import SGD, Adam, AdamW, Trainer, warmup_cosine
from tests.train.models import digits, mlp, mlp_weights


def torch_steps(weights, batches, make_opt, clip=None):
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in weights.items()}
    opt = make_opt(list(params.values()))
    losses = []
    for b in batches:
        h = torch.relu(torch.tensor(b["x"]) @ params["w0"] + params["b0"])
        logits = h @ params["w1"] + params["b1"]
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(b["target"]))
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in params.items()}


OPTIMIZERS = {
    "sgd": (lambda: SGD(lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True),
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True)),
    "adam": (lambda: Adam(lr=1e-2, weight_decay=1e-3),
             lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-3)),
    "adamw": (lambda: AdamW(lr=1e-2, weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_match_torch_on_the_reference_backend(name):
    train, _ = digits(128)
    w = mlp_weights()
    batches = [{k: v[i * 32 : (i + 1) * 32] for k, v in train.items()} for i in range(4)]
    ours, make_torch = OPTIMIZERS[name]
    t = Trainer(mlp(32, w), "cross_entropy", ours(), backend="reference", max_grad_norm=1.0)
    losses = [t.step(b) for b in batches]
    ref_losses, ref_params = torch_steps(w, batches, make_torch, clip=1.0)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    state = t.state_values()
    for k, v in ref_params.items():
        np.testing.assert_allclose(state[k], v, rtol=1e-4, atol=1e-6)


def test_schedule_is_fed_each_step():
    """Warmup then cosine, fed per step: the same as torch's LambdaLR over SGD."""
    sched = warmup_cosine(0.1, total=6, warmup=2)
    assert [round(sched(s), 6) for s in (1, 2, 4, 6)] == [0.05, 0.1, 0.05, 0.0]
    train, _ = digits(128)
    w = mlp_weights()
    batches = [{k: v[i * 32 : (i + 1) * 32] for k, v in train.items()} for i in range(4)]
    t = Trainer(mlp(32, w), optimizer=SGD(lr=sched, momentum=0.5), backend="reference")
    losses = [t.step(b) for b in batches]

    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in w.items()}
    opt = torch.optim.SGD(list(params.values()), lr=0.1, momentum=0.5)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: sched(epoch + 1) / 0.1)
    ref = []
    for b in batches:
        h = torch.relu(torch.tensor(b["x"]) @ params["w0"] + params["b0"])
        loss = torch.nn.functional.cross_entropy(h @ params["w1"] + params["b1"],
                                                 torch.tensor(b["target"]))  # fmt: skip
        opt.zero_grad()
        loss.backward()
        opt.step()
        lr_sched.step()
        ref.append(loss.item())
    np.testing.assert_allclose(losses, ref, rtol=1e-5)
    np.testing.assert_allclose(t.state_values()["w0"], params["w0"].detach().numpy(), atol=1e-6)
