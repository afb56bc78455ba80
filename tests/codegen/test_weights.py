"""The chunked weight.bin is byte for byte what formats.blob's writer and coremltools write;
conversions are shared by tied weights and their slices, with the bytes of separate ones."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from anekit.codegen.builder import cast_array
from anekit.codegen.weights import Conversions, WeightFile
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


class _Counting:
    """``cast_array`` that records the shape of every array it converts."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def __call__(self, array: np.ndarray, dtype: str) -> np.ndarray:
        self.shapes.append(array.shape)
        return cast_array(array, dtype)


@pytest.mark.parametrize("threads", [0, 2])
def test_tied_weights_and_their_slices_are_converted_once(threads: int) -> None:
    table = np.random.default_rng(1).standard_normal((300, 8)).astype(np.float32)
    table[3, 2] = 1e6  # saturates to fp16's largest finite value, in every view
    table.flags.writeable = False
    convert = _Counting()
    pool = ThreadPoolExecutor(threads) if threads else None
    conversions = Conversions(convert, pool)
    whole = conversions.submit(table, "fp16")
    again = conversions.submit(table, "fp16")
    parts = [conversions.submit(table[i : i + 100], "fp16") for i in range(0, 300, 100)]
    column = conversions.submit(table[:, 2], "fp16")  # strided: a strided view of the result
    assert again is whole
    for view, done in [
        (table, whole.result()),
        *((table[i : i + 100], p.result()) for i, p in zip(range(0, 300, 100), parts, strict=True)),
        (table[:, 2], column.result()),
    ]:
        expected = np.clip(view, -65504, 65504).astype(np.float16)  # the oracle: numpy's cast
        assert done.tobytes() == expected.tobytes()
        assert np.shares_memory(done, whole.result())
    assert convert.shapes == [(300, 8)]
    if pool is not None:
        pool.shutdown()


def test_views_that_are_not_slices_of_a_converted_whole_are_converted_alone() -> None:
    table = np.random.default_rng(2).standard_normal((40, 30)).astype(np.float32)
    convert = _Counting()
    conversions = Conversions(convert)
    transposed = conversions.submit(table.T, "fp16")  # first: all of it, but out of order
    part = conversions.submit(table[:10], "fp16")
    fp32 = conversions.submit(table, "fp32")  # another stored type: its own conversion
    np.testing.assert_array_equal(transposed.result(), table.T.astype(np.float16))
    assert transposed.result().flags.c_contiguous
    np.testing.assert_array_equal(part.result(), table[:10].astype(np.float16))
    assert fp32.result().dtype == np.float32
    assert convert.shapes == [(30, 40), (10, 30), (40, 30)]


def test_a_new_array_at_a_reused_address_is_not_mistaken_for_an_old_one() -> None:
    conversions = Conversions(cast_array)
    results = []
    for k in range(50):  # freed arrays of one size make the allocator reuse ids and memory
        array = np.full((64, 64), float(k), dtype=np.float32)
        results.append(conversions.submit(array, "fp16").result())
        del array
    assert [float(r[0, 0]) for r in results] == [float(k) for k in range(50)]


def test_digest_while_conversions_finish_matches_the_bytes() -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (10, 5000, 77, 100_000)]
    with ThreadPoolExecutor(2) as pool:
        conversions = Conversions(cast_array, pool)
        pending, reference = WeightFile(), BlobWriter()
        for a in arrays:
            offset = pending.add_pending(conversions.submit(a, "fp16"), a.size, "fp16")
            assert offset == reference.add(a, "fp16")
        with ThreadPoolExecutor(2) as hashers:  # two readers at once resolve each chunk once
            digests = [hashers.submit(pending.sha256) for _ in range(2)]
            chunks = pending.chunks()
        data = reference.to_bytes()
        assert {d.result() for d in digests} == {hashlib.sha256(data).hexdigest()}
        assert b"".join(bytes(c) for c in chunks) == data == pending.to_bytes()
