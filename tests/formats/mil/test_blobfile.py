"""MIL BLOBFILE consts and weight.bin together: offsets written by BlobWriter resolve after print/parse."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anekit.formats.blob import BlobReader, BlobWriter
from anekit.formats.mil import (
    BlobFile,
    Function,
    MilProgram,
    MilTensorType,
    blob_const,
    parse_file,
    print_program,
)


def test_blobfile_offsets_resolve_to_the_written_arrays(tmp_path: Path):
    rng = np.random.default_rng(7)
    arrays = {
        "w_fp16": (rng.standard_normal((8, 4, 1, 1)).astype(np.float16), None),
        "w_fp32": (rng.standard_normal((3, 5)).astype(np.float32), None),
        "w_int4": (rng.integers(-8, 8, (6, 3)).astype(np.int8), "int4"),
        "w_uint6": (rng.integers(0, 64, (7,)).astype(np.uint8), "uint6"),
    }
    writer = BlobWriter()
    ops = []
    for name, (array, dtype) in arrays.items():
        offset = writer.add(array, dtype)
        mil_dtype = dtype or {"float16": "fp16", "float32": "fp32"}[array.dtype.name]
        ops.append(blob_const(name, MilTensorType(mil_dtype, array.shape), offset))
    (tmp_path / "weights").mkdir()
    writer.write(tmp_path / "weights" / "weight.bin")
    program = MilProgram("1.3", (), (Function("main", "ios18", (), tuple(ops), tuple(arrays)),))
    (tmp_path / "model.mil").write_text(print_program(program))

    parsed = parse_file(tmp_path / "model.mil")
    assert parsed == program
    with BlobReader(tmp_path / "weights" / "weight.bin") as reader:
        for op in parsed.function().operations:
            blob = op.attribute("val")
            assert isinstance(blob, BlobFile)
            assert blob.path == "@model_path/weights/weight.bin"
            got = reader.read(blob.offset, blob.type.shape, dtype=blob.dtype)
            expected = arrays[op.name][0]
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)
