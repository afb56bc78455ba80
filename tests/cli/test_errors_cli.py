"""Bad input tried as a new user would, through `anekit info` and `anekit run`.

Each case must print one clear message (plus at most a hint line) on stderr, nothing on
stdout, no traceback, and exit with status 2. Working calls on the same files are the
controls: they show each failure comes from the one thing that is wrong.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

LIGHT_SQUEEZENET = (
    Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
)


def anekit_cli(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANEKIT_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "anekit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def assert_user_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Status 2, one message line (and an optional hint), no traceback; return the message."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines and lines[0].startswith("anekit ") and ": error: " in lines[0], lines
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].strip().startswith("hint:")), lines
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return lines[0]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def relu_model(shape: list[int | str]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    graph = helper.make_graph([node], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """The user's working directory: good and bad models and inputs."""
    text = tmp_path / "notes.onnx"
    text.write_text("these are my notes, not a model\n" * 20)
    truncated = tmp_path / "truncated.onnx"
    whole = LIGHT_SQUEEZENET.read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    (tmp_path / "a_directory.onnx").mkdir()

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("FancyOp", ["r"], ["f"], name="fancy_1"),
        helper.make_node("FancyOp", ["f"], ["g"], name="fancy_2"),
        helper.make_node("Frobnicate", ["g"], ["y"], name="frob", domain="com.example"),
    ]
    unsupported = helper.make_model(
        helper.make_graph(nodes, "unsupported", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    np.save(tmp_path / "x.npy", np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32))
    np.save(tmp_path / "wrong_shape.npy", np.zeros((2, 3), np.float32))
    return {
        "dir": tmp_path,
        "text": text,
        "truncated": truncated,
        "directory": tmp_path / "a_directory.onnx",
        "unsupported": _save(unsupported, tmp_path / "unsupported.onnx"),
        "static": _save(relu_model([1, 4]), tmp_path / "static.onnx"),
        "dynamic": _save(relu_model(["batch", 4]), tmp_path / "dynamic.onnx"),
    }


RUN_INPUT = ("--input", "x=x.npy")


@pytest.mark.parametrize("command", ["info", "run"])
def test_bad_model_files(files, command) -> None:
    extra = RUN_INPUT if command == "run" else ()
    cwd = files["dir"]
    assert_user_error(
        anekit_cli(command, "missing.onnx", *extra, cwd=cwd), "missing.onnx", "does not exist"
    )
    assert_user_error(anekit_cli(command, files["directory"], *extra, cwd=cwd), "is a directory")
    assert_user_error(anekit_cli(command, files["text"], *extra, cwd=cwd), "notes.onnx", "not")
    assert_user_error(
        anekit_cli(command, files["truncated"], *extra, cwd=cwd), "truncated.onnx", "truncated"
    )


@pytest.mark.parametrize("command", ["info", "run"])
def test_unsupported_ops_are_listed_in_one_message(files, command) -> None:
    extra = RUN_INPUT if command == "run" else ()
    message = assert_user_error(
        anekit_cli(command, files["unsupported"], *extra, cwd=files["dir"]),
        "2 unsupported op type(s) in 3 node(s)",
        "FancyOp x2 ('fancy_1', 'fancy_2')",
        "com.example.Frobnicate x1 ('frob')",
    )
    assert "Relu" not in message


def test_dynamic_input_needs_a_shape_and_takes_one(files) -> None:
    cwd = files["dir"]
    shown = anekit_cli("info", files["dynamic"], cwd=cwd)  # info shows the declared shapes
    assert shown.returncode == 0, shown.stderr
    assert "x: fp32[batch, 4]" in shown.stdout
    assert "dimension 0 ('batch')" in shown.stdout and "--shape x=1x4" in shown.stdout
    refused = anekit_cli("run", files["dynamic"], *RUN_INPUT, cwd=cwd)
    assert_user_error(refused, "'x'", "dimension 0", "'batch'")
    assert "--shape x=1x4" in refused.stderr
    ok = anekit_cli("info", files["dynamic"], "--shape", "x=3x4", cwd=cwd)
    assert ok.returncode == 0, ok.stderr
    assert "fp32[3x4]" in ok.stdout


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("x=1by4", ["--shape 'x=1by4' is not NAME=DIMS"]),
        ("1x4", ["--shape '1x4' is not NAME=DIMS"]),
        ("x=", ["--shape 'x=' is not NAME=DIMS"]),
        ("y=1x4", ["['y']", "not inputs of the model", "['x']"]),
        ("x=1x4x2", ["rank 3", "rank 2"]),
    ],
)
def test_bad_shape_option(files, spec, words) -> None:
    assert_user_error(
        anekit_cli("info", files["dynamic"], "--shape", spec, cwd=files["dir"]), *words
    )


def test_run_input_errors(files) -> None:
    cwd, model = files["dir"], files["static"]
    assert_user_error(anekit_cli("run", model, cwd=cwd), "missing input(s) ['x']", "fp32[1x4]")
    assert_user_error(
        anekit_cli("run", model, "--input", "x=wrong_shape.npy", cwd=cwd),
        "'x' has shape [2, 3]",
        "expects [1, 4]",
    )
    assert_user_error(
        anekit_cli("run", model, "--input", "x=nowhere.npy", cwd=cwd),
        "nowhere.npy",
        "does not exist",
    )
    assert_user_error(
        anekit_cli("run", model, "--input", "x=notes.onnx", cwd=cwd),
        "notes.onnx",
        "not a readable .npy",
    )
    assert_user_error(
        anekit_cli("run", model, "--input", "x.npy", cwd=cwd), "'x.npy' is not NAME=FILE.npy"
    )
    assert_user_error(
        anekit_cli("run", model, *RUN_INPUT, "--input", "z=x.npy", cwd=cwd),
        "unknown input(s) ['z']",
    )


def test_run_works_on_the_same_files(files) -> None:
    result = anekit_cli("run", files["static"], *RUN_INPUT, "-o", "out.npz", cwd=files["dir"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("y  float32[1x4] = [0., 2., 0., 4.]")
    with np.load(files["dir"] / "out.npz") as saved:
        np.testing.assert_array_equal(saved["y"], [[0.0, 2.0, 0.0, 4.0]])


def test_every_command_module_registers_a_command() -> None:
    """A command module that fails to import is an error of the CLI, never a silently
    missing command."""
    from anekit.cli import COMMAND_MODULES, build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert set(sub.choices) >= {m.rsplit(".", 1)[1] for m in COMMAND_MODULES}
