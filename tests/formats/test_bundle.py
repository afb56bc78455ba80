"""Bundle manifests and reading bundles as untrusted input: schema, paths, digests, BLOBFILEs."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen import bundle as writer
from anekit.codegen.mil import whole_graph_segment
from anekit.errors import AnekitError, FormatError
from anekit.formats import blob as blob_module
from anekit.formats.bundle import MANIFEST, canonical_json, parse_manifest, read_bundle
from anekit.runtime import load

MODEL = "segments/0/model.mil"
WEIGHTS = "segments/0/weights/weight.bin"


def _graph() -> anekit.Graph:
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 8, 1, 16))
    w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    return anekit.graph(
        [ops.relu(ops.conv2d(x, w, rng.standard_normal(16).astype(np.float32)), name="y")]
    )


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    g = _graph()
    contents = writer.build_bundle(g, targets.get("m4"), [whole_graph_segment(g)], report={"x": 1})
    return writer.write_bundle(contents, tmp_path / "model.anekit")


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())


def _save_manifest(path: Path, data: dict) -> None:
    (path / MANIFEST).write_bytes(canonical_json(data))


def _rehash(path: Path, rel: str) -> None:
    """Make the manifest agree with the file as it now is (a forger's move)."""
    data = _manifest(path)
    content = (path / rel).read_bytes()
    data["files"][rel] = {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    _save_manifest(path, data)


def _edit_mil(path: Path, edit: Callable[[str], str]) -> None:
    file = path / MODEL
    file.write_text(edit(file.read_text()))
    _rehash(path, MODEL)


def test_a_written_bundle_reads_back(bundle: Path) -> None:
    read = read_bundle(bundle)
    assert sorted(os.listdir(bundle)) == ["manifest.json", "report.json", "segments"]
    assert read.manifest.to_bytes() == (bundle / MANIFEST).read_bytes()
    assert parse_manifest(_manifest(bundle)) == read.manifest
    (segment,) = read.manifest.segments
    assert segment.program == MODEL and segment.weights == WEIGHTS and segment.device == "ane"
    assert set(read.manifest.files) == {MODEL, WEIGHTS, "report.json"}
    assert json.loads((bundle / "report.json").read_text()) == {"x": 1}
    program = load(bundle)
    assert [p.name for p in program.inputs] == ["x"] and [p.name for p in program.outputs] == ["y"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("program", "../outside.mil", "must be relative"),
        ("program", "/etc/passwd", "must be relative"),
        ("program", "segments/./0/model.mil", "must be relative"),
        ("weights", "C:\\weights.bin", "must be relative"),
        ("device", "gpu", "is not one of"),
        ("index", 3, "expected 0"),
        ("nodes", -1, "expected an integer"),
    ],
)
def test_hostile_segment_fields_are_refused(
    bundle: Path, field: str, value: object, message: str
) -> None:
    data = _manifest(bundle)
    data["segments"][0][field] = value
    _save_manifest(bundle, data)
    with pytest.raises(FormatError, match=message):
        read_bundle(bundle)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("segments"), r"missing key\(s\) \['segments'\]"),
        (lambda d: d.update(schema_version=2), "this anekit reads version 1"),
        (lambda d: d.update(format="other"), "expected 'anekit-bundle'"),
        (lambda d: d.update(extra=1), r"unknown key\(s\) \['extra'\]"),
        (lambda d: d["inputs"][0].update(shape=[1, -8]), r"inputs\[0\].shape\[1\]"),
        (lambda d: d["inputs"][0].update(dtype="float64"), "is not one of"),
        (
            lambda d: d["outputs"][0].update(source={"segment": 5, "value": "y"}),
            "does not run before it",
        ),
        (
            lambda d: d["outputs"][0].update(source={"segment": 0, "value": "nope"}),
            "has no output 'nope'",
        ),
        (lambda d: d["outputs"][0].update(source={"input": "ghost"}), "does not exist"),
        (
            lambda d: d["segments"][0]["inputs"][0].update(mil_shape=[1, 8, 1, 2]),
            "does not hold the shape",
        ),
        (lambda d: d["outputs"][0].update(shape=[1, 16, 1, 15]), "connects a fp32"),
        (lambda d: d["files"].pop(WEIGHTS), "has no sha256"),
        (lambda d: d["files"][WEIGHTS].update(sha256="XYZ"), "64 lowercase hexadecimal"),
        (
            lambda d: d["files"].update({"../../etc/passwd": d["files"][WEIGHTS]}),
            "must be relative",
        ),
    ],
)
def test_schema_errors_name_the_field(
    bundle: Path, edit: Callable[[dict], object], message: str
) -> None:
    data = _manifest(bundle)
    edit(data)
    _save_manifest(bundle, data)
    with pytest.raises(FormatError, match=message):
        read_bundle(bundle)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply|not valid JSON"),
        (b"[]", "expected an object"),
    ],
)
def test_broken_manifests(bundle: Path, content: bytes, message: str) -> None:
    (bundle / MANIFEST).write_bytes(content)
    with pytest.raises(FormatError, match=message):
        read_bundle(bundle)


def test_wrong_digest_missing_file_and_wrong_size(bundle: Path) -> None:
    weights = bundle / WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="does not match its sha256"):
        read_bundle(bundle)
    weights.write_bytes(bytes(data[:-1]))
    with pytest.raises(FormatError, match="has .* bytes, the manifest says"):
        read_bundle(bundle)
    weights.unlink()
    with pytest.raises(FormatError, match=f"'{WEIGHTS}' named in the manifest is missing"):
        read_bundle(bundle)
    with pytest.raises(FormatError, match="no such bundle"):
        read_bundle(bundle.parent / "absent.anekit")


