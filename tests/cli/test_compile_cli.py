"""`anekit compile` and `anekit run BUNDLE`: the working flow, its output, and user errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main
from anekit.runtime import load


def _model(path: Path) -> Path:
    """Conv + Relu on a single token, then a MatMul, Gather'd by an integer input (CPU)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3, "w")
    m = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32) * 0.3, "m")
    shape = numpy_helper.from_array(np.array([1, 16], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "m"], ["y"], name="matmul"),
        helper.make_node("Gather", ["y", "ids"], ["picked"], name="pick", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 1]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
        ],  # fmt: skip
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("picked", TensorProto.FLOAT, None),
        ],  # fmt: skip
        [w, m, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))
    np.save(tmp_path / "ids.npy", np.array([3, -1], np.int64))
    return {
        "model": _model(tmp_path / "tiny.onnx"),
        "x": tmp_path / "x.npy",
        "ids": tmp_path / "ids.npy",
    }


def test_compile_then_run(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiny.anekit"
    assert main(["compile", str(files["model"]), "-t", "m1", "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.err == ""  # no progress bar when stderr is not a terminal
    assert f"wrote {out} for m1" in printed.out
    assert "engine layers in" in printed.out and "dispatch" in printed.out  # check's summary
    assert "cpu: pick (gather): gather" in printed.out  # what runs on the CPU, and why
    program = load(out)
    assert program.target.name == "m1" and [s.device for s in program.segments][-1] == "cpu"
    inputs = ["--input", f"x={files['x']}", "--input", f"ids={files['ids']}"]
    npz = tmp_path / "out.npz"
    assert main(["run", str(out), *inputs, "--backend", "sim", "-o", str(npz)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("y ") and "saved 2 output(s)" in printed
    feeds = {"x": np.load(files["x"]), "ids": np.load(files["ids"])}
    with np.load(npz) as saved:
        expected = program.run(feeds, "sim")
        np.testing.assert_array_equal(saved["y"], expected["y"])
        np.testing.assert_array_equal(saved["picked"], expected["picked"][...])
    assert main(["run", str(out), *inputs, "--backend", "sim-fp32", "-o", str(npz)]) == 0
    with np.load(npz) as saved:
        np.testing.assert_array_equal(saved["y"], program.run(feeds, "sim-fp32")["y"])


def test_json_and_mlpackage(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, package = tmp_path / "tiny.anekit", tmp_path / "tiny.mlpackage"
    args = [
        "compile",
        str(files["model"]),
        "-t",
        "m4",
        "-o",
        str(out),
        "--mlpackage",
        str(package),
        "--json",
    ]
    assert main(args) == 0
    printed = capsys.readouterr()
    report = json.loads(printed.out)
    assert report["bundle"] == str(out) and report["mlpackage"] == str(package)
    assert report["target"] == "m4" and report["summary"]["ane_segments"] >= 1
    assert [s["device"] for s in report["segments"]] == [s.device for s in load(out).segments]
    assert report["bytes"] == sum(
        f.stat().st_size for f in out.rglob("*") if f.is_file() and f.name != "manifest.json"
    )
    assert (package / "Manifest.json").is_file()


def test_compiling_twice_gives_the_same_bytes(files: dict[str, Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a.anekit", tmp_path / "b.anekit"
    assert main(["compile", str(files["model"]), "-t", "m4", "-o", str(a), "--json"]) == 0
    assert main(["compile", str(files["model"]), "-t", "m4", "-o", str(b), "--json"]) == 0
    listing = sorted(p.relative_to(a) for p in a.rglob("*"))
    assert listing == sorted(p.relative_to(b) for p in b.rglob("*"))
    for rel in listing:
        if (a / rel).is_file():
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compile", "{model}", "-t", "m99", "-o", "{tmp}/x.anekit"], "unknown target 'm99'"),
        (["compile", "{tmp}/absent.onnx", "-o", "{tmp}/x.anekit"], "does not exist"),
        (["compile", "{model}", "-o", "{tmp}/x.bundle"], "must end in .anekit"),
        (
            ["compile", "{model}", "-o", "{tmp}/x.anekit", "--mlpackage", "{tmp}/x.zip"],
            "must end in .mlpackage",
        ),
        (["compile", "{model}", "-o", "{tmp}/nowhere/x.anekit"], "does not exist"),
        (["run", "{tmp}/tiny.anekit", "--shape", "x=1x8x1x1"], "drop --shape"),
    ],
)
def test_user_errors(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    main(["compile", str(files["model"]), "-o", str(tmp_path / "tiny.anekit"), "--json"])
    capsys.readouterr()
    filled = [a.format(model=files["model"], tmp=tmp_path) for a in args]
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_tampered_bundle_is_one_clear_error(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "tiny.anekit"
    assert main(["compile", str(files["model"]), "-o", str(out), "--json"]) == 0
    weights = next(out.rglob("weight.bin"))
    weights.write_bytes(weights.read_bytes()[:-2] + b"\x00\x01")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "anekit",
            "run",
            str(out),
            "--input",
            f"x={files['x']}",
            "--input",
            f"ids={files['ids']}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "does not match its sha256" in result.stderr and "Traceback" not in result.stderr
