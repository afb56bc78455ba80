"""Whole-model gradients against torch: the character transformer (embedding gather,
causal attention, layer norms without bias, tanh GELU, residuals) and the CNN."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from anekit.train import grad
from anekit.train.emit import Emitter
from anekit.train.losses import cross_entropy
from anekit.train.models import char_transformer, char_transformer_weights, cnn, cnn_weights


def _with_loss(graph, target_shape, target_dtype="int32"):
    ed = graph.edit()
    ed.declare_value("target", target_shape, target_dtype)
    ed.inputs.append(ed.values["target"])
    loss = cross_entropy(Emitter(ed), graph.output_names[0], "target")
    ed.output_names = [loss]
    ed.name_outputs(["loss"])
    return ed.build()


def _torch_transformer(p, ids, heads):
    b, s = ids.shape
    d = p["tok"].shape[1]
    h = p["tok"][torch.tensor(ids, dtype=torch.long)] + p["pos"]
    mask = torch.triu(torch.full((s, s), -1e4, dtype=torch.float64), 1)
    for i in range(sum(1 for k in p if k.endswith(".q"))):
        y = F.layer_norm(h, (d,), p[f"l{i}.ln1"])
        q, k, v = (
            (y @ p[f"l{i}.{n}"]).reshape(b, s, heads, d // heads).transpose(1, 2) for n in "qkv"
        )
        a = torch.softmax(q @ k.transpose(-1, -2) * (d // heads) ** -0.5 + mask, -1) @ v
        h = h + a.transpose(1, 2).reshape(b, s, d) @ p[f"l{i}.o"]
        y = F.gelu(
            F.layer_norm(h, (d,), p[f"l{i}.ln2"]) @ p[f"l{i}.up"] + p[f"l{i}.upb"],
            approximate="tanh",
        )
        h = h + y @ p[f"l{i}.down"] + p[f"l{i}.downb"]
    return F.layer_norm(h, (d,), p["lnf"]) @ p["head"]


def _compare(ours, weights, loss):
    loss.backward()
    for name, t in weights.items():
        np.testing.assert_allclose(ours[f"{name}_grad"], t.grad.numpy(), rtol=2e-3, atol=2e-5,
                                   err_msg=name)  # fmt: skip


def test_char_transformer_gradients_match_torch():
    rng = np.random.default_rng(0)
    w = char_transformer_weights(20, d=16, layers=2, seq=6)
    ids = rng.integers(0, 20, (3, 6)).astype(np.int32)
    target = rng.integers(0, 20, (3, 6))
    g = _with_loss(char_transformer(3, 6, w, heads=2), (3, 6))
    ours = grad(g, "loss").run({"ids": ids, "target": target.astype(np.int32)})
    tw = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in w.items()}
    logits = _torch_transformer(tw, ids, 2)
    loss = F.cross_entropy(logits.reshape(-1, 20), torch.tensor(target).reshape(-1))
    np.testing.assert_allclose(ours["loss"], loss.item(), rtol=1e-5)
    _compare(ours, tw, loss)


def test_cnn_gradients_match_torch():
    rng = np.random.default_rng(1)
    w = cnn_weights(channels=(1, 4, 6), side=8)
    x = rng.random((2, 1, 8, 8)).astype(np.float32)
    target = rng.integers(0, 10, 2)
    g = _with_loss(cnn(2, w, side=8), (2,))
    ours = grad(g, "loss").run({"x": x, "target": target.astype(np.int32)})
    tw = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in w.items()}
    h = torch.tensor(x, dtype=torch.float64)
    for i in range(2):
        h = F.max_pool2d(torch.relu(F.conv2d(h, tw[f"c{i}"], tw[f"cb{i}"], padding=1)), 2)
    loss = F.cross_entropy(h.reshape(2, -1) @ tw["fc"] + tw["fcb"], torch.tensor(target))
    _compare(ours, tw, loss)
