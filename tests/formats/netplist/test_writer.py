"""write then read: the same graph (fixtures), the same numbers (builder and engine graphs)."""

from __future__ import annotations

import plistlib
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import UnsupportedModelError
from anekit.formats import netplist
from anekit.ir import DType, Graph
from anekit.ir.engine import EpilogueStep, Slot, layer_attrs

from .helpers import (
    PLIST_IDS,
    PLISTS,
    assert_same_graph,
    assert_same_outputs,
    missing_weight,
    random_feeds,
)

READABLE = [(p, i) for p, i in zip(PLISTS, PLIST_IDS, strict=True) if missing_weight(p) is None]


def round_trip(graph: Graph, folder: Path, name: str = "model.plist") -> Graph:
    netplist.write(graph, folder / name)
    return netplist.read(folder / name)


@pytest.mark.parametrize("path", [p for p, _ in READABLE], ids=[i for _, i in READABLE])
def test_fixtures_read_write_read_to_the_same_graph(tmp_path, path):
    first = netplist.read(path)
    again = round_trip(first, tmp_path)
    assert_same_graph(first, again)
    assert_same_outputs(first, again, random_feeds(first, seed=3))
    # ... and writing what was read back gives the very same bytes
    (tmp_path / "second").mkdir()
    netplist.write(again, tmp_path / "second" / "model.plist")
    for name in ("model.plist", "model.weights"):
        a, b = tmp_path / name, tmp_path / "second" / name
        assert a.exists() == b.exists()
        if a.exists():
            assert a.read_bytes() == b.read_bytes()


def test_written_files_use_version_1_0_10_keys(tmp_path):
    graph = netplist.read(PLISTS[PLIST_IDS.index("net")])
    weights = netplist.write(graph, tmp_path / "net.plist")
    doc = plistlib.loads((tmp_path / "net.plist").read_bytes())
    assert doc["Version"] == "1.0.10"
    assert doc["Networks"] == doc["ProcedureList"] == ["net"]
    net = doc["net"]
    assert {"InputList", "OutputList", "Units", "OperationList", "Weights"} <= set(net)
    assert not {"Inputs", "Outputs"} & set(net)
    assert net["Weights"] == ["net.weights"] and weights == tmp_path / "net.weights"
    assert net["OutputList"] == ["probs@output"] and net["Units"] == ["probs_tmp_0", "probs"]
    conv, goc = net["probs_tmp_0"], net["probs"]
    assert conv["Type"] == "Conv" and conv["OutputChannels"] == 2
    assert conv["Params"]["KernelType"] == "Float32"  # the file's precision is kept
    blob = weights.read_bytes()
    offset = conv["Params"]["KernelOffset"]
    np.testing.assert_array_equal(np.frombuffer(blob, "<f4", 6, offset), 3.0)
    group = goc["Params"]["BiasScaleGroupData"]
    assert group["BiasOffset"] % 64 == 0
    np.testing.assert_array_equal(np.frombuffer(blob, "<f2", 2, group["BiasOffset"]), 1.0)
    port = net["image"]
    assert (port["InputRowStride"], port["InputPlaneStride"], port["InputType"]) == (
        64,
        64,
        "Float16",
    )


def test_strides_follow_the_engine_layout_of_the_fixtures(tmp_path):
    """Row stride = width bytes rounded up to 64; depth outermost (as plists/concat.plist)."""
    path = PLISTS[PLIST_IDS.index("plists/concat")]
    netplist.write(netplist.read(path), tmp_path / "c.plist")
    written = plistlib.loads((tmp_path / "c.plist").read_bytes())["net"]
    original = plistlib.loads(path.read_bytes())["net"]
    for port in ("input_0", "input_1"):
        for key in ("InputRowStride", "InputPlaneStride", "InputBatchStride", "InputDepthStride"):
            assert written[port][key] == original[port][key], (port, key)
    for key in ("OutputPlaneStride", "OutputBatchStride", "OutputDepthStride"):
        assert written["output@output"][key] == original["output@output"][key]


# ---- builder-made graphs -------------------------------------------------------------------


