"""`check --numerics` without data: value ranges from the weights and the inputs' ranges.

An audio front-end (an STFT as a Conv1d over int16-scale samples, power, mel, log), as
packages feed it, overflows fp16 in its convolution: the range analysis finds it from the
input's name convention alone, names the ONNX nodes, and prints the `--cpu` option that
fixes it; applied, the finding is gone and the simulator gives the fp32 answer on a
realistic signal (a loud chirp with noise), where before it gave non-finite values.
A classifier whose tiny probabilities underflow keeps its decision: no hazard.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main
from anekit.compiler import compile as compile_model
from anekit.errors import AnekitError
from anekit.numerics import analyse
from anekit.numerics.ranges import parse_input_ranges

FP16_MAX = float(np.finfo(np.float16).max)


class STFTFrontEnd(torch.nn.Module):
    """A log-mel front-end: STFT as a Conv1d with Hann-windowed DFT weights (as in many
    speech packages), power, a mel projection and a log."""

    def __init__(self, n_fft: int = 512, hop: int = 160, mels: int = 40) -> None:
        super().__init__()
        bins = n_fft // 2 + 1
        t = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(bins, dtype=torch.float64)[:, None]
        window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
        angle = 2 * torch.pi * k * t / n_fft
        weight = torch.cat([window * torch.cos(angle), -window * torch.sin(angle)])[:, None]
        self.stft = torch.nn.Conv1d(1, 2 * bins, n_fft, stride=hop, bias=False)
        self.stft.weight.data = weight.float()
        generator = torch.Generator().manual_seed(0)
        self.register_buffer("mel", torch.rand(mels, bins, generator=generator) / bins)
        self.bins = bins

    def forward(self, audio):
        spec = self.stft(audio[:, None, :])
        re, im = spec[:, : self.bins], spec[:, self.bins :]
        return torch.log(torch.matmul(self.mel, re * re + im * im) + 1e-6)


def _export(module: torch.nn.Module, example: torch.Tensor, name: str) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), buffer, input_names=[name], dynamo=False)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def front_end() -> bytes:
    return _export(STFTFrontEnd(), torch.zeros(1, 16000), "audio")


@pytest.fixture(scope="module")
def front_end_report(front_end: bytes):
    """The numerics report of the front-end compiled for m4, no data given."""
    return analyse(compile_model(front_end, "m4"))


def _speech_like() -> np.ndarray:
    """A loud chirp with noise at int16 scale, as a package reads a .wav."""
    t = np.arange(16000) / 16000
    x = 20000 * np.sin(2 * np.pi * 440 * t * (1 + t)) + np.random.default_rng(0).normal(
        0, 2000, t.size
    )
    return np.clip(x, -32768, 32767).astype(np.float32)[None]


def _hazards(report, seen_in: str | None = None) -> list:
    return [
        f
        for f in report.findings
        if f.severity == "hazard" and (seen_in is None or f.seen_in == seen_in)
    ]


def test_range_analysis_finds_the_stft_overflow_without_inputs(
    front_end: bytes, front_end_report
) -> None:
    cm = compile_model(front_end, "m4")
    # the premise, from torch: this signal's STFT exceeds fp16
    with torch.no_grad():
        spec = STFTFrontEnd().stft(torch.from_numpy(_speech_like())[:, None])
    assert float(spec.abs().max()) > FP16_MAX
    report = front_end_report  # no data: the input's name says int16-scale audio
    assert report.input_ranges["audio"]["lo"] == -32768
    (first, *_) = _hazards(report, "ranges")
    assert first.kind == "overflow" and "/stft/Conv" in first.nodes
    assert "/stft/Conv" in re.search(r"--cpu (\S+)", first.remedy).group(1)
    assert first.option.startswith("--scale-input audio=2^-")  # exact, keeps the engine
    assert first.value > 0  # log2 of the excess over 65504
    # the simulator fails on the realistic signal
    (before,) = cm.run({"audio": _speech_like()}, "sim").values()
    assert not np.isfinite(before).all()


def test_the_printed_remedy_removes_the_finding_and_gives_the_fp32_answer(
    front_end: bytes, front_end_report
) -> None:
    first = _hazards(front_end_report, "ranges")[0]
    names = re.search(r"--cpu (\S+)", first.remedy).group(1)
    fixed = compile_model(front_end, "m4", cpu_nodes=names)
    report = analyse(fixed)
    assert _hazards(report) == [], [f.detail for f in report.findings]
    x = _speech_like()
    with torch.no_grad():
        want = STFTFrontEnd()(torch.from_numpy(x)).numpy()
    (got,) = fixed.run({"audio": x}, "sim").values()
    assert np.isfinite(got).all()
    assert np.abs(got.astype(np.float64) - want).max() <= 1e-3 * np.abs(want).max()


def test_a_unit_scale_input_finds_nothing_and_a_declared_range_finds_the_overflow() -> None:
    """The same front-end with an input named 'x' (no convention: standard normal) has no
    hazard; declaring int16 scale finds the overflow."""
    model = _export(STFTFrontEnd(), torch.zeros(1, 16000), "x")
    cm = compile_model(model, "m4")
    assert _hazards(analyse(cm)) == []
    declared = parse_input_ranges(["x=-32768:32767"])
    assert _hazards(analyse(cm, input_ranges=declared), "ranges")[0].kind == "overflow"


def _offset_model() -> bytes:
    """y = (x - 1000) * 10: x near 1000 is stored in fp16 with steps of 0.5."""
    nodes = [
        helper.make_node("Sub", ["x", "offset"], ["d"], name="centre"),
        helper.make_node("Mul", ["d", "gain"], ["y"], name="gain"),
    ]
    graph = helper.make_graph(
        nodes,
        "offset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [
            numpy_helper.from_array(np.array(1000.0, np.float32), "offset"),
            numpy_helper.from_array(np.array(10.0, np.float32), "gain"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_cancellation_is_found_and_remedied() -> None:
    model = _offset_model()
    ranges = parse_input_ranges(["x=1000:1001"])
    report = analyse(compile_model(model, "m4"), input_ranges=ranges)
    (found,) = _hazards(report, "ranges")
    assert found.kind == "cancellation" and found.nodes == ("centre",)
    fixed = compile_model(model, "m4", cpu_nodes=found.option.removeprefix("--cpu "))
    assert _hazards(analyse(fixed, input_ranges=ranges), "ranges") == []
    x = np.linspace(1000, 1001, 64, dtype=np.float32)[None]
    (got,) = fixed.run({"x": x}, "sim").values()
    assert np.abs(got.astype(np.float64) - (x.astype(np.float64) - 1000) * 10).max() < 0.01


class Classifier(torch.nn.Module):
    """A recogniser's head: 6000 classes whose tiny probabilities underflow fp16."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(64, 6000)
        self.head.weight.data *= 16

    def forward(self, x):
        return torch.softmax(self.head(x), -1)


