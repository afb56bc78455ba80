"""Sessions: resident state across steps, run_steps, read-back, and the engine binding rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen.bundle import build_bundle
from anekit.codegen.mil import SegmentSpec
from anekit.errors import AnekitError, FormatError, InputError
from anekit.formats.bundle import sha256_file
from anekit.runtime import load

M4 = targets.get("m4")


def _rnn(seed: int = 0) -> tuple[anekit.Graph, np.ndarray, np.ndarray, np.ndarray]:
    """h' = tanh(x W + h U + b); y = relu(h') * 2."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((16, 32)).astype(np.float32) * 0.3
    u = rng.standard_normal((32, 32)).astype(np.float32) * 0.2
    b = rng.standard_normal((1, 32)).astype(np.float32) * 0.1
    x, h = anekit.input("x", (1, 16)), anekit.input("h", (1, 32))
    h_next = ops.tanh(ops.add(ops.add(ops.matmul(x, w), ops.matmul(h, u)), b), name="h_next")
    y = ops.mul(ops.relu(h_next), np.float32(2.0), name="y")
    return anekit.graph([h_next, y]), w, u, b


def test_rnn_session_equals_the_reference_loop() -> None:
    g, w, u, b = _rnn()
    program = anekit.compile(g, "m4").program  # in memory, never saved
    k = 12
    xs = np.random.default_rng(1).standard_normal((k, 1, 16)).astype(np.float32)
    sess = program.session("sim", state={"h": "h_next"})
    assert sess.resident == ("h",)
    out = sess.run_steps(k, [{"x": x} for x in xs])
    assert list(out) == ["y"] and out["y"].shape == (k, 1, 32)
    # oracle 1: numpy in float64
    h = np.zeros((1, 32))
    ys = []
    for x in xs:
        h = np.tanh(x @ w + h @ u + b)
        ys.append(np.maximum(h, 0) * 2)
    np.testing.assert_allclose(sess.read("h"), h, atol=6e-3)
    np.testing.assert_allclose(out["y"], np.stack(ys), atol=1.2e-2)
    # oracle 2: the same program run step by step, state through the caller: same bits
    h32 = np.zeros((1, 32), np.float32)
    for i, x in enumerate(xs):
        r = program.run({"x": x, "h": h32}, "sim")
        h32 = r["h_next"]
        np.testing.assert_array_equal(out["y"][i], r["y"])
    np.testing.assert_array_equal(sess.read("h"), h32)
    # one step at a time in the session continues from where run_steps left off
    one = sess.run({"x": xs[0]})
    r = program.run({"x": xs[0], "h": h32}, "sim")
    np.testing.assert_array_equal(one["y"], r["y"])
    np.testing.assert_array_equal(sess.read("h"), r["h_next"])


def _counter(shape: tuple[int, ...] = (1, 1)) -> anekit.Graph:
    c = anekit.input("c", shape)
    return anekit.graph([ops.add(c, np.float32(1.0), name="c_next")])


@pytest.mark.parametrize("k", [1, 7, 64, 100])
def test_counter_accumulates_to_exactly_k_in_one_call(k: int) -> None:
    program = anekit.compile(_counter(), "m4").program
    sess = program.session("sim", state={"c": "c_next"})
    assert sess.resident == ("c",)  # on the engine surface, padded to 16 in the program
    assert program.segments[0].inputs[0].mil_shape == (1, 16)
    assert sess.run_steps(k, {}) == {}
    assert sess.read("c").tolist() == [[float(k)]]


def test_seed_and_read_back_in_fp16() -> None:
    program = anekit.compile(_counter((1, 4)), "m4").program
    sess = program.session("sim", state={"c": "c_next"})
    np.testing.assert_array_equal(sess.read("c"), np.zeros((1, 4), np.float32))
    sess.seed({"c": [[0.1, 2.0, -3.0, 1000.3]]})
    seeded = np.float32([[0.1, 2.0, -3.0, 1000.3]]).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(sess.read("c"), seeded)  # stored as fp16, as on the engine
    sess.run_steps(3)
    expected = seeded
    for _ in range(3):
        expected = (expected + 1).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(sess.read("c"), expected)
    assert sess.read("c").dtype == np.float32


