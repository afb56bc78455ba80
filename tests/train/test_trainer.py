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


def test_sim_training_learns_digits_like_torch():
    """fp16 on the simulator, 3 epochs of 1024 digits: within 2 points of torch fp32 trained
    from the same weights on the same batches in the same order."""
    train, test = digits(1024)
    w = mlp_weights((64, 64, 10))
    t = Trainer(mlp(64, w), "cross_entropy", Adam(lr=3e-3), backend="sim", seed=3)
    losses = t.fit(train, epochs=3, batch_size=64, progress=False)
    acc = t.evaluate(test)["accuracy"]
    assert t.skipped == 0 and np.isfinite(losses).all() and np.mean(losses[-8:]) < losses[0] / 2
    rng = np.random.Generator(np.random.PCG64(3))
    batches = [{k: v[o[i * 64:(i + 1) * 64]] for k, v in train.items()}
               for o in (rng.permutation(1024) for _ in range(3)) for i in range(16)]  # fmt: skip
    _, ref = torch_steps(w, batches, lambda p: torch.optim.Adam(p, lr=3e-3))
    h = np.maximum(test["x"] @ ref["w0"] + ref["b0"], 0) @ ref["w1"] + ref["b1"]
    ref_acc = float((h.argmax(-1) == test["target"]).mean())
    assert acc >= 0.8 and abs(acc - ref_acc) <= 0.02, (acc, ref_acc)


def test_check_names_what_runs_on_the_cpu_and_why():
    from anekit.train.models import char_transformer, char_transformer_weights

    model = char_transformer(2, 4, char_transformer_weights(96, d=8, layers=1, seq=4), heads=2)
    t = Trainer(model, "cross_entropy", Adam(), backend="sim")
    rows = t.check({"ids": np.zeros((2, 4), np.int32), "target": np.zeros((2, 4), np.int64)})
    reasons = {r["op"]: r["reason"] for r in rows}
    assert "gather" in reasons and "no engine form" in reasons["gather"]
    assert "scatter_nd" in reasons  # the embedding's gradient
    # the overflow test is arithmetic on the engine: no NaN check on booleans
    assert not {"isnan", "isinf"} & set(reasons)
    # class labels come as one-hot rows made on the host: no integer one_hot in the step
    assert "one_hot" not in reasons
    compiled = t.compiled({"ids": np.zeros((2, 4), np.int32), "target": np.zeros((2, 4), np.int64)})
    assert [s.device for s in compiled.segments] == ["cpu", "ane", "cpu", "ane"]


def test_onnx_model_freeze_and_export_onnx(tmp_path):
    import onnxruntime as ort

    net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (torch.zeros(8, 64),), str(path), input_names=["x"], dynamo=False)
    t = Trainer(path, optimizer=SGD(lr=0.5), backend="reference", freeze=["0.weight"])
    # the importer folds Gemm's transposed weights into new constants: the freeze pattern
    # and the export still speak of the ONNX initializer names
    by_init = {src: name for name, (src, _) in t._sources.items()}
    assert by_init["0.weight"] not in t.params and by_init["2.weight"] in t.params
    train, _ = digits(8)
    before = t.state_values()
    t.step(train)
    after = t.state_values()
    assert by_init["0.weight"] not in after
    assert not np.array_equal(after[by_init["2.weight"]], before[by_init["2.weight"]])
    out = t.export_onnx(tmp_path / "trained.onnx")
    got = ort.InferenceSession(str(out)).run(None, {"x": train["x"]})[0]
    ref = t.export().run({"x": train["x"]})
    np.testing.assert_allclose(got, next(iter(ref.values())), rtol=1e-5, atol=1e-5)
    first = ort.InferenceSession(str(path)).run(None, {"x": train["x"]})[0]
    assert not np.allclose(got, first)


def test_host_shuttle_equals_resident_state_on_sim():
    """resident_state=False sends the state in and out every step: same numbers."""
    train, _ = digits(64)
    batches = [{k: v[i * 32 : (i + 1) * 32] for k, v in train.items()} for i in range(2)]
    runs = []
    for resident in (True, False):
        t = Trainer(mlp(32, mlp_weights()), optimizer=Adam(lr=1e-2), backend="sim",
                    resident_state=resident)  # fmt: skip
        runs.append(([t.step(b) for b in batches], t.state_values()))
    assert runs[0][0] == runs[1][0]
    for k, v in runs[0][1].items():
        assert np.array_equal(v, runs[1][1][k]), k
