"""fp16 ONNX models import, compile and run: all-fp16 models and fp32 I/O around an fp16
interior (Cast nodes), compared with onnxruntime running the same fp16 model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import anekit
from tests import zoo
from tests.safety.model_cases import cli, model, save, tensor, value
from tests.safety.model_fp16_convert import F16, to_fp16

RNG = np.random.default_rng(7)


def _onnxruntime(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _conv_bias_add() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The crash of the issue: an fp16 Conv with a bias, then an Add of a constant."""
    w = tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float16), "w")
    b = tensor(RNG.standard_normal(4).astype(np.float16), "b")
    k = tensor(np.array(0.5, np.float16), "k")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "k"], ["y"])]  # fmt: skip
    proto = model(nodes, [value("x", [1, 3, 8, 8], F16)], [value("y", [1, 4, 8, 8], F16)],
                  [w, b, k])  # fmt: skip
    return proto, {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float16)}


def _assert_close(got: dict, want: dict, rel: float) -> None:
    for name, w in want.items():
        assert got[name].dtype == w.dtype, name  # fp16 outputs stay fp16, fp32 stay fp32
        scale = float(np.abs(w.astype(np.float32)).max())
        err = float(np.abs(got[name].astype(np.float32) - w.astype(np.float32)).max())
        assert err <= rel * scale, (name, err, scale)


@pytest.mark.parametrize("backend", ["reference", "sim"])
def test_fp16_conv_with_bias_and_constant_add(backend, tmp_path, capsys) -> None:
    proto, feeds = _conv_bias_add()
    want = _onnxruntime(proto, feeds)
    compiled = anekit.compile(proto, "m4")
    assert [s.device for s in compiled.segments] == ["ane"]  # conv, bias and add: one layer
    _assert_close(compiled.run(feeds, backend=backend), want, rel=2e-3)
    status, err = cli(capsys, "compile", save(proto, tmp_path), "-o", tmp_path / "m.anekit")
    assert status == 0, err


# zoo model -> relative tolerance against onnxruntime's fp16 run (fp16 rounding differs:
# onnxruntime rounds at its own points, anekit at the engine's)
ZOO_CASES = {"resnet_cnn": 5e-3, "transformer_layer": 5e-3}


@pytest.mark.parametrize("keep_io_types", [False, True], ids=["all-fp16", "fp32-io"])
@pytest.mark.parametrize("name", list(ZOO_CASES))
def test_real_models_converted_to_fp16(name, keep_io_types) -> None:
    case = zoo.load(name)
    proto = to_fp16(case.proto(), keep_io_types=keep_io_types)
    feeds = {
        k: v.astype(np.float16) if v.dtype == np.float32 and not keep_io_types else v
        for k, v in case.feeds.items()
    }
    want = _onnxruntime(proto, feeds)
    compiled = anekit.compile(proto, "m4")
    assert sum(1 for s in compiled.segments if s.device == "ane") >= 1
    for backend in ("reference", "sim"):
        _assert_close(compiled.run(feeds, backend=backend), want, rel=ZOO_CASES[name])
