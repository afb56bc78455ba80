"""`anekit train`: an ONNX MLP trained on scikit-learn's digits from .npz files, checked
against onnxruntime on the exported model; exact resume through the command line; --check;
user errors leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main

BATCH = 32


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("train")
    digits = load_digits()
    x, y = (digits.data / 16).astype(np.float32), digits.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    train, test = order[:1400], order[1400:]
    np.savez(root / "train.npz", x=x[train], target=y[train])
    np.savez(root / "test.npz", x=x[test], target=y[test])
    w0 = (rng.standard_normal((64, 32)) * 0.2).astype(np.float32)
    w1 = (rng.standard_normal((32, 10)) * 0.2).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in
             (("w0", w0), ("b0", np.zeros(32, np.float32)), ("w1", w1), ("b1", np.zeros(10, np.float32)))]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Add", ["h", "b0"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w1"], ["o"]),
             helper.make_node("Add", ["o", "b1"], ["logits"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, 10])], inits,
    )  # fmt: skip
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), root / "mlp.onnx"
    )
    return {"root": root, "model": root / "mlp.onnx", "train": root / "train.npz",
            "test": root / "test.npz", "x_test": x[test], "y_test": y[test]}  # fmt: skip


def _train(files, capsys, *extra: str) -> dict:
    args = ["train", "--data", str(files["train"]), "--batch-size", str(BATCH), "--json", *extra]
    assert main(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_train_evaluate_and_export_agree_with_onnxruntime(files, capsys, tmp_path) -> None:
    import onnxruntime as ort

    out = tmp_path / "trained.onnx"
    summary = _train(files, capsys, str(files["model"]), "--eval", str(files["test"]),
                     "--epochs", "3", "--lr", "3e-3", "-o", str(out))  # fmt: skip
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3]
    assert summary["steps"] + summary["skipped_steps"] == 3 * (1400 // BATCH)
    losses = [e["mean_loss"] for e in summary["epochs"]]
    assert losses[0] > losses[1] > losses[2]
    reported = summary["epochs"][-1]["eval"]["accuracy"]
    # the exported model, run by onnxruntime in fp32, classifies the held-out digits as the
    # sim's evaluation said (fp16 may flip a borderline row or two)
    session = ort.InferenceSession(str(out))
    x, y = files["x_test"], files["y_test"]
    rows = len(x) // BATCH * BATCH
    pred = np.concatenate([session.run(None, {"x": x[i : i + BATCH]})[0].argmax(-1)
                           for i in range(0, rows, BATCH)])  # fmt: skip
    accuracy = float((pred == y[:rows]).mean())
    assert accuracy > 0.85 and abs(accuracy - reported) < 0.03
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(files["model"]).graph.initializer}
    after = {i.name: numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    assert before.keys() == after.keys() and not np.allclose(before["w0"], after["w0"])


def test_resume_through_the_command_line_is_exact(files, capsys, tmp_path) -> None:
    from anekit.train import Trainer

    straight, split = tmp_path / "straight.ckpt", tmp_path / "split.ckpt"
    _train(files, capsys, str(files["model"]), "--epochs", "2", "--checkpoint", str(straight))
    _train(files, capsys, str(files["model"]), "--epochs", "1", "--checkpoint", str(split))
    resumed = _train(
        files, capsys, "--resume", str(split), "--epochs", "2", "--checkpoint", str(split)
    )
    assert [e["epoch"] for e in resumed["epochs"]] == [2]
    a, b = Trainer.load(straight).state_values(), Trainer.load(split).state_values()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _embedding_files(root: Path) -> tuple[Path, Path]:
    """An ONNX embedding classifier (Gather of int64 ids, then a matmul) and its data."""
    rng = np.random.default_rng(1)
    emb = numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.2).astype(np.float32), "emb")
    w = numpy_helper.from_array((rng.standard_normal((32, 10)) * 0.2).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([BATCH, 32], np.int64), "shape")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("Reshape", ["e", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["logits"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [BATCH, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, 10])],
        [emb, w, shape],
    )  # fmt: skip
    model = root / "embedding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    data = root / "ids.npz"
    np.savez(data, ids=rng.integers(0, 16, (BATCH, 4)), target=rng.integers(0, 10, BATCH))
    return model, data


def test_check_names_what_runs_on_the_cpu(files, capsys, tmp_path) -> None:
    # the MLP's whole step (forward, backward, overflow guard, Adam) is one engine program
    assert _train(files, capsys, str(files["model"]), "--check")["cpu_parts"] == []
    assert main(["train", str(files["model"]), "--data", str(files["train"]), "--check"]) == 0
    assert "the whole step (forward, backward, optimizer) runs on the engine" in (
        capsys.readouterr().out
    )
    # an embedding's lookup and its gradient's scatter have no engine form
    model, data = _embedding_files(tmp_path)
    args = ["train", str(model), "--data", str(data), "--batch-size", str(BATCH), "--check"]
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)["cpu_parts"]
    assert {"gather", "scatter_nd"} <= {r["op"] for r in rows}
    assert all(row["placement"] == "cpu" and row["reason"] for row in rows)
    assert main(args) == 0
    assert "ops of the step run on the CPU" in capsys.readouterr().out


def _refused(capsys, args: list[str], says: str) -> None:
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_user_errors_exit_2_and_write_nothing(files, capsys, tmp_path) -> None:
    model, train = str(files["model"]), str(files["train"])
    np.savez(tmp_path / "unlabelled.npz", x=np.zeros((64, 64), np.float32))
    _refused(capsys, [model, "--data", str(tmp_path / "unlabelled.npz")], "no array for ['target']")
    np.savez(tmp_path / "wide.npz", x=np.zeros((64, 65), np.float32), target=np.zeros(64, np.int64))
    _refused(capsys, [model, "--data", str(tmp_path / "wide.npz")], "rows of shape [65]")
    _refused(capsys, [model, "--data", str(tmp_path / "absent.npz")], "absent.npz")
    _refused(capsys, [model, "--data", train, "--resume", train], "not both")
    _refused(capsys, [model, "--data", train, "--momentum", "0.9"], "--optimizer sgd")
    existing = tmp_path / "mine.onnx"
    existing.write_bytes(b"not anekit's")
    _refused(capsys, [model, "--data", train, "-o", str(existing)], "does not replace files")
    assert existing.read_bytes() == b"not anekit's"
    _refused(
        capsys, [model, "--data", train, "--checkpoint", str(existing)], "not an anekit checkpoint"
    )
    assert existing.read_bytes() == b"not anekit's"
    nowhere = str(tmp_path / "no" / "c.ckpt")
    _refused(capsys, [model, "--data", train, "--checkpoint", nowhere], "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.onnx", "unlabelled.npz", "wide.npz"]
