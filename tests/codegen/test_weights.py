"""The chunked weight.bin is byte for byte what formats.blob's writer and coremltools write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit.codegen.weights import WeightFile
from anekit.formats.blob import BlobReader, BlobWriter


@pytest.mark.parametrize("sizes", [[], [1], [5, 64, 63, 130], [10, 1000, 3]])
def test_same_bytes_as_the_blob_writer(sizes: list[int]) -> None:
    rng = np.random.default_rng(len(sizes))
    ours, reference = WeightFile(), BlobWriter()
    offsets = []
    for k, n in enumerate(sizes):
        dtype = ("fp16", "fp32")[k % 2]
        array = rng.standard_normal(n).astype(np.float16 if dtype == "fp16" else np.float32)
        offsets.append(ours.add(array, dtype))
        assert reference.add(array, dtype) == offsets[-1]
    data = ours.to_bytes()
    assert data == reference.to_bytes() and len(data) == ours.size and len(ours) == len(sizes)
    assert b"".join(bytes(c) for c in ours.chunks()) == data


def test_arrays_are_kept_by_reference_and_read_back(tmp_path: Path) -> None:
    import coremltools.libmilstoragepython as cml

    array = np.arange(100, dtype=np.float16)
    weights = WeightFile()
    offset = weights.add(array, "fp16")
    chunks = weights.chunks()
    assert any(isinstance(c, memoryview) and c.obj is array for c in chunks)  # no copy
    path = tmp_path / "weight.bin"
    path.write_bytes(weights.to_bytes())
    np.testing.assert_array_equal(
        cml._BlobStorageReader(str(path)).read_fp16_data(offset).view(np.float16), array
    )
    np.testing.assert_array_equal(BlobReader(path).read(offset, (100,), "fp16"), array)
