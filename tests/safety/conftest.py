"""Shared by the safety tests: a small model with weights, its bundles, and the CLI run
in-process under an alarm (a command that blocks on a pipe fails the test, never hangs it)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.cli import main

HANG_SECONDS = 20


def matmul_model(seed: int = 0) -> onnx.ModelProto:
    """y = relu(x @ W + b): a model whose bundle has a weight.bin."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
        helper.make_node("Relu", ["hb"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, b],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="session")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "mm.onnx"
    path.write_bytes(matmul_model().SerializeToString())
    return path


@pytest.fixture(scope="session")
def compiled(model_file: Path):
    """The model compiled for M4 (and for M1: a second, different bundle of it)."""
    return {t: anekit.compile(anekit.from_onnx(model_file), target=t) for t in ("m4", "m1")}


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run `anekit ARGS` in-process: (exit status, stdout, stderr)."""

    def run(*args: object) -> tuple[int, str, str]:
        with alarm():
            code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


class Hang(Exception):
    pass


@pytest.fixture
def no_hang() -> Iterator[None]:
    with alarm():
        yield


class alarm:  # noqa: N801 - used like a function
    """Raise Hang in the main thread after HANG_SECONDS."""

    def __enter__(self) -> None:
        def fire(*_: object) -> None:
            raise Hang(f"blocked for {HANG_SECONDS} s")

        self.previous = signal.signal(signal.SIGALRM, fire)
        signal.alarm(HANG_SECONDS)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


def user_error(result: tuple[int, str, str], *words: str) -> str:
    """Exit status 2, one message (and a hint), no traceback, each of ``words`` in it."""
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip
