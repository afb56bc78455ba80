"""BLOBFILE weights tried as a hostile user would: paths out of the directory, bad offsets and sizes.

Every case must be a clear FormatError when the program loads, and no file outside the
program's directory may be opened: a valid weight file is placed outside it (so reading it
would have succeeded), and every path handed to the weight reader is recorded.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats import mil
from anekit.formats.blob import BlobWriter
from anekit.simulator import SimProgram, values

T = mil.MilTensorType("fp16", (2, 4))


def weight_bytes(array: np.ndarray, dtype: str | None = None) -> bytes:
    writer = BlobWriter()
    writer.add(array, dtype)
    return writer.to_bytes()


GOOD = np.arange(8, dtype=np.float16).reshape(2, 4)


def program(path: str, offset: int = 64, t: mil.MilTensorType = T) -> mil.MilProgram:
    ops = (
        mil.blob_const("w", t, offset, path),
        mil.operation("add", ("y", t), {"x": "x", "y": "w"}),
    )
    f = mil.Function("main", "ios18", (mil.Binding("x", t),), ops, ("y",))
    return mil.MilProgram("1.3", (), (f,))


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """prog/ (the program directory, with a good weight.bin) and outside/ (a valid weight file)."""
    prog = tmp_path / "prog"
    (prog / "weights").mkdir(parents=True)
    (prog / "weights" / "weight.bin").write_bytes(weight_bytes(GOOD))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "weight.bin").write_bytes(weight_bytes(GOOD))
    return {"prog": prog, "outside": outside}


@pytest.fixture
def opened(monkeypatch) -> list[Path]:
    """Every path the simulator hands to BlobReader."""
    seen: list[Path] = []
    real = values.BlobReader

    def recording(source):
        seen.append(Path(source).resolve())
        return real(source)

    monkeypatch.setattr(values, "BlobReader", recording)
    return seen


def test_the_control_case_loads_and_runs(layout, opened) -> None:
    prog = SimProgram(program("@model_path/weights/weight.bin"), layout["prog"])
    out = prog.run({"x": np.ones((2, 4), np.float16)})["y"]
    np.testing.assert_array_equal(out, GOOD + 1)
    assert opened == [(layout["prog"] / "weights" / "weight.bin").resolve()]


@pytest.mark.parametrize(
    "path, message",
    [
        ("@model_path/../outside/weight.bin", "leaves the program directory"),
        ("@model_path/weights/../../outside/weight.bin", "leaves the program directory"),
        ("@model_path/./weights/weight.bin", "leaves the program directory"),
        ("@model_path//etc/passwd", "leaves the program directory"),
        ("@model_path/weights\\..\\..\\outside\\weight.bin", "leaves the program directory"),
        ("@model_path/weights/weight.bin\0", "leaves the program directory"),
        ("@model_path/", "leaves the program directory"),
        ("OUTSIDE_ABSOLUTE", "does not start with '@model_path/'"),
        ("weights/weight.bin", "does not start with '@model_path/'"),
        ("@model_path/weights/missing.bin", "no such weight file"),
    ],
)
def test_paths_leaving_the_directory(layout, opened, path: str, message: str) -> None:
    path = path.replace("OUTSIDE_ABSOLUTE", str(layout["outside"] / "weight.bin"))
    with pytest.raises(FormatError, match=message.replace("(", r"\(")):
        SimProgram(program(path), layout["prog"])
    assert opened == []


def test_a_symlink_pointing_out_is_not_followed(layout, opened) -> None:
    link = layout["prog"] / "weights" / "link.bin"
    os.symlink(layout["outside"] / "weight.bin", link)
    with pytest.raises(FormatError, match="outside the program directory"):
        SimProgram(program("@model_path/weights/link.bin"), layout["prog"])
    assert opened == []


def test_a_symlinked_directory_pointing_out_is_not_followed(layout, opened) -> None:
    os.symlink(layout["outside"], layout["prog"] / "shared")
    with pytest.raises(FormatError, match="outside the program directory"):
        SimProgram(program("@model_path/shared/weight.bin"), layout["prog"])
    assert opened == []


def test_a_symlink_staying_inside_is_fine(layout) -> None:
    os.symlink(layout["prog"] / "weights" / "weight.bin", layout["prog"] / "alias.bin")
    SimProgram(program("@model_path/alias.bin"), layout["prog"])


def test_no_directory_means_no_blobfile(layout) -> None:
    with pytest.raises(FormatError, match="needs the program's directory"):
        SimProgram(program("@model_path/weights/weight.bin"), None)


def write(layout, data: bytes) -> Path:
    path = layout["prog"] / "weights" / "weight.bin"
    path.write_bytes(data)
    return layout["prog"]


@pytest.mark.parametrize(
    "offset, message",
    [
        (10**9, "runs past the end"),
        (2**64 - 64, "runs past the end"),
        (96, "is not a record position"),
        (0, "is not a record position"),
    ],
)
def test_offsets_that_do_not_name_a_record(layout, offset: int, message: str) -> None:
    with pytest.raises(FormatError, match=message) as info:
        SimProgram(program("@model_path/weights/weight.bin", offset), layout["prog"])
    assert "const 'w'" in str(info.value) and "weight.bin" in str(info.value)


def test_sizes_that_overflow_or_run_past_the_end(layout) -> None:
    good = bytearray(weight_bytes(GOOD))
    huge = bytearray(good)
    struct.pack_into("<Q", huge, 64 + 8, 2**64 - 8)  # size: data offset + size overflows
    with pytest.raises(FormatError, match="overflows"):
        SimProgram(program("@model_path/weights/weight.bin"), write(layout, bytes(huge)))
    long = bytearray(good)
    struct.pack_into("<Q", long, 64 + 8, 4096)  # more data than the file has
    with pytest.raises(FormatError, match="runs past the end"):
        SimProgram(program("@model_path/weights/weight.bin"), write(layout, bytes(long)))
    truncated = bytes(good[:-4])
    with pytest.raises(FormatError, match="runs past the end"):
        SimProgram(program("@model_path/weights/weight.bin"), write(layout, truncated))
    with pytest.raises(FormatError, match="truncated header"):
        SimProgram(program("@model_path/weights/weight.bin"), write(layout, b"\0" * 10))


def test_dtype_and_element_count_must_match_the_declared_type(layout) -> None:
    prog_dir = write(layout, weight_bytes(GOOD.astype(np.float32)))
    with pytest.raises(FormatError, match=r"holds fp32 data, the program declares tensor<fp16"):
        SimProgram(program("@model_path/weights/weight.bin"), prog_dir)
    prog_dir = write(layout, weight_bytes(np.zeros(6, np.float16)))
    with pytest.raises(FormatError, match=r"holds 6 elements, the program declares tensor<fp16, "
                                          r"\[2, 4\]> \(8 elements\)"):  # fmt: skip
        SimProgram(program("@model_path/weights/weight.bin"), prog_dir)


def test_a_directory_named_like_the_weight_file(layout) -> None:
    (layout["prog"] / "weights" / "weight.bin").unlink()
    (layout["prog"] / "weights" / "weight.bin").mkdir()
    with pytest.raises(FormatError, match="no such weight file"):
        SimProgram(program("@model_path/weights/weight.bin"), layout["prog"])
