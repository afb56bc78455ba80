"""Read once, verify what was read, use exactly that: files of a loaded bundle swapped on
disk between load and run change nothing, while a fresh load refuses them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.errors import FormatError
from anekit.formats import mil
from anekit.formats.blob import BlobReader

from .conftest import user_error

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)


def _swap_in_other_weights(bundle: Path, other: Path) -> None:
    """Replace the weight file by the other model's (same layout, other values), the way an
    attacker would: a new file renamed over the old one."""
    mine, theirs = next(bundle.rglob("weight.bin")), next(other.rglob("weight.bin"))
    assert mine.stat().st_size == theirs.stat().st_size
    assert mine.read_bytes() != theirs.read_bytes()
    shutil.copyfile(theirs, mine.with_name("swap"))
    mine.with_name("swap").replace(mine)


@pytest.fixture
def bundles(tmp_path: Path, model_file: Path) -> tuple[Path, Path]:
    from .conftest import matmul_model

    other = tmp_path / "other.onnx"
    other.write_bytes(matmul_model(seed=1).SerializeToString())
    mine = anekit.compile(anekit.from_onnx(model_file), target="m4").save(tmp_path / "a.anekit")
    theirs = anekit.compile(anekit.from_onnx(other), target="m4").save(tmp_path / "b.anekit")
    return mine, theirs


@pytest.mark.parametrize("backend", ["sim", "sim-fp32"])
def test_weights_swapped_between_load_and_run_are_not_used(bundles, backend: str) -> None:
    mine, theirs = bundles
    expected = anekit.load(mine).run({"x": X}, backend)["y"]
    tampered = anekit.load(theirs).run({"x": X}, backend)["y"]
    assert not np.array_equal(expected, tampered)  # the swap would show
    program = anekit.load(mine)
    _swap_in_other_weights(mine, theirs)
    assert np.array_equal(program.run({"x": X}, backend)["y"], expected)
    with pytest.raises(FormatError, match="does not match its sha256"):
        anekit.load(mine)  # a fresh load refuses the same files


def test_a_program_swapped_between_load_and_run_is_not_used(bundles) -> None:
    mine, _ = bundles
    expected = anekit.load(mine).run({"x": X})["y"]
    program = anekit.load(mine)
    text = (mine / "segments" / "0" / "model.mil").read_text()
    relu = text.replace("relu(", "sigmoid(")
    assert relu != text
    (mine / "segments" / "0" / "model.mil").write_text(relu)
    assert np.array_equal(program.run({"x": X})["y"], expected)
    with pytest.raises(FormatError):
        anekit.load(mine)


def test_the_cli_runs_the_bytes_it_verified(bundles, cli, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """`anekit run`: the weights are swapped after the bundle was read and verified, before
    its programs are built; the run uses the verified weights (the same answer as before)."""
    mine, theirs = bundles
    np.save(tmp_path / "x.npy", X)
    feeds = f"x={tmp_path / 'x.npy'}"
    code, before, err = cli("run", mine, "--input", feeds)
    assert code == 0, err
    parse = mil.parse_bytes

    def parse_then_swap(data: bytes, where: str = "<bytes>"):
        program = parse(data, where)
        _swap_in_other_weights(mine, theirs)
        return program

    monkeypatch.setattr(mil, "parse_bytes", parse_then_swap)
    code, after, err = cli("run", mine, "--input", feeds)
    assert code == 0, err
    assert after == before
    monkeypatch.undo()
    user_error(cli("run", mine, "--input", feeds), "does not match its sha256")


def test_no_bundle_file_is_opened_after_load(bundles, monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct check: once loaded, running opens no file of the bundle."""
    mine, _ = bundles
    program = anekit.load(mine)
    opened: list[object] = []
    real_init = BlobReader.__init__

    def spy(self, source):
        opened.append(source)
        real_init(self, source)

    monkeypatch.setattr(BlobReader, "__init__", spy)
    monkeypatch.setattr(mil, "parse_file", lambda *a: opened.append(a))
    program.run({"x": X})
    program.run({"x": X}, "sim-fp32")
    assert all(isinstance(source, bytes) for source in opened), opened