def test_a_plain_builder_graph_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 4, 6, 6))
    x2 = anekit.input("x2", (1, 4, 6, 6))
    row = anekit.input("row", (1, 4, 1, 6))
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    per_channel = rng.standard_normal((1, 4, 1, 1)).astype(np.float32)
    outputs = [
        ops.relu(
            ops.conv2d(x, w, bias=rng.standard_normal(8).astype(np.float32), stride=2, padding=1),
            name="conv",
        ),
        ops.conv2d(
            x, rng.standard_normal((4, 2, 1, 1)).astype(np.float32), groups=2, name="grouped"
        ),
        ops.max_pool2d(x, 2, name="maxpool"),
        ops.avg_pool2d(x, 3, stride=1, name="avgpool"),
        ops.softmax(x, axis=1, name="softmax"),
        ops.transpose(x, (0, 1, 3, 2), name="transposed"),
        ops.concat([x, x2], axis=1, name="joined"),
        ops.reshape(x, (1, 4, 36, 1), name="reshaped"),
        ops.slice(x, [1, 2], [3, 5], axes=[1, 3], name="sliced"),
        ops.matmul(x, x2, name="product"),
        ops.maximum(x, row, name="broadcast_max"),
        ops.sub(ops.mul(x, per_channel), 0.5, name="affine"),
        ops.sub(1.0, x, name="flipped"),
        ops.pow(2.0, x, name="exp2"),
        ops.tanh(ops.sigmoid(x), name="squashed"),
        ops.expand(row, (1, 4, 6, 6), name="expanded"),
    ]
    graph = anekit.graph(outputs)
    again = round_trip(graph, tmp_path)
    assert again.output_names == graph.output_names
    assert_same_outputs(graph, again, random_feeds(graph, seed=1))


def as_layers(graph: Graph, build) -> Graph:  # noqa: ANN001
    """`graph` with its one node replaced by what `build(editor, input names)` adds."""
    (node,) = graph.nodes
    ed = graph.edit()
    out = build(ed, node.inputs)
    ed.replace_uses(node.outputs[0], out)
    ed.remove(node)
    return ed.build()


def engine_graph(dtype: str) -> tuple[Graph, Graph]:
    """conv -> GOC(gain, offset) -> sigmoid as one fused ane_layer, and the same as three layers."""
    rng = np.random.default_rng(2)
    np_dtype = DType(dtype).numpy
    w = rng.standard_normal((5, 3, 3, 3)).astype(np_dtype)
    gain = rng.standard_normal((5, 1, 1)).astype(np_dtype)
    offset = rng.standard_normal((5, 1, 1)).astype(np_dtype)
    conv = {"strides": (1, 1), "pads": (1, 1, 1, 1)}
    base = anekit.graph(
        [ops.conv2d(anekit.input("x", (1, 3, 7, 7), dtype), w, padding=1, name="y")]
    )

    def consts(ed) -> list[str]:  # noqa: ANN001
        return [ed.add_constant(c, h) for c, h in ((w, "w"), (gain, "gain"), (offset, "offset"))]

    def fused(ed, inputs) -> str:  # noqa: ANN001
        steps = [EpilogueStep(Slot.POST_ACT, "sigmoid"), EpilogueStep(Slot.GOC, "goc", {}, (2, 3))]
        (y,) = ed.add("ane_layer", [inputs[0], *consts(ed)], layer_attrs("conv", conv, 2, steps))
        return y

    def split(ed, inputs) -> str:  # noqa: ANN001
        w_, gain_, offset_ = consts(ed)
        (c,) = ed.add("ane_layer", [inputs[0], w_], layer_attrs("conv", conv, 2))
        goc = [EpilogueStep(Slot.GOC, "goc", {}, (1, 2))]
        (g,) = ed.add("ane_layer", [c, gain_, offset_], layer_attrs("identity", {}, 1, goc, "goc"))
        (y,) = ed.add("ane_layer", [g], layer_attrs("sigmoid", {}, 1))
        return y

    return as_layers(base, fused), as_layers(base, split)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_a_fused_engine_layer_becomes_one_unit_per_slot(tmp_path, dtype):
    fused, split = engine_graph(dtype)
    again = round_trip(fused, tmp_path)
    net = plistlib.loads((tmp_path / "model.plist").read_bytes())["net"]
    assert [net[u]["Type"] for u in net["Units"]] == ["Conv", "GOC", "Neuron"]
    assert net["Units"] == ["y_tmp_0", "y_tmp_1", "y"]
    assert [n.attrs["layer_type"] for n in again.nodes] == ["conv", "goc", "neuron"]
    feeds = random_feeds(fused, seed=4)
    # Each unit's output is stored in the graph's dtype: exactly the three-layer graph,
    # and for fp32 exactly the fused layer too.
    assert_same_outputs(split, again, feeds)
    if dtype == "fp32":
        assert_same_outputs(fused, again, feeds)


def test_a_scaled_elementwise_layer_keeps_its_scale(tmp_path):
    a, b = anekit.input("a", (1, 2, 3, 3), "fp16"), anekit.input("b", (1, 2, 3, 3), "fp16")

    def scaled_add(ed, inputs) -> str:  # noqa: ANN001
        scale = ed.add_constant(np.array(0.5, np.float16), "scale")
        step = EpilogueStep(Slot.GOC, "goc", {}, (2,))
        (y,) = ed.add("ane_layer", [*inputs, scale], layer_attrs("add", {}, 2, [step]))
        return y

    graph = as_layers(anekit.graph([ops.add(a, b, name="s")]), scaled_add)
    again = round_trip(graph, tmp_path)
    net = plistlib.loads((tmp_path / "model.plist").read_bytes())["net"]
    assert net["Units"] == ["s"] and net["s"]["Params"] == {"Scale": 0x3800, "Type": "Add"}
    assert_same_outputs(graph, again, random_feeds(graph))
    assert_same_graph(again, round_trip(again, tmp_path, "again.plist"))


