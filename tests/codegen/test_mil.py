"""The MIL emitter's rules: dialect, engine restrictions, I/O padding and order, weights, determinism."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen.mil import (
    MIN_SEQUENCE,
    SegmentSpec,
    emit,
    emit_segment,
    whole_graph_segment,
)
from anekit.errors import ModelError
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.frontend.builder.tensor import record
from anekit.ir.graph import Graph

M1, M4 = targets.get("m1"), targets.get("m4")


def _ops(program: mil.MilProgram) -> list[mil.Operation]:
    return list(program.function("main").operations)


def _const(program: mil.MilProgram, name: str) -> mil.Operation:
    return program.function("main").producers[name]


def _conv_gelu_graph(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    x = anekit.input("x", (1, 8, 1, 4))
    w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
    b = rng.standard_normal((16,)).astype(np.float32)
    y = ops.gelu(ops.conv2d(x, w, b), approximate="tanh", name="y")  # as the passes leave it
    h = ops.reshape(y, (1, 16, 4))
    z = ops.softmax(ops.matmul(h, ops.transpose(h, (0, 2, 1))), axis=-1, name="z")
    return anekit.graph([y, z])


@pytest.mark.parametrize(
    ("target", "version", "opset", "scalar"),
    [(M1, "1.0", "ios16", 'tensor<string, []>("'), (M4, "1.3", "ios18", 'string("')],
)
def test_dialect_follows_the_chip_database(target, version, opset, scalar) -> None:  # noqa: ANN001
    (seg,) = emit(_conv_gelu_graph(), target)
    assert seg.program.version == version == target.mil.program_version
    assert seg.program.function("main").opset == opset == target.mil.opset
    assert seg.text.startswith(f"program({version})\n")
    assert f"func main<{opset}>(" in seg.text
    assert f"name = {scalar}" in seg.text
    assert all(b.type.dtype == "fp16" for b in seg.program.function("main").inputs)


def test_engine_restrictions() -> None:
    (seg,) = emit(_conv_gelu_graph(), M4)
    found = _ops(seg.program)
    kinds = [o.op for o in found]
    # conv takes no bias=: the bias is a separate add right after it
    convs = [o for o in found if o.op == "conv"]
    assert convs and all(o.input("bias") is None for o in convs)
    conv_out = convs[0].outputs[0].name
    assert any(o.op == "add" and o.input("x") == mil.Var(conv_out) for o in found)
    # gelu is rejected by the engine compiler: the tanh form, no gelu op
    assert "gelu" not in kinds and "tanh" in kinds
    # matmul transposes are named bool consts
    for o in (o for o in found if o.op == "matmul"):
        for key in ("transpose_x", "transpose_y"):
            arg = o.input(key)
            assert isinstance(arg, mil.Var)
            val = _const(seg.program, arg.name).attribute("val")
            assert val.type == mil.ScalarType("bool")
    # every op argument is a variable (Apple style) and inputs are sorted by key
    for o in found:
        assert all(isinstance(a, mil.Var) for _, a in o.inputs)
        assert [k for k, _ in o.inputs] == sorted(k for k, _ in o.inputs)


def test_cpu_programs_use_the_full_op_set_in_fp32() -> None:
    g = _conv_gelu_graph()
    seg = emit_segment(g, whole_graph_segment(g, "cpu"), M4)
    kinds = [o.op for o in _ops(seg.program)]
    assert "gelu" in kinds and "tanh" not in kinds
    assert seg.input_alloc_bytes is None and not any(s.padded for s in (*seg.inputs, *seg.outputs))
    types = [b.type for o in _ops(seg.program) for b in o.outputs if o.op != "const"]
    assert all(t.dtype in ("fp32", "bool", "int32") for t in types)
    # weights are stored in fp16 and read through a cast, or kept in fp32 on request
    weights = [o for o in _ops(seg.program) if isinstance(o.attribute("val"), mil.BlobFile)]
    assert weights and all(o.attribute("val").type.dtype == "fp16" for o in weights)
    assert all(
        any(
            c.op == "cast" and c.input("x") == mil.Var(w.outputs[0].name) for c in _ops(seg.program)
        )
        for w in weights
    )
    exact = emit_segment(g, whole_graph_segment(g, "cpu"), M4, weights="fp32")
    blobs = [
        o.attribute("val")
        for o in _ops(exact.program)
        if isinstance(o.attribute("val"), mil.BlobFile)
    ]
    assert blobs and all(b.type.dtype == "fp32" for b in blobs)


def test_attention_mask_is_explicit_and_finite() -> None:
    """The decompose pass writes a causal mask out (the fused op would ignore the flag);
    the emitted program holds it as an additive constant."""
    q, k, v = (anekit.input(n, (1, 2, 16, 8)) for n in "qkv")
    g = anekit.graph([record("attention", [q, k, v], {"causal": True}, name="y")])
    (seg,) = emit(anekit.compile(g, M4).graph, M4)
    kinds = [o.op for o in _ops(seg.program)]
    assert "scaled_dot_product_attention" not in kinds and "softmax" in kinds
    masks = [
        o.attribute("val")
        for o in _ops(seg.program)
        if o.op == "const" and "causal_mask" in o.outputs[0].name
    ]
    assert len(masks) == 1
    # the blob holds the additive mask: -1e4 above the diagonal, never -inf
    weights = BlobReader(seg.weights)
    mask = weights.read(masks[0].offset, (16, 16), "fp16").astype(np.float32)
    expected = np.where(np.tril(np.ones((16, 16), bool)), 0.0, np.float16(-1e4))
    np.testing.assert_array_equal(mask, expected)
    assert np.isfinite(mask).all()


@pytest.mark.parametrize("mask", ["causal", "bool"])
def test_attention_the_pipeline_must_decompose_is_refused(mask: str) -> None:
    q, k, v = (anekit.input(n, (1, 2, 16, 8)) for n in "qkv")
    if mask == "causal":
        node = record("attention", [q, k, v], {"causal": True}, name="y")
    else:
        m = anekit.input("m", (16, 16), "bool")
        node = record("attention", [q, k, v, m], {}, name="y")
    with pytest.raises(ModelError, match="only decomposed"):
        emit(anekit.graph([node]), M4)


def test_a_chip_without_concat_runs_concat_on_the_cpu() -> None:
    """The concat gate is a pass decision (validate sends the node to the CPU); code generation
    emits concat as concat wherever it runs."""
    x = anekit.input("x", (1, 4, 2, 3))
    g = anekit.graph([ops.concat([x, ops.relu(x)], axis=1, name="y")])
    no_concat = dataclasses.replace(M4, features=dataclasses.replace(M4.features, concat=False))
    compiled = anekit.compile(g, no_concat)
    (joined,) = [n for n in compiled.graph.nodes if "y" in n.origin]
    assert compiled.placement[joined.name].device == "cpu"
    assert "concat" in compiled.placement[joined.name].reason.lower()
    (cpu,) = [s for s in compiled.bundle.segments if s.device == "cpu"]
    assert [o.op for o in _ops(cpu.program) if o.op != "const"] == ["concat"]


def test_single_token_is_padded_to_sixteen_and_surfaces_are_uniform() -> None:
    rng = np.random.default_rng(1)
    x = anekit.input("x", (1, 768, 1, 1))
    small = anekit.input("a_small", (1, 64, 1, 1))
    w = rng.standard_normal((32, 768, 1, 1)).astype(np.float32)
    y = ops.conv2d(x, w, name="y")
    big = ops.add(ops.reshape(small, (1, 64, 1, 1)), 1.0, name="big_out")
    g = anekit.graph([y, big])
    (seg,) = emit(g, M4)
    by_name = {s.value: s for s in (*seg.inputs, *seg.outputs)}
    assert by_name["x"].mil_shape == (1, 768, 1, MIN_SEQUENCE) and by_name["x"].shape == (
        1,
        768,
        1,
        1,
    )
    assert by_name["y"].mil_shape == (1, 32, 1, MIN_SEQUENCE)
    # names sorted alphabetically, inputs and outputs
    function = seg.program.function("main")
    assert (
        [b.name for b in function.inputs]
        == sorted(b.name for b in function.inputs)
        == ["a_small", "x"]
    )
    assert list(function.outputs) == sorted(function.outputs)
    # one allocation size per group, at least the minimum surface
    assert seg.input_alloc_bytes == max(M4.limits.min_io_bytes, 768 * 16 * 2)
    assert seg.output_alloc_bytes == M4.limits.min_io_bytes
    # the program slices its padded input back and zero-pads its outputs
    first = next(o for o in _ops(seg.program) if o.op == "slice_by_size")
    assert first.input("x") == mil.Var("x")
    producer = function.producers["y"]
    assert producer.op == "pad"


def test_values_crossing_segments_are_explicit_io() -> None:
    g = _conv_gelu_graph()
    names = [n.name for n in g.nodes]
    cut = 3
    produced = {o for n in g.nodes[:cut] for o in n.outputs}
    crossing = tuple(sorted({i for n in g.nodes[cut:] for i in n.inputs if i in produced}))
    late = {o for n in g.nodes[cut:] for o in n.outputs}
    early_outputs = tuple(o for o in g.output_names if o in produced)
    first = SegmentSpec(0, "ane", tuple(names[:cut]), ("x",), crossing + early_outputs)
    second = SegmentSpec(
        1, "cpu", tuple(names[cut:]), crossing, tuple(o for o in g.output_names if o in late)
    )
    a, b = emit(g, M4, [first, second])
    assert {s.value for s in a.outputs} == set(crossing) | set(early_outputs)
    assert {s.value for s in b.inputs} == set(crossing)
    assert all(s.mil_dtype == "fp16" for s in a.outputs)
    assert all(s.mil_dtype == "fp32" for s in b.inputs)


def test_emission_is_deterministic() -> None:
    first = emit(_conv_gelu_graph(), M4)[0]
    second = emit(_conv_gelu_graph(), M4)[0]
    assert first.text == second.text and first.weights == second.weights


def test_weights_read_back_by_coremltools(tmp_path: Path) -> None:
    """Every BLOBFILE record holds the graph's constant cast to fp16 (coremltools' reader)."""
    import coremltools.libmilstoragepython as cml

    g = _conv_gelu_graph(3)
    (seg,) = emit(g, M4)
    path = tmp_path / "weight.bin"
    path.write_bytes(seg.weights)
    reader = cml._BlobStorageReader(str(path))
    blobs = {
        o.outputs[0].name: o.attribute("val")
        for o in _ops(seg.program)
        if isinstance(o.attribute("val"), mil.BlobFile)
    }
    assert len(blobs) == 2  # the conv weight and its bias
    weight = next(a for a in g.constants.values() if a.ndim == 4)
    bias = next(a for a in g.constants.values() if a.ndim == 1)
    expected = {weight.size: weight, bias.size: bias.reshape(1, -1, 1, 1)}
    for blob in blobs.values():
        got = reader.read_fp16_data(blob.offset).view(np.float16)
        want = expected[got.size].astype(np.float16).reshape(-1)
        np.testing.assert_array_equal(got, want)
        assert blob.path == "@model_path/weights/weight.bin"


def test_out_of_range_constants_saturate_in_fp16() -> None:
    x = anekit.input("x", (1, 12))
    big = np.array([1e6, -1e6, np.inf, -np.inf, 1.0] + [0.0] * 7, np.float32)
    g = anekit.graph([ops.add(x, anekit.constant(big), name="y")])
    (seg,) = emit(g, M4)
    blob = next(
        o.attribute("val")
        for o in _ops(seg.program)
        if isinstance(o.attribute("val"), mil.BlobFile)
    )
    stored = BlobReader(seg.weights).read(blob.offset, (12,), "fp16")
    assert stored[:5].tolist() == [65504.0, -65504.0, np.inf, -np.inf, 1.0]


def test_an_op_without_lowering_names_the_node() -> None:
    x = anekit.input("x", (2, 3, 3))
    g = anekit.graph([record("det", [x], name="scores")])
    with pytest.raises(ModelError, match="node 'scores'.*'det', which has no MIL lowering"):
        emit(g, M4)
