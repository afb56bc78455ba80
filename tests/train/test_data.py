"""The IDX reader on files written per the format's specification, good and malformed, and
the standard-library text corpus."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from anekit.errors import FormatError, InputError
from anekit.train.data import CharVocab, char_windows, fashion_mnist, python_source_text, read_idx


def _idx(dtype_code: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return (
        bytes([0, 0, dtype_code, len(dims)])
        + b"".join(struct.pack(">I", d) for d in dims)
        + payload
    )


def test_reads_uint8_and_big_endian_int32_gzip_or_not(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a-idx3-ubyte").write_bytes(_idx(0x08, images.shape, images.tobytes()))
    assert np.array_equal(read_idx(tmp_path / "a-idx3-ubyte"), images)
    ints = np.array([1, -2, 70000], dtype=">i4")
    with gzip.open(tmp_path / "b.gz", "wb") as f:
        f.write(_idx(0x0C, (3,), ints.tobytes()))
    out = read_idx(tmp_path / "b.gz")
    assert out.tolist() == [1, -2, 70000] and out.dtype == np.int32


@pytest.mark.parametrize("raw, message", [
    (b"\x00\x01\x08\x01", "bad magic"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x00", "bad magic"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x02", "truncated header"),
    (_idx(0x08, (2, 2), b"\x00" * 3), "need 4 bytes of data, the file has 3"),
    (_idx(0x08, (65536, 65536), b""), "need 4294967296 bytes"),
])  # fmt: skip
def test_malformed_files_are_refused(tmp_path, raw, message):
    path = tmp_path / "bad-idx"
    path.write_bytes(raw)
    with pytest.raises(FormatError, match=message):
        read_idx(path)


def test_missing_dataset_says_how_to_install(tmp_path):
    with pytest.raises(InputError, match="apt-get install dataset-fashion-mnist"):
        fashion_mnist(tmp_path)


def test_fashion_mnist_from_a_directory_of_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 5), ("t10k", 3)):
        imgs = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        with gzip.open(tmp_path / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(_idx(0x08, imgs.shape, imgs.tobytes()))
        with gzip.open(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(_idx(0x08, (n,), bytes(range(n))))
    d = fashion_mnist(tmp_path)
    assert d["train"]["x"].shape == (5, 1, 28, 28) and d["test"]["target"].tolist() == [0, 1, 2]
    assert 0.0 <= d["train"]["x"].min() and d["train"]["x"].max() <= 1.0


def test_python_sources_as_characters():
    text = python_source_text(5000)
    assert len(text) == 5000 and "def " in text
    vocab = CharVocab()
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text and ids.max() < len(vocab) == 96
    batch = char_windows(ids, 16, 4, np.random.default_rng(0))
    assert batch["ids"].shape == (4, 16) and np.array_equal(
        batch["ids"][:, 1:], batch["target"][:, :-1]
    )
