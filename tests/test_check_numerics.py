"""`anekit check --numerics`: three fp16 cliffs found, named, remedied.

The expected magnitudes come from torch (fp32) and numpy, never from anekit: a randomly
initialised MobileNetV3-small's logits are ~1e-9 (below fp16's smallest subnormal 6e-8),
a sinusoidal timestep embedding at t = 500 has arguments where fp16 steps by 0.25 rad,
and squared deviations at std 1000 are ~1e6 > 65504 (decompose's layer_norm now avoids
them; a hand-written variance does not).
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

import anekit
from anekit.cli import main
from anekit.compiler import compile as compile_model
from anekit.numerics import analyse


def _kinds(report, seen_in: str = "layers") -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind, f.ops) for f in report.findings if f.seen_in == seen_in]


def test_mobilenet_v3_random_init_underflows_to_zero() -> None:
    from tests.arch_zoo.vision import MobileNetV3, init_like_torchvision

    torch.manual_seed(0)
    net = init_like_torchvision(MobileNetV3())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        logits = net(x).numpy()
    assert np.abs(logits).max() < float(np.finfo(np.float16).smallest_subnormal)  # the premise
    cm = compile_model(anekit.from_torch(net, (x,), ["image"]), "m4")
    report = analyse(cm, {"image": x.numpy()})
    (out,) = report.outputs
    assert out["flushed_to_zero"] == out["nonzero"] == 1000  # the sim gives exact zeros
    underflows = [f for f in report.findings if f.kind == "underflow" and f.seen_in != "ranges"]
    assert [f.seen_in for f in underflows] == ["layers", "sim"]
    # without data, value ranges see the tiny values too, as information (no data to judge)
    assert {f.severity for f in report.findings if f.seen_in == "ranges"} == {"info"}
    first, at_output = underflows
    assert "rescale" in first.remedy and "fp32 on the CPU" in first.remedy
    assert at_output.ops == ("matmul",)  # the classifier's Gemm produces the zeros
    assert "overflow" not in {f.kind for f in report.findings}


class TimestepEmbedding(torch.nn.Module):
    def forward(self, t):
        half = 64
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None] * freqs[None]
        return torch.cat([torch.sin(args), torch.cos(args)], -1)


def test_timestep_embedding_at_500_loses_precision_in_sin_and_cos() -> None:
    t = np.array([500.0], np.float32)
    cm = compile_model(anekit.from_torch(TimestepEmbedding(), (torch.from_numpy(t),), ["t"]), "m4")
    report = analyse(cm, {"t": t})
    assert _kinds(report) == [("precision", ("sin",)), ("precision", ("cos",))]
    for f in report.findings:
        assert f.value > 0.05
    assert all("fp32 on the CPU" in f.remedy for f in report.findings if f.seen_in == "layers")
    # the simulator's output against numpy's fp32 embedding
    freqs = np.exp(-math.log(10000.0) * np.arange(64, dtype=np.float32) / 64)
    want = np.concatenate([np.sin(500 * freqs), np.cos(500 * freqs)])
    got = next(iter(cm.run({"t": t}, "sim").values())).astype(np.float32)[0]
    assert np.abs(got - want).max() > 0.05  # the loss is real on the simulator
    assert report.outputs[0]["rel_error"] > 0.05


def test_layer_norm_at_std_1000_has_no_overflow_left() -> None:
    """decompose's norms divide deviations by their peak before squaring, so no overflow
    remains; the epsilon it scales by 1/peak^2 underflows, but nobody notices: not reported."""
    x = (np.random.default_rng(0).standard_normal((1, 8, 64)) * 1000).astype(np.float32)
    assert (x - x.mean(-1, keepdims=True)).__pow__(2).max() > 65504  # a plain square would overflow
    ln = torch.nn.LayerNorm(64)
    cm = compile_model(anekit.from_torch(ln, (torch.from_numpy(x),), ["x"]), "m4")
    report = analyse(cm, {"x": x})
    assert report.findings == []
    with torch.no_grad():
        want = ln(torch.from_numpy(x)).numpy()
    got = next(iter(cm.run({"x": x}, "sim").values())).astype(np.float32)
    assert np.abs(got - want).max() < 0.01


class SquaredDeviation(torch.nn.Module):
    """A hand-written variance: the square of 1000-scale deviations overflows fp16."""

    def forward(self, x):
        d = x - x.mean(-1, keepdim=True)
        return (d * d).mean(-1)


def test_a_hand_written_variance_at_std_1000_overflows_in_its_square() -> None:
    x = (np.random.default_rng(0).standard_normal((1, 8, 64)) * 1000).astype(np.float32)
    cm = compile_model(anekit.from_torch(SquaredDeviation(), (torch.from_numpy(x),), ["x"]), "m4")
    report = analyse(cm, {"x": x})
    layer_findings = [f for f in report.findings if f.seen_in == "layers"]
    assert [f.kind for f in layer_findings] == ["overflow"]
    assert "mul" in layer_findings[0].ops and "rescale" in layer_findings[0].remedy
    (out,) = report.outputs
    assert out["nonfinite"] > 0  # the simulator's variance is infinite
    assert all(
        "follows from the overflow" in f.detail for f in report.findings if f.seen_in == "sim"
    )


def test_a_model_in_range_has_no_findings() -> None:
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    cm = compile_model(anekit.from_torch(net, (torch.from_numpy(x),), ["x"]), "m4")
    report = analyse(cm)  # synthetic inputs
    assert report.inputs == "synthetic" and report.findings == []
    assert report.outputs[0]["rel_error"] < 2e-3


def _variance_model(path) -> str:
    """d = x - mean(x); mean(d * d) over the last axis (a hand-written variance)."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"], name="centre"),
        helper.make_node("Mul", ["d", "d"], ["d2"], name="square"),
        helper.make_node("ReduceMean", ["d2"], ["y"], name="variance", axes=[-1]),
    ]
    graph = helper.make_graph(
        nodes, "variance", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_cli_numerics_json_with_inputs(tmp_path, capsys) -> None:
    model = _variance_model(tmp_path / "var.onnx")
    data = tmp_path / "x.npz"
    np.savez(
        data, x=(np.random.default_rng(2).standard_normal((1, 4, 16)) * 1000).astype(np.float32)
    )
    assert main(["check", model, "--numerics", "--inputs", str(data), "--json"]) == 4
    numerics = json.loads(capsys.readouterr().out)["numerics"]
    assert numerics["inputs"] == "given"
    assert [f["kind"] for f in numerics["findings"] if f["seen_in"] == "layers"] == ["overflow"]
    assert numerics["findings"][0]["nodes"] == ["square"]
    assert main(["check", model, "--numerics"]) == 0  # synthetic inputs: in range
    assert "no overflow, underflow or precision loss found" in capsys.readouterr().out


def test_cli_numerics_bad_inputs_exit_2(tmp_path, capsys) -> None:
    model = _variance_model(tmp_path / "var.onnx")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, z=np.zeros((1, 4, 16), np.float32))
    assert main(["check", model, "--numerics", "--inputs", str(wrong)]) == 2
    assert "x" in capsys.readouterr().err
    assert main(["check", model, "--numerics", "--inputs", str(tmp_path / "none.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["check", model, "--inputs", str(wrong)]) == 2
    assert "--numerics" in capsys.readouterr().err
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert main(["check", model, "--numerics", "--inputs", str(tmp_path / "junk.npz")]) == 2
    assert "is not an .npz archive" in capsys.readouterr().err
