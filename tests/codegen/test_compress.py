"""Weight compression: every scheme in both dialects (iOS 16 on M1, iOS 18 on M4) emitted as
its constexpr op, its weight.bin blobs read back by coremltools' own blob reader and
decompressed by coremltools' own op definitions, the result close to the original weight
and equal to what the simulator computes with it; the cost model counts the stored bytes."""

from __future__ import annotations

import inspect
from pathlib import Path

import coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops as c16
import coremltools.converters.mil.mil.ops.defs.iOS18.compression as c18
import coremltools.libmilstoragepython as cml
import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.codegen.compress import SCHEMES, compress
from anekit.errors import TargetError
from anekit.formats import mil

OUT, IN, SEQ = 64, 128, 8
WEIGHT = np.random.default_rng(3).normal(0, 0.05, (OUT, IN, 1, 1)).astype(np.float32)
X = np.random.default_rng(4).normal(0, 1, (1, IN, 1, SEQ)).astype(np.float32)
# the relative error each scheme may leave on a Gaussian weight (k-means and symmetric
# quantization of N(0, 1): 8 bits ~0.6%, 4 bits ~10%, 6-bit palette ~4%, 50% pruning ~27%)
BOUND = {"int8": 0.01, "int4": 0.12, "palettize4": 0.12, "palettize6": 0.05, "sparse": 0.3}
CASES = [(s, t) for t in ("m1", "m4") for s in SCHEMES if not (s == "int4" and t == "m1")]


def conv_graph() -> anekit.Graph:
    x = anekit.input("x", X.shape)
    return anekit.graph([ops.conv2d(x, anekit.constant(WEIGHT, name="w"), name="y")])


def read_blob(reader, blob: mil.BlobFile) -> np.ndarray:
    dtype = blob.type.dtype
    data = np.asarray(
        getattr(reader, f"read_{'fp16' if dtype == 'fp16' else dtype}_data")(blob.offset)
    )
    if dtype == "fp16":
        data = data.view(np.float16)
    return data.reshape(blob.type.shape) if data.size == np.prod(blob.type.shape) else data


def coremltools_decode(program: mil.MilProgram, weights: Path) -> tuple[str, np.ndarray]:
    """The constexpr op's operands, read from the weight.bin by coremltools, decompressed by
    coremltools' definition of the op."""
    reader = cml._BlobStorageReader(str(weights))
    function = program.function("main")
    consts = {o.outputs[0].name: o.attribute("val") for o in function.operations if o.op == "const"}
    (op,) = [o for o in function.operations if o.op.startswith("constexpr_")]
    args = {}
    for key, var in op.inputs:
        value = consts[var.name]
        if isinstance(value, mil.BlobFile):
            args[key] = read_blob(reader, value)
        else:
            args[key] = value.data if isinstance(value, mil.Tensor) else value.to_numpy()
    version = c18 if program.function("main").opset == "ios18" else c16
    decompress = getattr(version, op.op).decompress
    for name in inspect.signature(decompress).parameters:  # optional operands left out
        args.setdefault(name, None)
    return op.op, decompress(**args)


@pytest.mark.parametrize(("scheme", "target"), CASES)
def test_coremltools_reads_and_decodes_every_compressed_weight(
    scheme: str, target: str, tmp_path
) -> None:
    cm = anekit.compile(conv_graph(), target, compress=scheme)
    bundle = cm.save(tmp_path / "m.anekit")
    (segment,) = cm.bundle.manifest.segments
    program = mil.parse_file(bundle / segment.program)
    op, decoded = coremltools_decode(program, bundle / segment.weights)
    expected_op = {"int8": "constexpr_affine_dequantize" if target == "m1" else "constexpr_blockwise_shift_scale",
                   "int4": "constexpr_blockwise_shift_scale", "palettize4": "constexpr_lut_to_dense",
                   "palettize6": "constexpr_lut_to_dense", "sparse": "constexpr_sparse_to_dense"}[scheme]  # fmt: skip
    assert op == expected_op
    decoded = np.asarray(decoded, np.float32).reshape(WEIGHT.shape)
    rel = np.linalg.norm(decoded - WEIGHT) / np.linalg.norm(WEIGHT)
    assert rel < BOUND[scheme]
    if scheme == "sparse":
        assert np.mean(decoded == 0) == pytest.approx(0.5, abs=1e-3)
    # the simulator runs the bundle with exactly the weight coremltools decodes
    y = anekit.load(bundle).run({"x": X})["y"]
    expected = np.einsum("oi,bis->bos", decoded[:, :, 0, 0], X[:, :, 0, :])[:, :, None, :]
    np.testing.assert_allclose(y, expected, atol=2e-2, rtol=1e-2)
    report = cm.compression_report
    assert report["weights"] == 1 and report["stored_bytes"] < report["fp16_bytes"]
    assert report["worst_relative_error"] == pytest.approx(rel, rel=1e-3)


