"""Small ONNX models that break one rule each, built with onnx.helper, and the helpers the
``test_model_*`` files share: running the CLI in-process and checking its exit status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main

F32 = TensorProto.FLOAT


def value(name: str, shape: list | None, elem: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "case", inputs, outputs, initializer=list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 8
    return proto


def tensor(array: np.ndarray, name: str) -> TensorProto:
    return numpy_helper.from_array(array, name)


def relu(shape: list | None = None) -> onnx.ModelProto:
    """y = relu(x): the well-formed control."""
    return model([helper.make_node("Relu", ["x"], ["y"])], [value("x", shape or [1, 4])],
                 [value("y", None)])  # fmt: skip


def save(proto: onnx.ModelProto, directory: Path, name: str = "model.onnx") -> Path:
    path = directory / name
    path.write_bytes(proto.SerializeToString())
    return path


def cli(capsys, *args: object) -> tuple[int, str]:
    """Run ``anekit ARGS`` in this process; (exit status, stderr)."""
    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def assert_user_error(status: int, err: str, *words: str) -> None:
    """Exit 2 with a message (no traceback, not called a bug) that contains ``words``."""
    assert status == 2, err
    assert "Traceback" not in err and "internal error" not in err and "bug" not in err, err
    for w in words:
        assert w in err, (w, err)


def onnxruntime_refuses(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> str:
    """onnxruntime's error for the model (at load or run); fails if it accepts it."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # the refusal is expected: keep its log quiet
    try:
        session = ort.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - any refusal counts
        return str(exc)
    raise AssertionError("onnxruntime accepted the model")
