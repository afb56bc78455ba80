"""`anekit run FILE.mil` through the CLI entry point: the sim backend, outputs, and clear errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from anekit.cli import main
from anekit.formats.blob import BlobWriter
from anekit.simulator import SimProgram
from tests.ir.ort_oracle import run_ort

FACTS = Path(__file__).parents[1] / "formats" / "mil" / "data" / "facts_example.mil"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """FACTS section 1's example with a weight.bin written by BlobWriter (the record at 64)."""
    shutil.copy(FACTS, tmp_path / "model.mil")
    (tmp_path / "weights").mkdir()
    writer = BlobWriter()
    weight = np.random.default_rng(5).uniform(-0.2, 0.2, (32, 64, 1, 1)).astype(np.float16)
    assert writer.add(weight) == 64
    writer.write(tmp_path / "weights" / "weight.bin")
    np.save(tmp_path / "weight.npy", weight)
    return tmp_path / "model.mil"


def test_run_a_mil_file_on_sim(capsys, program: Path, tmp_path: Path) -> None:
    x = np.random.default_rng(6).uniform(-1, 1, (1, 64, 1, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_file = tmp_path / "out.npz"
    code, out, err = cli(capsys, "run", str(program), "--input", f"x={tmp_path / 'x.npy'}",
                         "-o", str(out_file))  # fmt: skip
    assert code == 0 and err == ""
    assert out.startswith("y  float32[1x32x1x16]")  # fp16 values, handed over as float32 and "saved 1 output(s)" in out
    saved = np.load(out_file)["y"]
    np.testing.assert_array_equal(saved, SimProgram.load(program).run({"x": x})["y"])
    # and the numbers: relu(conv) by onnxruntime on the same fp16 values
    weight = np.load(tmp_path / "weight.npy").astype(np.float32)
    (conv,) = run_ort("Conv", [x.astype(np.float16).astype(np.float32), weight])
    np.testing.assert_allclose(saved, np.maximum(conv, 0), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--backend", "reference"],
            "backend 'reference' runs graphs; a MIL program is a compiled program",
        ),
        (["--shape", "x=1x64x1x16"], "a MIL program's input shapes are fixed when it is written"),
        ([], "missing input(s) ['x']"),
        (["-i", "x=WRONG"], "input 'x' has shape [1, 64, 1, 8], but the model expects"),
        (["-i", "x=INTS", "-i", "z=INTS"], "unknown input(s) ['z']"),
    ],
)
def test_run_errors_exit_2_with_one_message(capsys, program, tmp_path, extra, message) -> None:
    np.save(tmp_path / "wrong.npy", np.zeros((1, 64, 1, 8), np.float32))
    np.save(tmp_path / "ints.npy", np.zeros((1, 64, 1, 16), np.int32))
    extra = [e.replace("WRONG", str(tmp_path / "wrong.npy")).replace("INTS", str(tmp_path /
             "ints.npy")) for e in extra]  # fmt: skip
    code, out, err = cli(capsys, "run", str(program), *extra)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert err.count("anekit run: error:") == 1


def test_broken_programs_exit_2(capsys, program: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((1, 64, 1, 16), np.float32))
    feed = f"x={tmp_path / 'x.npy'}"
    text = program.read_text()
    cases = {
        "uses 1 operation(s) the simulator does not support: frobnicate (1)":
            text.replace("relu(x = y0)", "frobnicate(x = y0)"),
        "(line 12, column 53)": text.replace("relu(x = y0)", "relu(x = y0"),
        "leaves the program directory":
            text.replace("@model_path/weights/weight.bin", "@model_path/../x.npy"),
        "computed y with shape [1, 32, 1, 16], the program declares tensor<fp16, [1, 32, 1, 8]>":
            text.replace("tensor<fp16, [1, 32, 1, 16]> y =", "tensor<fp16, [1, 32, 1, 8]> y ="),
    }  # fmt: skip
    for message, broken in cases.items():
        program.write_text(broken)
        code, out, err = cli(capsys, "run", str(program), "-i", feed)
        assert code == 2 and out == "", (message, err)
        assert message in err and "Traceback" not in err, (message, err)
        assert "model.mil" in err  # names the file


def test_onnx_models_still_default_to_reference(capsys, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "run", str(tmp_path / "absent.onnx"))
    assert code == 2 and "does not exist" in err