def test_the_cost_model_counts_the_stored_bytes() -> None:
    big = np.random.default_rng(5).normal(0, 0.05, (2048, 2048, 1, 1)).astype(np.float32)
    x = anekit.input("x", (1, 2048, 1, 1))
    g = anekit.graph([ops.conv2d(x, anekit.constant(big, name="w"), name="y")])
    dense = anekit.compile(g, "m4")
    times = {}
    for scheme in ("int8", "int4"):
        cm = anekit.compile(g, "m4", compress=scheme)
        assert cm.weight_bytes["w"] == compress(big, scheme, "ios18").nbytes
        times[scheme] = anekit.cost.estimate_compiled(cm)
    base = anekit.cost.estimate_compiled(dense)
    streamed = {k: sum(s.dram_bytes for s in e.segments) for k, e in times.items()}
    full = sum(s.dram_bytes for s in base.segments)
    assert full - streamed["int8"] == pytest.approx(big.size * 2 - cm_bytes(g, "int8"), rel=1e-6)
    assert streamed["int4"] < streamed["int8"] < full
    assert times["int4"].total_ms < base.total_ms  # a weight-streaming-bound layer speeds up


def cm_bytes(g: anekit.Graph, scheme: str) -> int:
    return anekit.compile(g, "m4", compress=scheme).weight_bytes["w"]


def test_refusals() -> None:
    with pytest.raises(TargetError, match="int4 weights need the iOS 18 MIL dialect"):
        anekit.compile(conv_graph(), "m1", compress="int4")
    with pytest.raises(TargetError, match="unknown compression 'int3'"):
        anekit.compile(conv_graph(), "m4", compress="int3")


# one iOS 16 case and every iOS 18 sub-byte type (int4, uint6, uint1)
@pytest.mark.parametrize(("scheme", "target"),
                         [("palettize4", "m1"), ("int4", "m4"), ("palettize6", "m4"), ("sparse", "m4")])  # fmt: skip
def test_compressed_bundles_export_to_core_ml(scheme: str, target: str, tmp_path) -> None:
    """The .mlpackage reloads through coremltools' milproto loader, which type-checks each
    constexpr op (sub-byte consts included) against Apple's definitions."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto import load as milproto_load

    cm = anekit.compile(conv_graph(), target, compress=scheme)
    path = cm.save_mlpackage(tmp_path / "m.mlpackage")
    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    program = milproto_load.load(spec, spec.specificationVersion, model.weights_dir)
    found = [
        op for op in program.functions["main"].operations if op.op_type.startswith("constexpr_")
    ]
    assert len(found) == 1
    decoded = np.asarray(found[0].materialized_val_inference(), np.float32).reshape(WEIGHT.shape)
    np.testing.assert_array_equal(
        decoded, cm.compressed["w"].dense.astype(np.float16).astype(np.float32)
    )


def test_compile_cli_compresses_and_reports(capsys, tmp_path) -> None:
    import json

    from anekit.cli import main

    digits = Path(__file__).parents[2] / "examples" / "digits_cnn.onnx"
    code = main(["compile", str(digits), "-t", "m1", "-o", str(tmp_path / "d.anekit"),
                 "--compress", "int8", "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)["compression"]
    assert code == 0 and report["scheme"] == "int8" and report["weights"] == 2
    assert report["stored_bytes"] < report["fp16_bytes"] / 1.9
    y = anekit.load(tmp_path / "d.anekit").run({"image": np.zeros((1, 1, 8, 8), np.float32)})
    assert all(np.isfinite(v).all() for v in y.values())