def test_symlinks_out_of_the_bundle_are_refused(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes((bundle / WEIGHTS).read_bytes())
    (bundle / WEIGHTS).unlink()
    (bundle / WEIGHTS).symlink_to(outside)
    with pytest.raises(FormatError, match="leads outside the bundle"):
        read_bundle(bundle)


class _Opened:
    """Records every weight file a BlobReader opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.paths: list[Path] = []
        original = blob_module.BlobReader.__init__

        def spy(reader, source):  # noqa: ANN001, ANN202
            if not isinstance(source, (bytes, bytearray, memoryview)):
                self.paths.append(Path(source).resolve())
            original(reader, source)

        monkeypatch.setattr(blob_module.BlobReader, "__init__", spy)


def test_blobfile_path_leaving_the_bundle(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "secret" / "weights" / "weight.bin"
    outside.parent.mkdir(parents=True)
    outside.write_bytes((bundle / WEIGHTS).read_bytes())
    _edit_mil(
        bundle,
        lambda t: t.replace(
            "@model_path/weights/weight.bin", "@model_path/../../../secret/weights/weight.bin"
        ),
    )
    opened = _Opened(monkeypatch)
    with pytest.raises(
        FormatError, match="BLOBFILE path '../../../secret/weights/weight.bin' must be relative"
    ):
        load(bundle)
    assert all(outside.resolve() != p for p in opened.paths)


def test_blobfile_naming_another_file_in_the_bundle(bundle: Path) -> None:
    _edit_mil(
        bundle, lambda t: t.replace("@model_path/weights/weight.bin", "@model_path/model.mil")
    )
    with pytest.raises(FormatError, match="is not the segment's weight file"):
        load(bundle)


def test_blobfile_offsets_past_the_end_and_misaligned(bundle: Path) -> None:
    size = (bundle / WEIGHTS).stat().st_size
    _edit_mil(
        bundle,
        lambda t: t.replace("offset = uint64(64)", f"offset = uint64({size + 64 - size % 64})"),
    )
    with pytest.raises(FormatError, match="past the end"):
        load(bundle)


def test_blobfile_with_the_wrong_declared_type(bundle: Path) -> None:
    _edit_mil(
        bundle,
        lambda t: t.replace(
            "tensor<fp16, [16, 8, 1, 1]>(BLOBFILE", "tensor<fp16, [8, 8, 1, 1]>(BLOBFILE"
        ),
    )
    with pytest.raises(FormatError):
        load(bundle)


def test_blob_sizes_that_overflow(bundle: Path) -> None:
    weights = bundle / WEIGHTS
    data = bytearray(weights.read_bytes())
    # the first record (offset 64): sentinel, dtype, size, data offset
    struct.pack_into("<Q", data, 64 + 8, 2**64 - 64)
    weights.write_bytes(bytes(data))
    _rehash(bundle, WEIGHTS)
    with pytest.raises(FormatError, match="overflows|past the end"):
        load(bundle)


def test_program_signature_must_match_the_manifest(bundle: Path) -> None:
    data = _manifest(bundle)
    data["segments"][0]["inputs"][0]["mil_name"] = "other"
    _save_manifest(bundle, data)
    with pytest.raises(FormatError, match="the manifest lists"):
        load(bundle)


def test_report_keeps_estimates_and_drops_wall_clock_times(tmp_path: Path) -> None:
    g = _graph()
    report = {"passes": [{"name": "fuse", "seconds": 0.25}], "estimate": {"total_ms": 1.5, "time_ms": 2},
              "compile_seconds": 3.0}  # fmt: skip
    contents = writer.build_bundle(g, targets.get("m4"), [whole_graph_segment(g)], report=report)
    saved = json.loads(contents.files["report.json"])
    assert saved == {"passes": [{"name": "fuse"}], "estimate": {"total_ms": 1.5, "time_ms": 2}}


def test_write_refuses_to_replace_a_directory_that_is_not_a_bundle(tmp_path: Path) -> None:
    g = _graph()
    contents = writer.build_bundle(g, targets.get("m4"), [whole_graph_segment(g)])
    precious = tmp_path / "Documents"
    precious.mkdir()
    (precious / "thesis.txt").write_text("keep me")
    with pytest.raises(AnekitError, match="not an anekit bundle"):
        writer.write_bundle(contents, precious)
    assert (precious / "thesis.txt").read_text() == "keep me"


def test_a_failed_write_leaves_the_old_bundle_whole(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p.relative_to(bundle): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    g = _graph()
    contents = writer.build_bundle(g, targets.get("m1"), [whole_graph_segment(g)])
    calls = []

    def failing(path: Path, data: writer.FileData) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.to_bytes())

    monkeypatch.setattr(writer, "_write", failing)
    with pytest.raises(AnekitError, match="disk full"):  # the machine's state, not a bug
        writer.write_bundle(contents, bundle)
    after = {p.relative_to(bundle): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in bundle.parent.iterdir()) == ["model.anekit"]  # no temp left
    monkeypatch.undo()
    writer.write_bundle(contents, bundle)  # and a complete write replaces it
    assert read_bundle(bundle).manifest.target.name == "m1"
    assert sorted(p.name for p in bundle.parent.iterdir()) == ["model.anekit"]