def test_tiny_probabilities_underflowing_are_not_a_hazard() -> None:
    model = _export(Classifier(), torch.zeros(4, 64), "x")
    cm = compile_model(model, "m4")
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    (want,) = cm.run({"x": x}).values()
    (got,) = cm.run({"x": x}, "sim").values()
    assert (got == 0).mean() > 0.5 and (want != 0).mean() > 0.99  # the premise: most flush
    assert np.array_equal(got.argmax(-1), want.argmax(-1))  # ... and the decision stands
    report = analyse(cm, {"x": x})
    assert _hazards(report) == [], [f.detail for f in report.findings]
    assert any(f.kind == "underflow" and f.severity == "info" for f in report.findings)


def test_cli_exits_4_prints_the_fix_and_the_fix_exits_0(
    front_end: bytes, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "front_end.onnx"
    path.write_bytes(front_end)
    assert main(["check", str(path), "-t", "m4", "--numerics"]) == 4
    out = capsys.readouterr().out
    assert "input 'audio': -32768..32767" in out
    fixes = [line for line in out.splitlines() if line.startswith("fix: anekit compile")]
    assert fixes, out
    option = fixes[0].split(" -t m4 ", 1)[1].split()
    assert option[0] == "--scale-input"
    assert main(["check", str(path), "-t", "m4", "--numerics", *option]) == 0
    bundle = tmp_path / "front_end.anekit"
    assert main(["compile", str(path), "-t", "m4", "-o", str(bundle), *option]) == 0
    assert bundle.is_dir()


def test_the_printed_input_scale_is_exact_and_removes_the_overflow(
    front_end: bytes, front_end_report
) -> None:
    """--scale-input audio=2^-K: the program multiplies the samples by 2^-K, the convolution,
    squares and mel sum carry the factor and the log takes it off; exact in fp32 (reference
    backend against torch), finite and right on the fp16 simulator, all on the engine."""
    first = _hazards(front_end_report, "ranges")[0]
    k = int(first.option.rsplit("^-", 1)[1])
    fixed = compile_model(front_end, "m4", input_scales={"audio": 2.0**-k})
    assert fixed.summary["cpu_ops"] == 0
    assert _hazards(analyse(fixed)) == []
    x = _speech_like()
    with torch.no_grad():
        want = STFTFrontEnd()(torch.from_numpy(x)).numpy().astype(np.float64)
    (ref,) = fixed.run({"audio": x}).values()
    assert np.abs(ref - want).max() <= 1e-5 * np.abs(want).max()
    (got,) = fixed.run({"audio": x}, "sim").values()
    assert np.isfinite(got).all()
    assert np.abs(got.astype(np.float64) - want).max() <= 1e-3 * np.abs(want).max()


@pytest.mark.parametrize(
    "args",
    [
        ["--numerics", "--input-range", "audio=5"],
        ["--numerics", "--input-range", "nope=0:1"],
        ["--input-range", "audio=0:1"],
        ["--cpu", "no_such_node"],
        ["--scale-input", "audio=0"],
        ["--scale-input", "nope=2^-3"],
    ],
)
def test_bad_numerics_options_exit_2(front_end: bytes, tmp_path: Path, args, capsys) -> None:
    path = tmp_path / "front_end.onnx"
    path.write_bytes(front_end)
    assert main(["check", str(path), "-t", "m4", *args]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cpu_nodes_names_an_unknown_node() -> None:
    with pytest.raises(AnekitError, match="no node named 'Conv_9'"):
        compile_model(_offset_model(), "m4", cpu_nodes=["Conv_9"])


def _image_model(first: str | None) -> bytes:
    """A conv over a 1x3x8x8 input named 'image', after a Div by 255 or a Sub of ImageNet
    means when ``first`` says so."""
    consts = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")]
    nodes, x = [], "image"
    if first == "Div":
        consts.append(numpy_helper.from_array(np.array(255.0, np.float32), "c"))
    elif first == "Sub":
        means = np.array([123.7, 116.3, 103.5], np.float32).reshape(1, 3, 1, 1)
        consts.append(numpy_helper.from_array(means, "c"))
    if first:
        nodes.append(helper.make_node(first, ["image", "c"], ["pre"]))
        x = "pre"
    nodes.append(helper.make_node("Conv", [x, "w"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "image",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        consts,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("first, hi", [("Div", 255.0), ("Sub", 255.0), (None, 1.0)])
def test_image_inputs_default_to_the_scale_the_model_expects(first: str | None, hi: float) -> None:
    from anekit.frontend.onnx import from_onnx
    from anekit.numerics.ranges import input_ranges

    (r,) = input_ranges(from_onnx(_image_model(first)), {}).values()
    assert (r.lo, r.hi) == (0.0, hi)


def test_layer_findings_the_outputs_do_not_feel_are_information() -> None:
    """A per-layer overflow is a hazard only while the simulator's outputs on the same inputs
    are off; when they match fp32 it is information (exit 0), and stays a hazard otherwise."""
    from anekit.numerics import Finding, NumericsReport, _unfelt_as_info

    finding = Finding("overflow", "l", ("n12",), ("conv",), "d", "r", 3.0, option="--cpu n12")
    for rel_error, nonfinite, severity in ((4e-4, 0, "info"), (0.5, 0, "hazard"), (0, 2, "hazard")):
        report = NumericsReport("m4", "synthetic", findings=[finding])
        report.outputs = [{"output": "y", "rel_error": rel_error, "nonfinite": nonfinite}]
        _unfelt_as_info(report)
        (after,) = report.findings
        assert after.severity == severity and report.hazards == (severity == "hazard")