def test_state_crossing_segments_is_handed_on_in_program_form() -> None:
    """c -> (engine) c + 1 -> (cpu) * 1 -> c_next: the state is not resident but still exact."""
    c = anekit.input("c", (1, 8))
    g = anekit.graph(
        [ops.mul(ops.add(c, np.float32(1.0), name="inc"), np.float32(1.0), name="c_next")]
    )
    names = [n.name for n in g.nodes]
    segments = [
        SegmentSpec(0, "ane", (names[0],), ("c",), ("inc",)),
        SegmentSpec(1, "cpu", (names[1],), ("inc",), ("c_next",)),
    ]
    from anekit.runtime.program import from_contents

    program = from_contents(build_bundle(g, M4, segments))
    sess = program.session("sim", state={"c": "c_next"})
    assert sess.resident == ()
    sess.run_steps(50)
    assert sess.read("c").tolist() == [[50.0] * 8]


def test_values_handed_between_engine_segments_as_surface_bytes() -> None:
    """s_next = x + 1 on one engine segment, y = s + x * 1 on a later one (a CPU segment
    between): the later segment reads x + 1 off the first one's output surface within a
    step, but the state s it reads is the previous step's, which that surface no longer
    holds once the first segment has run again; the session must not take it from there."""
    x, s = anekit.input("x", (1, 8)), anekit.input("s", (1, 8))
    inc = ops.add(x, np.float32(1.0), name="s_next")
    g = anekit.graph([inc, ops.add(ops.add(s, ops.mul(x, np.float32(1.0), name="u")), inc,
                                   name="y")])  # fmt: skip
    names = [n.name for n in g.nodes]
    segments = [
        SegmentSpec(0, "ane", (names[0],), ("x",), ("s_next",)),
        SegmentSpec(1, "cpu", (names[1],), ("x",), ("u",)),
        SegmentSpec(2, "ane", tuple(names[2:]), ("s", "s_next", "u"), ("y",)),
    ]
    from anekit.runtime.program import from_contents

    program = from_contents(build_bundle(g, M4, segments))
    sess = program.session("sim", state={"s": "s_next"})
    assert sess.resident == ()
    xs = np.random.default_rng(2).standard_normal((6, 1, 8)).astype(np.float32)
    out = sess.run_steps(6, [{"x": v} for v in xs])
    state = np.zeros((1, 8), np.float32)
    for i, v in enumerate(xs):  # the oracle: the state through the caller
        r = program.run({"x": v, "s": state}, "sim")
        state = r["s_next"]
        np.testing.assert_array_equal(out["y"][i], r["y"])
    np.testing.assert_array_equal(sess.read("s"), state)


def test_sim_fp32_sessions() -> None:
    program = anekit.compile(_counter(), "m4").program
    sess = program.session("sim-fp32", state={"c": "c_next"})
    sess.seed({"c": [[2048.0]]})  # fp32 throughout: 2049 is representable
    sess.run()
    assert sess.read("c").tolist() == [[2049.0]]


def test_session_errors() -> None:
    g, *_ = _rnn()
    program = anekit.compile(g, "m4").program
    with pytest.raises(AnekitError, match="'z' is not an input"):
        program.session("sim", state={"z": "h_next"})
    with pytest.raises(AnekitError, match="not an output"):
        program.session("sim", state={"h": "nope"})
    with pytest.raises(AnekitError, match="x.*is fp32\\[1, 16\\].*h_next.*fp32\\[1, 32\\]"):
        program.session("sim", state={"x": "h_next"})
    sess = program.session("sim", state={"h": "h_next"})
    with pytest.raises(InputError, match="state comes from the session"):
        sess.run({"x": np.zeros((1, 16)), "h": np.zeros((1, 32))})
    with pytest.raises(InputError, match="3 feed mappings"):
        sess.run_steps(2, [{"x": np.zeros((1, 16))}] * 3)
    with pytest.raises(InputError, match="at least 1"):
        sess.run_steps(0, {"x": np.zeros((1, 16))})
    with pytest.raises(InputError, match="not a state"):
        sess.read("x")
    with pytest.raises(InputError, match="not states"):
        sess.seed({"x": np.zeros((1, 16))})


