"""Core ML export: every .mlpackage loads with coremltools and converts back to a MIL program
through its milproto loader, which type-checks every op against Apple's definitions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen.bundle import build_bundle, write_bundle
from anekit.codegen.mil import SegmentSpec
from anekit.errors import AnekitError
from anekit.runtime import load


@pytest.fixture(scope="module")
def ct():  # noqa: ANN201
    import coremltools

    return coremltools


def reload(ct, path: Path):  # noqa: ANN001, ANN201
    """The saved package through coremltools: the model spec and the MIL program it holds."""
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    return spec, milproto_load.load(spec, spec.specificationVersion, model.weights_dir)


def _two_device_bundle(tmp_path: Path, target: str) -> Path:
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 16, 1, 1))
    ids = anekit.input("ids", (3,), "int64")
    h = ops.relu(ops.conv2d(x, rng.standard_normal((32, 16, 1, 1)).astype(np.float32)), name="h")
    picked = ops.gather(ops.reshape(h, (32,)), ids, name="picked")
    z = ops.conv2d(h, rng.standard_normal((8, 32, 1, 1)).astype(np.float32), name="z")
    g = anekit.graph([z, picked])
    engine = tuple(n.name for n in g.nodes if n.op in ("conv", "relu"))
    cpu = tuple(n.name for n in g.nodes if n.name not in engine)
    segments = [
        SegmentSpec(0, "ane", engine, ("x",), ("h", "z")),
        SegmentSpec(1, "cpu", cpu, ("h", "ids"), ("picked",)),
    ]
    return write_bundle(build_bundle(g, targets.get(target), segments), tmp_path / "two.anekit")


@pytest.mark.parametrize(("target", "spec_version"), [("m1", 7), ("m4", 9)])
def test_a_multi_segment_bundle_exports_as_one_mlprogram(
    ct, tmp_path: Path, target: str, spec_version: int
) -> None:  # noqa: ANN001
    program = load(_two_device_bundle(tmp_path, target))
    path = program.save_mlpackage(tmp_path / "two.mlpackage")
    spec, mil_program = reload(ct, path)
    assert spec.specificationVersion == spec_version  # iOS 16 for M1, iOS 18 for M4
    inputs = {
        i.name: (list(i.type.multiArrayType.shape), i.type.multiArrayType.dataType)
        for i in spec.description.input
    }
    float32, int32 = (
        ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32,
        ct.proto.FeatureTypes_pb2.ArrayFeatureType.INT32,
    )
    assert inputs == {"x": ([1, 16, 1, 1], float32), "ids": ([3], int32)}
    assert [o.name for o in spec.description.output] == ["z", "picked"]
    function = mil_program.functions["main"]
    kinds = [op.op_type for op in function.operations]
    # both segments are in the one function, joined by casts between fp16 and fp32
    assert kinds.count("conv") == 2 and "gather" in kinds and "cast" in kinds
    # the engine padding of the single-token boundary is dropped inside the function
    assert not any(op.op_type == "pad" for op in function.operations)


def test_compiled_models_export(ct, tmp_path: Path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(2)
    x = anekit.input("x", (1, 4, 8, 8))
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.2
    y = ops.softmax(
        ops.reshape(ops.gelu(ops.conv2d(x, w, padding=1)), (1, 8, 64)), axis=-1, name="y"
    )
    cm = anekit.compile(anekit.graph([y]), "m4")
    path = cm.save_mlpackage(tmp_path / "m.mlpackage")
    spec, mil_program = reload(ct, path)
    assert [o.name for o in spec.description.output] == ["y"]
    assert "softmax" in [op.op_type for op in mil_program.functions["main"].operations]
    # saving again replaces the package
    assert cm.save_mlpackage(path) == path and reload(ct, path)[0].specificationVersion == 9


def test_export_refuses_bad_paths(tmp_path: Path) -> None:
    program = load(_two_device_bundle(tmp_path, "m4"))
    with pytest.raises(AnekitError, match="must end in .mlpackage"):
        program.save_mlpackage(tmp_path / "model.zip")
    other = tmp_path / "keep.mlpackage"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(AnekitError, match="not an .mlpackage"):
        program.save_mlpackage(other)
    assert (other / "notes.txt").read_text() == "mine"
