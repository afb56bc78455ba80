"""`anekit inspect`: every kind through the real CLI entry point, exit codes, JSON on stdout."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import inspect as inspect_cli
from anekit.cli import main
from tests.fixtures import FIXTURES

HWX_FILES = sorted((FIXTURES / "hwx").glob("*.hwx"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MIL_DATA = Path(__file__).resolve().parents[1] / "formats" / "mil" / "data"
MIL_TEXT = (MIL_DATA / "facts_example.mil").read_text()  # FACTS section 1's example


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("path", HWX_FILES, ids=[p.stem for p in HWX_FILES])
def test_hwx_json_has_the_required_shape(capsys, path):
    code, out, err = run_cli(capsys, str(path), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["kind"] == "hwx"
    assert {"header", "build", "segments", "tensors", "task_descriptors", "relocations"} <= set(doc)
    assert set(doc["build"]) >= {"compiler", "version", "target", "flags"}
    for tensor in doc["tensors"]:
        assert (
            set(tensor) >= {"name", "role", "shape", "strides", "dtype"}
            and len(tensor["shape"]) == 4
        )
    assert doc["task_descriptors"]
    for descriptor in doc["task_descriptors"]:
        assert set(descriptor) >= {"offset", "size", "streams", "fields"}
        assert all(set(stream) >= {"name", "address", "words"} for stream in descriptor["streams"])
    # The input tensor's width and channels agree with the first descriptor's registers.
    fields = doc["task_descriptors"][0]["fields"]
    inputs = {(t["shape"][3], t["shape"][1]) for t in doc["tensors"] if t["role"] == "input"}
    assert (fields["Common.InDim.Win"], fields["Common.Cin.Cin"]) in inputs


def test_hwx_text_tree(capsys):
    code, out, err = run_cli(capsys, str(FIXTURES / "hwx" / "h13_gemm.hwx"))
    assert code == 0 and err == ""
    assert "h13_gemm.hwx: .hwx container, 557056 bytes, H13" in out
    assert "zin_ane_compiler 4.2.1" in out
    assert "input image: float16 [1, 512, 1, 1]" in out
    assert "relocations (16)" in out and "KernelDMASrc.CoeffBaseAddr[15]" in out
    assert "Cin: Cin=512" in out


def test_hwx_is_detected_by_magic_whatever_its_name(capsys, tmp_path):
    renamed = tmp_path / "program.bin"
    renamed.write_bytes((FIXTURES / "hwx" / "h13_relu.hwx").read_bytes())
    code, out, _ = run_cli(capsys, str(renamed), "--json")
    assert code == 0 and json.loads(out)["kind"] == "hwx"


def test_broken_hwx_is_a_clear_error(capsys, tmp_path):
    broken = tmp_path / "broken.hwx"
    broken.write_bytes((FIXTURES / "hwx" / "h13_relu.hwx").read_bytes()[:0x300])
    code, out, err = run_cli(capsys, str(broken), "--json")
    assert code == 2 and out == ""
    assert "broken.hwx" in err and "offset 0x" in err and "Traceback" not in err


def test_hwx_extension_with_wrong_magic(capsys, tmp_path):
    fake = tmp_path / "fake.hwx"
    fake.write_bytes(b"\x00" * 100)
    code, _, err = run_cli(capsys, str(fake))
    assert code == 2 and "0xbeefface" in err


def test_onnx_model(capsys, tmp_path):
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test"
    )
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    code, out, _ = run_cli(capsys, str(path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "onnx" and doc["opsets"] == {"ai.onnx": 17}
    assert doc["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 4]}]
    assert doc["outputs"] == [{"name": "y", "dtype": "float32", "shape": ["batch", 3]}]
    assert doc["ops"] == {"MatMul": 1, "Relu": 1} and doc["nodes"] == 2
    assert (doc["initializers"], doc["parameters"]) == (1, 12)
    # Also detected without the .onnx extension, by its protobuf header.
    renamed = tmp_path / "model.data"
    renamed.write_bytes(path.read_bytes())
    code, out, _ = run_cli(capsys, str(renamed))
    assert code == 0 and "ONNX model, IR version" in out and "MatMul ×1" in out


def test_weight_bin(capsys, tmp_path):
    # Built by hand from FACTS section 2: 64-byte header, 64-byte record, data at 128.
    values = np.array([1.0, -2.0, 0.5, 3.0], dtype="<f2")
    header = struct.pack("<II", 1, 2).ljust(64, b"\0")
    record = struct.pack("<IIQQQ", 0xDEADBEEF, 1, values.nbytes, 128, 0).ljust(64, b"\0")
    path = tmp_path / "weights.bin"
    path.write_bytes(header + record + values.tobytes())
    code, out, _ = run_cli(capsys, str(path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "weight.bin" and doc["count"] == 1
    assert doc["blobs"] == [
        {"offset": 64, "dtype": "fp16", "data_offset": 128, "size": 8, "count": 4}
    ]
    code, out, _ = run_cli(capsys, str(path))
    assert code == 0 and "record 64: fp16 × 4" in out


def test_mil_text(capsys, tmp_path):
    path = tmp_path / "model.mil"
    path.write_text(MIL_TEXT)
    code, out, _ = run_cli(capsys, str(path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "mil" and doc["version"] == "1.3"
    assert doc["build_info"]["coremlc-version"] == "3520.5.1"
    (function,) = doc["functions"]
    assert (function["name"], function["opset"], function["outputs"]) == ("main", "ios18", ["y"])
    assert function["inputs"] == [{"name": "x", "type": "tensor<fp16, [1, 64, 1, 16]>"}]
    assert function["ops"] == {"const": 6, "conv": 1, "relu": 1} and function["operations"] == 8
    assert [(b["path"], b["offset"]) for b in function["blobs"]] == [
        ("@model_path/weights/weight.bin", 64)
    ]
    renamed = tmp_path / "program.txt"
    renamed.write_text("\n  " + MIL_TEXT)
    code, out, _ = run_cli(capsys, str(renamed))
    assert code == 0 and "func main<ios18>: 8 operations" in out


def test_every_kind_has_a_reader() -> None:
    assert all(k.describe is not None for k in (*inspect_cli.KINDS, inspect_cli.BUNDLE))


@pytest.fixture(scope="module")
def digits_bundle(tmp_path_factory) -> tuple[Path, object]:
    import anekit

    cm = anekit.compile(EXAMPLES / "digits_cnn.onnx", target="m1")
    path = tmp_path_factory.mktemp("bundle") / "digits.anekit"
    cm.save(path)
    return path, cm


def test_bundle_json_agrees_with_the_compile(capsys, digits_bundle):
    path, cm = digits_bundle
    assert inspect_cli.detect(path) == inspect_cli.BUNDLE
    code, out, _ = run_cli(capsys, str(path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["kind"] == "anekit bundle"
    assert doc["target"]["name"] == "m1" and doc["target"]["opset"] == cm.target.mil.opset
    assert [p["name"] for p in doc["inputs"]] == ["image"] and doc["outputs"][0]["shape"] == [1, 10]
    assert [s["device"] for s in doc["segments"]] == [s.device for s in cm.segments]
    assert doc["report"]["summary"] == cm.report["summary"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(doc["files"]) == set(manifest["files"])
    (seg,) = doc["segments"]
    assert seg["ops"]["conv"] >= 2 and seg["weight_bytes"] == (path / seg["weights"]).stat().st_size
    code, out, _ = run_cli(capsys, str(path))
    assert code == 0 and "segment 0 on ane" in out and "sha256 verified" in out


def test_tampered_or_empty_bundles_exit_2(capsys, digits_bundle, tmp_path):
    import shutil

    path, _ = digits_bundle
    copy = tmp_path / "copy.anekit"
    shutil.copytree(path, copy)
    weights = copy / "segments" / "0" / "weights" / "weight.bin"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    code, out, err = run_cli(capsys, str(copy))
    assert code == 2 and out == "" and "sha256" in err and "Traceback" not in err
    empty = tmp_path / "empty.anekit"
    empty.mkdir()
    (empty / "manifest.json").write_text("{}")
    code, out, err = run_cli(capsys, str(empty), "--json")
    assert code == 2 and out == "" and "Traceback" not in err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent.hwx", "no such file or directory"),
        (lambda d: _write(d / "empty.hwx", b""), "the file is empty"),
        (
            lambda d: _write(d / "noise.dat", np.random.default_rng(0).bytes(5000)),
            "cannot tell what kind of file",
        ),
        (lambda d: _junk_dir(d), "not an anekit bundle"),
    ],
    ids=["missing", "empty", "random-binary", "junk-directory"],
)
def test_bad_paths_exit_2_with_one_clear_message(capsys, tmp_path, make, message):
    target = make(tmp_path)
    code, out, err = run_cli(capsys, str(target), "--json")
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err and err.startswith("anekit inspect: error:")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _junk_dir(base: Path) -> Path:
    junk = base / "junk"
    junk.mkdir()
    (junk / "a.txt").write_text("not a model")
    (junk / "b.bin").write_bytes(b"\x01\x02\x03")
    return junk


def test_installed_entry_point_prints_json_and_no_traceback(tmp_path):
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "anekit",
            "inspect",
            str(FIXTURES / "hwx" / "h13_mul_zin7.hwx"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["build"]["version"] == "7.6.4"
    bad = subprocess.run(
        [sys.executable, "-m", "anekit", "inspect", str(tmp_path / "missing.hwx")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