def test_uint8_ports_and_output_quantisation(tmp_path):
    x = anekit.input("x", (1, 2, 2, 2), "uint8")

    def layer(ed, inputs) -> str:  # noqa: ANN001
        (wide,) = ed.add("cast", inputs, {"to": DType.FP16})
        quant = EpilogueStep(Slot.QUANT, "cast", {"to": DType.UINT8})
        (y,) = ed.add("ane_layer", [wide], layer_attrs("relu", {}, 1, [quant]))
        return y

    graph = as_layers(anekit.graph([ops.identity(x, name="y")]), layer)
    again = round_trip(graph, tmp_path)
    net = plistlib.loads((tmp_path / "model.plist").read_bytes())["net"]
    assert net["x"]["InputType"] == "UInt8" and net["y"]["OutputType"] == "UInt8"
    assert net["y"]["Bottom"] == "x"  # the widening cast is the reader's job, not a unit
    assert_same_outputs(graph, again, random_feeds(graph))


def test_five_d_graphs_keep_their_depth(tmp_path):
    x = anekit.input("x", (2, 3, 4, 2, 2), "fp16")
    y = anekit.input("y", (2, 1, 4, 2, 2), "fp16")
    graph = anekit.graph(
        [
            ops.softmax(ops.concat([x, y], axis=1), axis=2, name="out"),
            ops.reshape(x, (2, 3, 2, 4, 2), name="r"),
        ]
    )
    again = round_trip(graph, tmp_path)
    net = plistlib.loads((tmp_path / "model.plist").read_bytes())["net"]
    assert net["x"]["InputDepth"] == 4 and "InputDepthStride" in net["x"]
    assert [v.shape for v in again.inputs] == [(2, 3, 4, 2, 2), (2, 1, 4, 2, 2)]
    assert_same_outputs(graph, again, random_feeds(graph))


def test_identical_weights_are_stored_once(tmp_path):
    w = np.random.default_rng(5).standard_normal((3, 3, 1, 1)).astype(np.float32)
    x = anekit.input("x", (1, 3, 2, 2))
    graph = anekit.graph([ops.conv2d(ops.conv2d(x, w), w.copy(), name="y")])
    weights = netplist.write(graph, tmp_path / "m.plist")
    assert weights.stat().st_size == w.nbytes
    assert_same_outputs(graph, netplist.read(tmp_path / "m.plist"), random_feeds(graph))


def test_reserved_names_are_renamed(tmp_path):
    x = anekit.input("Units", (1, 2, 1, 1))
    graph = anekit.graph([ops.relu(x, name="Weights")])
    again = round_trip(graph, tmp_path)
    assert [v.name for v in again.inputs] == ["Units_0"]
    np.testing.assert_array_equal(
        again.run({"Units_0": np.array([-1.0, 2.0], np.float32).reshape(1, 2, 1, 1)})[
            again.output_names[0]
        ].ravel(),
        [0, 2],
    )


def test_unsupported_graphs_list_every_problem_and_write_nothing(tmp_path):
    x = anekit.input("x", (1, 2, 4, 4))
    flat = anekit.input("flat", (2, 8))
    w = np.ones((2, 2, 3, 3), np.float32)
    graph = anekit.graph(
        [
            ops.div(x, x, name="quotient"),
            ops.conv2d(x, w, dilation=2, padding=2, name="dilated"),
            ops.relu(flat, name="flat_relu"),
        ]
    )
    (tmp_path / "model.plist").write_bytes(b"previous")
    with pytest.raises(UnsupportedModelError) as info:
        netplist.write(graph, tmp_path / "model.plist")
    message = str(info.value)
    assert "rank" in message  # a rank-2 input: netplists are NCHW or NCDHW
    graph = anekit.graph(
        [ops.div(x, x, name="quotient"), ops.conv2d(x, w, dilation=2, padding=2, name="dilated")]
    )
    with pytest.raises(UnsupportedModelError) as info:
        netplist.write(graph, tmp_path / "model.plist")
    message = str(info.value)
    assert "2 problem(s)" in message
    assert "node 'quotient' (div): IR op 'div' has no netplist unit" in message
    assert "dilations [2, 2] have no netplist parameter" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.plist"]
    assert (tmp_path / "model.plist").read_bytes() == b"previous"


def test_writing_is_deterministic():
    fused, _ = engine_graph("fp16")
    assert netplist.dumps(fused) == netplist.dumps(fused)
