"""The reader hashes a bundle's files in parallel, yet reports the error a one-by-one check
would report first; a good bundle's digests all verify."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen import bundle as writer
from anekit.codegen.mil import whole_graph_segment
from anekit.errors import FormatError
from anekit.formats.bundle import read_bundle, sha256_file

MODEL = "segments/0/model.mil"  # sorted: report.json, segments/0/model.mil, .../weight.bin
REPORT = "report.json"
WEIGHTS = "segments/0/weights/weight.bin"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 8, 1, 16))
    w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    g = anekit.graph([ops.relu(ops.conv2d(x, w), name="y")])
    contents = writer.build_bundle(g, targets.get("m4"), [whole_graph_segment(g)], report={"a": 1})
    return writer.write_bundle(contents, tmp_path / "model.anekit")


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_every_digest_is_checked(bundle: Path) -> None:
    read = read_bundle(bundle)
    for rel, entry in read.manifest.files.items():
        assert sha256_file(bundle / rel) == entry.sha256
        assert hashlib.sha256((bundle / rel).read_bytes()).hexdigest() == entry.sha256
    _flip_last_byte(bundle / WEIGHTS)
    with pytest.raises(FormatError, match="weight.bin' does not match its sha256"):
        read_bundle(bundle)
    assert read_bundle(bundle, verify=False).manifest == read.manifest


def test_an_earlier_digest_error_is_reported_before_a_later_size_error(bundle: Path) -> None:
    _flip_last_byte(bundle / MODEL)  # same size, other bytes
    with open(bundle / WEIGHTS, "ab") as f:
        f.write(b"\0")  # a later file of the wrong size
    with pytest.raises(FormatError, match="model.mil' does not match its sha256"):
        read_bundle(bundle)


def test_an_earlier_size_error_is_reported_before_a_later_digest_error(bundle: Path) -> None:
    with open(bundle / REPORT, "ab") as f:
        f.write(b" ")
    _flip_last_byte(bundle / WEIGHTS)
    with pytest.raises(FormatError, match="report.json' has .* bytes, the manifest says"):
        read_bundle(bundle)
    (bundle / MODEL).unlink()
    with pytest.raises(FormatError, match="report.json' has"):
        read_bundle(bundle)
