"""A named pipe, a device or a directory where a file is expected: a clear message at
once (never a hang), through every command and the API's loaders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.errors import AnekitError
from anekit.formats import mil
from anekit.formats.npy import read_array

from .conftest import alarm, user_error


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [
    ["info", "{p}"], ["run", "{p}"], ["inspect", "{p}"], ["compile", "{p}", "-o", "{d}/o.anekit"],
    ["check", "{p}"], ["estimate", "{p}"],
])  # fmt: skip
def test_a_named_pipe_as_the_model(cli, fifo: Path, command: list[str]) -> None:
    args = [a.format(p=fifo, d=fifo.parent) for a in command]
    user_error(cli(*args), str(fifo), "named pipe")


def test_a_named_pipe_as_a_feed(cli, tmp_path: Path, model_file: Path) -> None:
    os.mkfifo(tmp_path / "x.npy")
    user_error(cli("run", model_file, "--input", f"x={tmp_path / 'x.npy'}"), "named pipe")


@pytest.mark.parametrize("mil_name", ["model.mil"])
def test_a_named_pipe_as_a_mil_program(cli, tmp_path: Path, mil_name: str) -> None:
    os.mkfifo(tmp_path / mil_name)
    user_error(cli("run", tmp_path / mil_name), "named pipe")


def test_a_device_and_a_directory(cli, tmp_path: Path, model_file: Path) -> None:
    user_error(cli("info", "/dev/zero"), "character device")
    user_error(cli("inspect", "/dev/zero"), "character device")
    user_error(cli("run", "/dev/zero"), "character device")
    (tmp_path / "dir.onnx").mkdir()
    user_error(cli("info", tmp_path / "dir.onnx"), "directory")
    user_error(cli("run", model_file, "--input", f"x={tmp_path}"), "directory")


def test_the_api_loaders(fifo: Path, tmp_path: Path) -> None:
    loaders = [anekit.from_onnx, anekit.load, mil.parse_file, lambda p: read_array(p, "feed")]
    for load in loaders:
        for path in (fifo, Path("/dev/zero")):
            with alarm(), pytest.raises(AnekitError, match="named pipe|character device"):
                load(path)
    for load in (anekit.from_onnx, mil.parse_file, lambda p: read_array(p, "feed")):
        with pytest.raises(AnekitError, match="directory"):
            load(tmp_path)


def test_a_bundle_file_replaced_by_a_pipe(compiled, tmp_path: Path) -> None:
    bundle = compiled["m4"].save(tmp_path / "m.anekit")
    weights = next(bundle.rglob("weight.bin"))
    weights.unlink()
    os.mkfifo(weights)
    with alarm(), pytest.raises(AnekitError, match="not a regular file"):
        anekit.load(bundle)


def test_the_controls_load(model_file: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 8), np.float32))
    assert read_array(tmp_path / "x.npy", "feed").shape == (1, 8)
    assert anekit.from_onnx(model_file).input_names == ("x",)
