"""Core ML export options, each read back from the saved package by coremltools (the spec's
types, image parameters, metadata and labels) and through its milproto loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.cli import main
from anekit.codegen.coreml_options import CoreMLOptions, ImageInput
from anekit.errors import AnekitError

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits_cnn.onnx"
ct = pytest.importorskip("coremltools")


def reload(path: Path):  # noqa: ANN201
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    return spec, milproto_load.load(spec, spec.specificationVersion, model.weights_dir)


@pytest.fixture(scope="module")
def digits():  # noqa: ANN201
    return anekit.compile(str(DIGITS), "m4")


def _ops(program, op_type: str) -> list:
    return [op for op in program.functions["main"].operations if op.op_type == op_type]


def test_fp16_inputs_and_outputs(digits, tmp_path) -> None:
    spec, program = reload(digits.save_mlpackage(tmp_path / "d.mlpackage", io_dtype="fp16"))
    fp16 = ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT16
    assert [i.type.multiArrayType.dataType for i in spec.description.input] == [fp16]
    assert [o.type.multiArrayType.dataType for o in spec.description.output] == [fp16]
    from coremltools.converters.mil.mil import types

    assert types.builtin_to_string(program.functions["main"].inputs["image"].dtype) == "fp16"
    spec32, _ = reload(digits.save_mlpackage(tmp_path / "d32.mlpackage"))
    fp32 = ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    assert spec32.description.input[0].type.multiArrayType.dataType == fp32


def test_grayscale_image_with_scale_and_bias(digits, tmp_path) -> None:
    image = ImageInput("G", scale=1 / 16, bias=(-0.5,))
    spec, program = reload(digits.save_mlpackage(tmp_path / "g.mlpackage", images={"image": image}))
    kind = spec.description.input[0].type.imageType
    assert (kind.width, kind.height) == (8, 8)
    assert kind.colorSpace == ct.proto.FeatureTypes_pb2.ImageFeatureType.GRAYSCALE
    (scaled,), (biased,) = _ops(program, "mul")[:1], _ops(program, "add")[:1]
    assert scaled.x.name == "image" and float(scaled.y.val) == 1 / 16
    assert biased.x is scaled.outputs[0] and float(biased.y.val) == -0.5


def test_colour_image_bias_per_channel(tmp_path) -> None:
    x = anekit.input("pixels", (1, 3, 4, 4))
    w = np.ones((2, 3, 1, 1), np.float32)
    cm = anekit.compile(anekit.graph([ops.conv2d(x, w, name="y")]), "m4")
    image = ImageInput("BGR", scale=2.0, bias=(0.1, 0.2, 0.3))
    spec, program = reload(cm.save_mlpackage(tmp_path / "c.mlpackage", images={"pixels": image}))
    assert spec.description.input[0].type.imageType.colorSpace == (
        ct.proto.FeatureTypes_pb2.ImageFeatureType.BGR
    )
    add = next(op for op in _ops(program, "add") if op.name == "pixels__biased__")
    np.testing.assert_allclose(add.y.val.reshape(-1), [0.1, 0.2, 0.3], rtol=1e-6)
    with pytest.raises(AnekitError, match="cannot be a G image"):
        cm.save_mlpackage(tmp_path / "bad.mlpackage", images={"pixels": ImageInput("G")})


def test_classifier_with_labels(digits, tmp_path) -> None:
    labels = [f"digit {i}" for i in range(10)]
    spec, program = reload(digits.save_mlpackage(tmp_path / "k.mlpackage", class_labels=labels))
    assert spec.description.predictedFeatureName == "classLabel"
    assert spec.description.predictedProbabilitiesName == "classLabel_probs"
    outputs = {o.name: o.type.WhichOneof("Type") for o in spec.description.output}
    assert outputs == {"classLabel": "stringType", "classLabel_probs": "dictionaryType"}
    (classify,) = _ops(program, "classify")
    assert list(classify.classes.val) == labels
    with pytest.raises(AnekitError, match="one label per class"):
        digits.save_mlpackage(tmp_path / "k3.mlpackage", class_labels=["a", "b", "c"])


def test_metadata_compute_units_and_deployment_target(tmp_path) -> None:
    cm = anekit.compile(str(DIGITS), "m1")  # an iOS 16 program
    options = CoreMLOptions(author="anekit tests", license="MIT", description="digits CNN",
                            version="2.1", compute_units="cpu_and_ne", deployment_target="iOS18")  # fmt: skip
    spec, _ = reload(cm.save_mlpackage(tmp_path / "m.mlpackage", options))
    meta = spec.description.metadata
    assert (meta.author, meta.license, meta.shortDescription, meta.versionString) == (
        "anekit tests", "MIT", "digits CNN", "2.1")  # fmt: skip
    assert meta.userDefined["com.anekit.compute_units"] == "cpu_and_ne"
    assert spec.specificationVersion == 9  # iOS 18, later than the program's own iOS 16
    spec16, _ = reload(cm.save_mlpackage(tmp_path / "m16.mlpackage"))
    assert spec16.specificationVersion == 7
    m4 = anekit.compile(str(DIGITS), "m4")  # program 1.3: iOS 18 at least
    with pytest.raises(AnekitError, match="older than the ios18 opset"):
        m4.save_mlpackage(tmp_path / "old.mlpackage", deployment_target="iOS16")
    with pytest.raises(AnekitError, match="compute units"):
        CoreMLOptions(compute_units="gpu_only")


def test_command_line_options(tmp_path, capsys) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{i}\n" for i in range(10)))
    package = tmp_path / "d.mlpackage"
    code = main(["compile", str(DIGITS), "-t", "m4", "-o", str(tmp_path / "d.anekit"),
                 "--mlpackage", str(package), "--image", "image=G", "--image-scale", "0.0625",
                 "--class-labels", str(labels), "--author", "me", "--model-version", "3",
                 "--compute-units", "cpu_and_ne"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Failed to load" not in captured.err and "passes/s" not in captured.err
    spec, program = reload(package)
    assert spec.description.input[0].type.WhichOneof("Type") == "imageType"
    assert list(_ops(program, "classify")[0].classes.val) == [str(i) for i in range(10)]
    assert spec.description.metadata.author == "me"
    assert spec.description.metadata.versionString == "3"
    code = main(["compile", str(DIGITS), "-o", str(tmp_path / "e.anekit"), "--author", "me"])
    assert code == 2 and "add --mlpackage" in capsys.readouterr().err
    assert not (tmp_path / "e.anekit").exists()


def test_export_prints_nothing_but_its_result(tmp_path) -> None:
    """No coremltools import warnings (its native proxies, untested torch/scikit-learn
    versions) and no progress bars, in a fresh process where coremltools is first imported."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "anekit", "compile", str(DIGITS), "-o", str(tmp_path / "d.anekit"),
         "--mlpackage", str(tmp_path / "d.mlpackage")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines()[1] == f"wrote {tmp_path / 'd.mlpackage'}"