# --- the binding rules, checked on a bundle ------------------------------------------------


def _saved_rnn(tmp_path: Path) -> Path:
    g, *_ = _rnn()
    return anekit.compile(g, "m4").save(tmp_path / "rnn.anekit")


def _rewrite(path: Path, rel: str, edit) -> None:  # noqa: ANN001
    """Edit a bundle file and record its new digest, as a tampering tool would."""
    target = path / rel
    target.write_text(edit(target.read_text()))
    manifest = json.loads((path / "manifest.json").read_text())
    if rel in manifest["files"]:
        manifest["files"][rel] = {"sha256": sha256_file(target), "size": target.stat().st_size}
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_inputs_declared_out_of_alphabetical_order_are_refused(tmp_path: Path) -> None:
    path = _saved_rnn(tmp_path)
    swap = "tensor<fp16, [1, 32]> h, tensor<fp16, [1, 16]> x"
    rel = "segments/0/model.mil"
    assert swap in (path / rel).read_text()
    _rewrite(
        path, rel, lambda t: t.replace(swap, "tensor<fp16, [1, 16]> x, tensor<fp16, [1, 32]> h")
    )
    program = load(path)  # a valid program: only binding it to surfaces is wrong
    with pytest.raises(FormatError, match=r"order \['x', 'h'\].*alphabetical.*#19"):
        program.session("sim", state={"h": "h_next"})


def test_outputs_returned_out_of_alphabetical_order_are_refused(tmp_path: Path) -> None:
    path = _saved_rnn(tmp_path)
    rel = "segments/0/model.mil"
    _rewrite(path, rel, lambda t: t.replace("-> (h_next, y)", "-> (y, h_next)"))
    with pytest.raises(FormatError, match="#3"):
        load(path).session("sim", state={"h": "h_next"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("input_alloc_bytes", 4096, "below the engine's minimum surface of 49152 bytes"),
        ("output_alloc_bytes", None, "without an output allocation size"),
    ],
)
def test_allocation_sizes_are_checked(tmp_path: Path, key: str, value, message: str) -> None:  # noqa: ANN001
    path = _saved_rnn(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["segments"][0][key] = value
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=message):
        load(path).session("sim", state={"h": "h_next"})


def test_a_port_larger_than_its_allocation_is_refused(tmp_path: Path) -> None:
    x = anekit.input("x", (1, 64, 1, 512))  # 64 KiB in fp16: above the minimum surface
    path = anekit.compile(anekit.graph([ops.relu(x, name="y")]), "m4").save(tmp_path / "big.anekit")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["segments"][0]["input_alloc_bytes"] == 65536
    manifest["segments"][0]["input_alloc_bytes"] = 49152
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="input 'x' needs 65536 bytes.*#18"):
        load(path).session("sim")


def test_surfaces_are_packed_from_byte_zero(tmp_path: Path) -> None:
    """The session writes a port's value at the start of a surface of the uniform size."""
    from anekit.runtime.binding import Surfaces

    program = anekit.compile(_counter((1, 4)), "m4").program
    seg = program.segments[0]
    surfaces = Surfaces(seg.inputs, seg.outputs, 49152)
    value = np.arange(16, dtype=np.float32).reshape(1, 16)
    surfaces.write_input("c", value)
    raw = surfaces._in["c"]
    assert raw.nbytes == 49152 and not raw[32:].any()
    np.testing.assert_array_equal(raw[:32].view("<f2"), value.ravel().astype(np.float16))
