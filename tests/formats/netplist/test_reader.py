"""Every netplist fixture reads into a graph that runs, checked against numpy read straight off the plist."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats import netplist
from anekit.ir.engine import LayerView

from .helpers import (
    NETPLIST_DIR,
    PLIST_IDS,
    PLISTS,
    missing_weight,
    network,
    random_feeds,
)


def half(bits: int) -> np.float32:
    return np.float32(np.array(bits, dtype=np.uint16).view(np.float16))


def weights(path: Path, net: dict, index: int, offset: int, dtype: str, count: int) -> np.ndarray:
    data = (path.parent / net["Weights"][index]).read_bytes()
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).astype(np.float32)


def conv1x1(path: Path, net: dict, unit: str, x: np.ndarray) -> np.ndarray:
    """A 1x1 Conv unit as a matrix product over channels ([Cout, Cin] row-major kernel)."""
    u = net[unit]
    p = u["Params"]
    cout, cin = u["OutputChannels"], x.shape[1]
    dtype = {"Float16": "<f2", "Float32": "<f4", "UInt8": "u1"}[p["KernelType"]]
    w = weights(path, net, p.get("KernelIndex", 0), p["KernelOffset"], dtype, cout * cin)
    return np.einsum("oc,nchw->nohw", w.reshape(cout, cin), x.astype(np.float32))


def fp16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def _net_plist(path, net, f):
    y = fp16(conv1x1(path, net, "probs_tmp_0", f["image"]))
    g = net["probs"]["Params"]["BiasScaleGroupData"]
    bias = weights(path, net, g["BiasIndex"], g["BiasOffset"], "<f2", g["BiasCount"])
    return {"probs": fp16(y.astype(np.float32) + bias.reshape(1, -1, 1, 1))}


def _conv_chain(names: list[str], outputs: dict[str, str]) -> Callable:
    def oracle(path, net, f):
        values, x = {}, f["image"]
        for name in names:
            x = values[name] = fp16(conv1x1(path, net, name, x))
        return {port: values[bottom] for port, bottom in outputs.items()}

    return oracle


def _goc(x_name: str, out: str) -> Callable:
    def oracle(path, net, f):
        unit = next(net[u] for u in net["Units"])
        p = unit["Params"]
        x = f[x_name].astype(np.float32)
        return {
            out: fp16(fp16(x * half(p["ScaleScalar"])).astype(np.float32) + half(p["BiasScalar"]))
        }

    return oracle


def _sigmoid(n: int) -> Callable:
    def oracle(path, net, f):
        x = f["image"]
        for _ in range(n):
            x = fp16(1 / (1 + np.exp(-x.astype(np.float32))))
        return {"probs": x}

    return oracle


def _convuint8(path, net, f):
    y = conv1x1(path, net, "my_layer", f["image"])
    return {"probs": np.clip(np.trunc(y), 0, 255).astype(np.uint8)}


def _convneuron(path, net, f):
    return {"probs": fp16(np.sign(fp16(conv1x1(path, net, "my_layer", f["image"]))))}


def _min_broadcast(path, net, f):
    return {"output": np.minimum(f["A"], f["B"])}  # numpy broadcasting = the Broadcast units


ORACLES: dict[str, Callable[[Path, dict, dict[str, np.ndarray]], dict[str, Any]]] = {
    "net": _net_plist,
    "simple/conv": _conv_chain(["my_layer"], {"probs": "my_layer"}),
    "simple/convneuron": _convneuron,
    "simple/convuint8": _convuint8,
    "simple/doubleconv": _conv_chain(
        ["my_layer", "my_layer_2"], {"probs": "my_layer", "zalt": "my_layer_2"}
    ),
    "simple/doubleconvrev": _conv_chain(
        ["my_layer", "my_layer_2"], {"probs": "my_layer", "aalt": "my_layer_2"}
    ),
    "simple/doubleconvsout": _conv_chain(["my_layer", "my_layer_2"], {"probs": "my_layer_2"}),
    "simple/quadconv": _conv_chain(
        ["my_layer", "my_layer_2", "my_layer_3", "my_layer_4"], {"probs": "my_layer_4"}
    ),
    "simple/goc": _goc("image", "probs"),
    "plists/goc": _goc("data", "output"),
    "simple/neuron": _sigmoid(1),
    "simple/doubleneuron": _sigmoid(2),
    "plists/neuron": lambda p, n, f: {"output": fp16(np.exp2(f["data"].astype(np.float32)))},
    "simple/reshape": lambda p, n, f: {"probs": f["image"].reshape(1, 3, 1, 1)},
    "plists/reshape": lambda p, n, f: {"output": f["data"].reshape(1, 10, 1, 1)},
    "simple/concat": lambda p, n, f: {
        "output": np.concatenate([f["input_0"], f["input_1"]], axis=1)
    },
    "plists/concat": lambda p, n, f: {
        "output": np.concatenate([f["input_0"], f["input_1"]], axis=1)
    },
    "plists/inputview": lambda p, n, f: {
        f"out_{i}": f["data"][:, 3 * i : 3 * i + 3] for i in (2, 1, 0)
    },
    "plists/sum": lambda p, n, f: {"probs": fp16(f["image"] + f["image2"])},
    "plists/scaled": _min_broadcast,
    "plists/broadcast": _min_broadcast,
}


@pytest.mark.parametrize("path", PLISTS, ids=PLIST_IDS)
def test_every_fixture_runs_or_names_its_missing_weight_file(path):
    missing = missing_weight(path)
    if missing is not None:
        with pytest.raises(FormatError) as info:
            netplist.read(path)
        assert f"weight file '{missing}'" in str(info.value)
        assert "does not exist" in str(info.value)
        return
    graph = netplist.read(path)
    graph.validate()
    feeds = random_feeds(graph)
    out = graph.run(feeds)
    ports = [p.removesuffix("@output") for p in network(path)["Outputs"]]
    assert list(out) == ports
    fixture = str(path.relative_to(NETPLIST_DIR).with_suffix(""))
    expected = ORACLES[fixture](path, network(path), feeds)
    assert set(expected) == set(out)
    for name, want in expected.items():
        got = out[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        if got.dtype == np.float16:  # one fp16 rounding of a sum may land on either side
            np.testing.assert_allclose(got, want, rtol=2**-10, atol=2**-24, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_every_readable_fixture_has_an_oracle():
    readable = {i for i, p in zip(PLIST_IDS, PLISTS, strict=True) if missing_weight(p) is None}
    assert readable == set(ORACLES)


@pytest.mark.parametrize("path", PLISTS, ids=PLIST_IDS)
def test_inputs_keep_the_declared_shape_order_and_type(path):
    if missing_weight(path) is not None:
        return
    net = network(path)
    graph = netplist.read(path)
    assert [v.name for v in graph.inputs] == net["Inputs"]
    for value in graph.inputs:
        port = net[value.name]
        dims = [port.get("BatchSize", 1), port["InputChannels"]]
        dims += [port.get("InputDepth", 1)] if value.rank == 5 else []
        dims += [port["InputHeight"], port["InputWidth"]]
        assert list(value.shape) == dims
        assert value.dtype.numpy == {"Float16": np.float16, "UInt8": np.uint8}[port["InputType"]]


def test_units_become_engine_layers_named_after_the_units():
    graph = netplist.read(NETPLIST_DIR / "net.plist")
    layers = [n for n in graph.nodes if n.op == "ane_layer"]
    assert [(n.name, LayerView(n).layer_type) for n in layers] == [
        ("probs_tmp_0", "conv"),
        ("probs", "goc"),
    ]
    conv = LayerView(layers[0])
    (weight,) = [graph.constants[i] for i in conv.main_inputs if i in graph.constants]
    assert weight.shape == (2, 3, 1, 1) and weight.dtype == np.float32
    np.testing.assert_array_equal(weight, 3.0)  # six Float32 3.0 at byte 192 of the file


def test_uint8_inputs_are_widened_and_outputs_saturate():
    graph = netplist.read(NETPLIST_DIR / "simple" / "convuint8.plist")
    x = np.array([0, 100, 255], dtype=np.uint8).reshape(1, 1, 1, 3)
    (y,) = graph.run({"image": x}).values()
    # min_uint8.weights starts 01 02 03: out channel o scales by o + 1, then saturates at 255
    np.testing.assert_array_equal(y[0, :, 0], [[0, 100, 255], [0, 200, 255], [0, 255, 255]])


def test_depth_makes_a_five_d_graph():
    graph = netplist.read(NETPLIST_DIR / "plists" / "concat.plist")
    assert [v.shape for v in graph.inputs] == [(2, 2, 4, 2, 3), (2, 4, 4, 2, 3)]
    assert graph.outputs[0].shape == (2, 6, 4, 2, 3)
