"""`anekit train`: --shape for a dynamic-batch export, batch-size errors that name the batch,
--resume writing the trained model and its checkpoint (and keeping --eval), and the warning
when a run would write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main


def _mlp(path: Path, batch: int | str) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 4)) * 0.3).astype(np.float32), "w")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 4])], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = (x[:, :4].argmax(1)).astype(np.int64)
    np.savez(tmp_path / "train.npz", x=x, target=y)
    np.savez(tmp_path / "test.npz", x=x[:16], target=y[:16])
    return {"train": tmp_path / "train.npz", "test": tmp_path / "test.npz"}


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["train", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dynamic_batch_takes_shape(tmp_path, data, capsys) -> None:
    model = str(_mlp(tmp_path / "dyn.onnx", "N"))
    code, _, err = _run(capsys, model, "--data", str(data["train"]))
    assert code == 2 and "--shape x=" in err and "input_shapes" not in err
    code, out, err = _run(capsys, model, "--shape", "x=16x16", "--data", str(data["train"]),
                          "--json", "-o", str(tmp_path / "t.onnx"))  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["epochs"][0]["steps"] + summary["skipped_steps"] == 64 // 16  # batch from --shape
    code, _, err = _run(capsys, model, "--shape", "x=16x16", "--batch-size", "8",
                        "--data", str(data["train"]))  # fmt: skip
    assert code == 2 and "--batch-size 8" in err and "fixed at 16" in err


def test_batch_size_error_names_the_batch(tmp_path, data, capsys) -> None:
    model = str(_mlp(tmp_path / "static.onnx", 32))
    code, _, err = _run(capsys, model, "--data", str(data["train"]), "--batch-size", "100")
    assert code == 2
    assert "--batch-size 100" in err and "fixed at 32" in err and "use --batch-size 32" in err
    assert "cross_entropy" not in err and "Traceback" not in err


def test_resume_writes_model_and_checkpoint_and_keeps_eval(tmp_path, data, capsys) -> None:
    from anekit.train import Trainer

    model, ckpt = str(_mlp(tmp_path / "static.onnx", 16)), tmp_path / "run.ckpt"
    code, out, err = _run(capsys, model, "--data", str(data["train"]), "--eval",
                          str(data["test"]), "--checkpoint", str(ckpt), "--json")  # fmt: skip
    assert code == 0, err
    assert Trainer.load(ckpt).epoch == 1
    trained = tmp_path / "trained.onnx"
    code, out, err = _run(capsys, "--resume", str(ckpt), "--data", str(data["train"]),
                          "--epochs", "3", "-o", str(trained), "--json")  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert [e["epoch"] for e in summary["epochs"]] == [2, 3]
    assert all("eval" in e for e in summary["epochs"])  # the first run's --eval, kept
    assert Trainer.load(ckpt).epoch == 3  # the resumed checkpoint is brought up to date
    assert summary["output"] == str(trained) and trained.is_file()
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(trained).graph.initializer}
    np.testing.assert_array_equal(weights["w"], Trainer.load(ckpt).state_values()["w"])


def test_warns_when_nothing_would_be_written(tmp_path, data, capsys) -> None:
    model = str(_mlp(tmp_path / "static.onnx", 16))
    code, _, err = _run(capsys, model, "--data", str(data["train"]))
    assert code == 0 and "nothing will be written" in err
    code, _, err = _run(capsys, model, "--data", str(data["train"]), "-o", str(tmp_path / "o.onnx"))
    assert code == 0 and "nothing will be written" not in err
