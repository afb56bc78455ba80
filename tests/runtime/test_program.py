"""runtime.Program: bundles and MIL files loaded and run segment by segment on sim and sim-fp32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen.bundle import build_bundle, write_bundle
from anekit.codegen.mil import SegmentSpec
from anekit.errors import AnekitError, InputError
from anekit.ir.graph import Graph
from anekit.runtime import Program, load
from anekit.runtime.program import from_contents
from tests.numerics import agreement

M4 = targets.get("m4")


def _two_device_graph() -> tuple[Graph, list[SegmentSpec], dict[str, np.ndarray]]:
    """conv (engine) -> gather by index (CPU) -> conv (engine), with a single-token boundary."""
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 16, 1, 1))
    ids = anekit.input("ids", (3,), "int64")
    w1 = rng.standard_normal((32, 16, 1, 1)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 32, 1, 1)).astype(np.float32) * 0.3
    h = ops.relu(ops.conv2d(x, w1), name="h")
    picked = ops.gather(ops.reshape(h, (32,)), ids, name="picked")
    z = ops.conv2d(h, w2, name="z")
    g = anekit.graph([z, picked])
    names = [n.name for n in g.nodes]
    engine = [n.name for n in g.nodes if n.op in ("conv", "relu")]
    cpu = [n for n in names if n not in engine]
    segments = [
        SegmentSpec(0, "ane", tuple(engine), ("x",), ("h", "z")),
        SegmentSpec(1, "cpu", tuple(cpu), ("h", "ids"), ("picked",)),
    ]
    feeds = {
        "x": rng.standard_normal((1, 16, 1, 1)).astype(np.float32),
        "ids": np.array([0, 31, -1], np.int64),
    }
    return g, segments, feeds


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, Graph, dict[str, np.ndarray]]:
    g, segments, feeds = _two_device_graph()
    contents = build_bundle(g, M4, segments)
    return write_bundle(contents, tmp_path / "two.anekit"), g, feeds


def test_segments_run_in_order_with_padding_stripped(bundle) -> None:  # noqa: ANN001
    path, g, feeds = bundle
    program = load(path)
    assert isinstance(program, Program) and [s.device for s in program.segments] == ["ane", "cpu"]
    # the single-token engine I/O is padded to 16 in the program, not for the caller
    first = program.segments[0]
    assert {io.value: io.mil_shape for io in first.inputs} == {"x": (1, 16, 1, 16)}
    expected = g.run(feeds)
    for backend in ("sim", "sim-fp32"):
        got = program.run(feeds, backend)
        assert list(got) == list(expected)
        for name, want in expected.items():
            assert got[name].shape == want.shape and got[name].dtype == np.float32
            assert agreement(got[name], want).cosine > 0.9999, (backend, name)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(program(**feeds).values(), program.run(feeds).values(), strict=True)
    )


def test_sim_fp32_is_the_bundle_without_fp16_storage(bundle) -> None:  # noqa: ANN001
    """sim-fp32 = the same programs in fp32: equal to the graph with fp16-rounded weights."""
    path, g, feeds = bundle
    rounded = g.replace(
        constants={
            k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v
            for k, v in g.constants.items()
        }
    )
    expected = rounded.run(feeds)
    got = load(path).run(feeds, "sim-fp32")
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
    sim = load(path).run(feeds, "sim")
    assert not all(np.array_equal(sim[k], got[k]) for k in got)  # fp16 storage does change values


def test_in_memory_and_loaded_programs_agree(bundle, tmp_path: Path) -> None:  # noqa: ANN001
    path, g, feeds = bundle
    _, segments, _ = _two_device_graph()
    memory = from_contents(build_bundle(g, M4, segments))
    loaded = load(path).run(feeds)
    for name, value in memory.run(feeds).items():
        np.testing.assert_array_equal(value, loaded[name])


def test_feed_errors(bundle) -> None:  # noqa: ANN001
    path, _, feeds = bundle
    program = load(path)
    with pytest.raises(InputError, match=r"missing input\(s\) \['ids'\]"):
        program.run({"x": feeds["x"]})
    with pytest.raises(InputError, match="has shape"):
        program.run({**feeds, "x": np.zeros((1, 16, 1, 2), np.float32)})
    with pytest.raises(InputError, match=r"unknown input\(s\) \['extra'\]"):
        program.run({**feeds, "extra": feeds["x"]})
    with pytest.raises(AnekitError, match="unknown backend 'tpu'"):
        program.run(feeds, "tpu")
    with pytest.raises(AnekitError, match="does not exist"):
        load(path.parent / "missing.anekit")


def test_a_single_mil_file(bundle, tmp_path: Path) -> None:  # noqa: ANN001
    path, g, feeds = bundle
    program = load(path / "segments" / "1" / "model.mil")  # the CPU segment, on its own
    (segment,) = program.segments
    assert segment.device == "cpu" and {p.name for p in program.inputs} == {"h", "ids"}
    h = np.arange(32, dtype=np.float32).reshape(1, 32, 1, 1)
    got = program.run({"h": h, "ids": np.array([1, 2, 3], np.int32)})
    np.testing.assert_array_equal(got["picked"], np.array([1, 2, 3], np.float32))
    engine = load(path / "segments" / "0" / "model.mil")
    assert engine.segments[0].device == "ane"
    out = engine.run({"x": np.zeros((1, 16, 1, 16), np.float32)})
    assert out["z"].dtype == np.float32 and out["z"].shape == (1, 8, 1, 16)


def test_compiled_model_sim_backend_runs_the_bundle() -> None:
    rng = np.random.default_rng(5)
    x = anekit.input("x", (1, 8, 4, 4))
    w = rng.standard_normal((6, 8, 3, 3)).astype(np.float32) * 0.2
    g = anekit.graph(
        [ops.relu(ops.conv2d(x, w, rng.standard_normal(6).astype(np.float32), padding=1), name="y")]
    )
    cm = anekit.compile(g, "m1")
    feeds = {"x": rng.standard_normal((1, 8, 4, 4)).astype(np.float32)}
    sim = cm.run(feeds, backend="sim")
    assert agreement(sim["y"], cm.run(feeds)["y"]).cosine > 0.9999
    np.testing.assert_array_equal(sim["y"], cm.program.run(feeds)["y"])
