"""Malformed or unsupported netplists raise FormatError saying what and where; 1.0.10 keys are read."""

from __future__ import annotations

import copy
import plistlib
from typing import Any

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats import netplist

from .helpers import NETPLIST_DIR, plist


def image(channels: int = 3, height: int = 1, width: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "InputChannels": channels,
        "InputHeight": height,
        "InputWidth": width,
        "InputType": "Float16",
        **extra,
    }


def doc(units: dict[str, dict], inputs: dict[str, dict] | None = None, out: str = "") -> dict:
    """A one-network netplist: the given units in order, output `<last unit>@output`."""
    inputs = inputs or {"image": image()}
    last = out or list(units)[-1]
    net: dict[str, Any] = {
        "Inputs": list(inputs),
        "Outputs": [f"{last}@output"],
        "Units": list(units),
        f"{last}@output": {"Bottom": last},
        **inputs,
    }
    for name, unit in units.items():
        net[name] = {"Name": name, **unit}
    return {"Networks": ["net"], "Version": "1.0.9", "net": net}


def parse(d: dict, **files: bytes):
    return netplist.parse(plistlib.dumps(d), files=files)


NEURON = {"Bottom": "image", "Type": "Neuron", "Params": {"Type": "Sigmoid"}}


def test_a_minimal_neuron_network():
    graph = parse(doc({"y": NEURON}))
    x = np.linspace(-4, 4, 3, dtype=np.float16).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(
        graph.run({"image": x})["y"], 1 / (1 + np.exp(-x.astype(np.float32))), rtol=1e-3
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("Version"), "Version: is missing"),
        (lambda d: d.update(Version="2.0"), "anekit reads netplist versions 1.x"),
        (lambda d: d.update(Networks=["other"]), "network 'other' is listed in Networks"),
        (lambda d: d["net"].pop("Inputs"), "neither Inputs nor InputList"),
        (lambda d: d["net"]["Units"].append("ghost"), "unit 'ghost' is listed in Units"),
        (lambda d: d["net"]["y"].update(Type="Lstm"), "unit type 'Lstm' is not supported"),
        (lambda d: d["net"]["y"].update(Type="SDPA"), "not its parameter names"),
        (
            lambda d: d["net"]["y"]["Params"].update(Type="Swish"),
            "unsupported Neuron type 'Swish' (anekit reads ReLU, Sigmoid, Tanh, Sign, Exp2)",
        ),
        (
            lambda d: d["net"]["y"]["Params"].update(Alpha=1),
            "unsupported Neuron parameter(s) 'Alpha'",
        ),
        (lambda d: d["net"]["y"].update(Colour="red"), "unsupported unit key(s) 'Colour'"),
        (lambda d: d["net"]["y"].update(Bottom="nothing"), "reads 'nothing', which is neither"),
        (lambda d: d["net"]["y"].update(Name="z"), "Name: is 'z' but the unit is listed as 'y'"),
        (lambda d: d["net"]["image"].update(InputChannels=0), "expected an integer in [1,"),
        (lambda d: d["net"]["image"].update(InputChannels="3"), "must be an integer, not a string"),
        (lambda d: d["net"]["image"].update(InputType="Float64"), "expected one of Float16"),
        (
            lambda d: d["net"]["image"].update(InputWidth=1 << 20, InputHeight=1 << 20),
            "too many",
        ),
        (lambda d: d["net"].update(InputList=["other"]), "InputList: disagrees with Inputs"),
        (lambda d: d["net"]["y@output"].update(Bottom=["y", "image"]), "must name one tensor"),
        (lambda d: d["net"].update(Units="y"), None),  # a single name is a valid Units array
        (lambda d: d["net"]["y"].update(OutputType="UInt8"), None),
    ],
)
def test_bad_documents_name_the_problem(mutate, message):
    d = doc({"y": copy.deepcopy(NEURON)})
    mutate(d)
    if message is None:
        parse(d)
        return
    with pytest.raises(FormatError) as info:
        parse(d)
    assert message in str(info.value)
    assert info.value.where


def test_xml_errors_carry_the_line():
    data = plistlib.dumps(doc({"y": NEURON})).replace(b"<key>Units</key>", b"<key>Units</kez>")
    with pytest.raises(FormatError) as info:
        netplist.parse(data)
    assert info.value.line is not None and info.value.line > 1


def test_binary_plists_are_read_too():
    graph = netplist.parse(plistlib.dumps(doc({"y": NEURON}), fmt=plistlib.FMT_BINARY))
    assert graph.output_names == ("y",)


def test_version_1_0_10_port_lists():
    d = doc({"y": NEURON})
    net = d["net"]
    net["InputList"], net["OutputList"] = net.pop("Inputs"), net.pop("Outputs")
    net["OperationList"] = ["y"]
    d["ProcedureList"] = ["net"]
    assert parse(d).output_names == ("y",)


def test_operation_list_must_match_units():
    d = doc({"y": NEURON})
    d["net"]["OperationList"] = ["y", "y"]
    with pytest.raises(FormatError, match="every unit of Units exactly once"):
        parse(d)


def test_several_networks_need_a_choice():
    d = doc({"y": NEURON})
    d["Networks"].append("second")
    d["second"] = copy.deepcopy(d["net"])
    with pytest.raises(FormatError, match="has 2 networks"):
        parse(d)
    graph = netplist.parse(plistlib.dumps(d), network="second")
    assert graph.name == "second"


CONV = {
    "Bottom": "image",
    "Type": "Conv",
    "OutputChannels": 2,
    "Params": {"KernelWidth": 1, "KernelHeight": 1, "KernelOffset": 0, "KernelType": "Float16"},
}


def conv_doc(**params: Any) -> dict:
    unit = copy.deepcopy(CONV)
    unit["Params"].update(params)
    d = doc({"c": unit})
    d["net"]["Weights"] = ["w.bin"]
    return d


def test_conv_weights_are_bounds_checked_against_the_file():
    kernel = np.arange(6, dtype="<f2").tobytes()
    graph = parse(conv_doc(), **{"w.bin": kernel})
    (w,) = graph.constants.values()
    np.testing.assert_array_equal(w.reshape(2, 3), np.arange(6).reshape(2, 3))
    with pytest.raises(FormatError) as info:
        parse(conv_doc(KernelOffset=2), **{"w.bin": kernel})
    assert "needs 12 bytes (6 x fp16) at offset 2, but the file has 12 bytes" in str(info.value)
    assert info.value.offset == 2
    with pytest.raises(FormatError, match="weight index 1 is out of range"):
        parse(conv_doc(KernelIndex=1), **{"w.bin": kernel})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"KernelWidth": 2}, "does not fit the padded input"),
        ({"Step": [1]}, "must be an array of 2 integers"),
        ({"KernelMode": "Sparse"}, "expected one of Dense"),
        ({"NumGroups": 2}, "divisible by num group"),
        ({"Dilation": 2}, "unsupported Conv parameter(s) 'Dilation'"),
        ({"KernelType": "Int8"}, None),
    ],
)
def test_conv_parameters(params, message):
    kernel = bytes(64)
    if message is None:
        parse(conv_doc(**params), **{"w.bin": kernel})
        return
    with pytest.raises(FormatError) as info:
        parse(conv_doc(**params), **{"w.bin": kernel})
    assert message in str(info.value)


def test_output_channels_must_match_the_layer():
    d = doc({"y": {**NEURON, "OutputChannels": 4}})
    with pytest.raises(FormatError, match="OutputChannels is 4 but the layer computes 3"):
        parse(d)


def test_conv_needs_output_channels():
    d = conv_doc()
    del d["net"]["c"]["OutputChannels"]
    with pytest.raises(FormatError, match="OutputChannels is missing"):
        parse(d, **{"w.bin": bytes(12)})


@pytest.mark.parametrize(
    ("unit", "message"),
    [
        (
            {
                "Type": "Reshape",
                "Params": {"ReshapedChannel": 2, "ReshapedHeight": 1, "ReshapedWidth": 1},
            },
            "cannot reshape",
        ),
        (
            {"Type": "Reshape", "Params": {"ReshapedChannel": 3}},
            "ReshapedHeight, ReshapedWidth missing",
        ),
        (
            {"Type": "InputView", "Params": {"Dimension": "Channel", "Offset": 2, "Size": 2}},
            "does not fit",
        ),
        (
            {
                "Type": "Broadcast",
                "Params": {"BroadcastInfo": [{"Dimension": "Channel", "Size": 6}]},
            },
            "cannot broadcast Channel of size 3 to 6",
        ),
        ({"Type": "Broadcast", "Params": {"BroadcastInfo": []}}, "non-empty array"),
        ({"Type": "Concat", "Params": {"Dimension": "Time"}}, "expected one of Batch"),
        (
            {"Type": "Transpose", "Params": {"Permutation": ["Batch", "Width", "Height"]}},
            "not a permutation",
        ),
        (
            {"Type": "Pooling", "Params": {"Type": "Lp", "KernelWidth": 1, "KernelHeight": 1}},
            "unsupported Pooling type 'Lp'",
        ),
    ],
)
def test_unit_parameters_are_checked(unit, message):
    with pytest.raises(FormatError) as info:
        parse(doc({"u": {"Bottom": "image", **unit}}))
    assert message in str(info.value)


def test_elementwise_operands_must_have_one_shape():
    inputs = {"a": image(3), "b": image(3, width=2)}
    unit = {
        "Bottom": ["a", "b"],
        "Type": "ScaledElementWise",
        "Params": {"Type": "Add", "Scale": 15360},
    }
    with pytest.raises(FormatError, match="a netplist broadcasts with Broadcast units"):
        parse(doc({"s": unit}, inputs))


def test_scaled_elementwise_scales_the_result():
    inputs = {"a": image(3), "b": image(3)}
    unit = {
        "Bottom": ["a", "b"],
        "Type": "ScaledElementWise",
        "Params": {"Type": "Max", "Scale": 0x4000},
    }
    graph = parse(doc({"s": unit}, inputs))
    a = np.array([1, -2, 3], np.float16).reshape(1, 3, 1, 1)
    b = np.array([0, -1, 5], np.float16).reshape(1, 3, 1, 1)
    np.testing.assert_array_equal(graph.run({"a": a, "b": b})["s"].ravel(), [2, -2, 10])


def test_goc_vectors_and_scalars():
    d = doc(
        {
            "g": {
                "Bottom": "image",
                "Type": "GOC",
                "Params": {
                    "ScaleScalar": 0x4200,  # 3.0
                    "BiasScaleGroupData": {
                        "BiasCount": 3,
                        "BiasIndex": 0,
                        "BiasOffset": 4,
                        "BiasType": "Float32",
                    },
                },
            }
        }
    )
    d["net"]["Weights"] = ["b.bin"]
    bias = np.array([9, 1, 2, 3], "<f4").tobytes()
    graph = parse(d, **{"b.bin": bias})
    x = np.array([1, 2, 3], np.float16).reshape(1, 3, 1, 1)
    np.testing.assert_array_equal(graph.run({"image": x})["g"].ravel(), [4, 8, 12])
    d["net"]["g"]["Params"]["BiasScalar"] = 0x3C00
    with pytest.raises(FormatError, match="gives both BiasScalar and a Bias vector"):
        parse(d, **{"b.bin": bias})
    d["net"]["g"]["Params"].pop("BiasScalar")
    d["net"]["g"]["Params"]["BiasScaleGroupData"]["BiasCount"] = 2
    with pytest.raises(FormatError, match="BiasCount is 2 but the input has 3 channels"):
        parse(d, **{"b.bin": bias})


def test_assumed_units_read_as_their_ir_ops():
    inputs = {"a": image(2, 4, 4), "b": image(2, 4, 4)}
    units = {
        "p": {
            "Bottom": "a",
            "Type": "Pooling",
            "Params": {"Type": "Max", "KernelWidth": 2, "KernelHeight": 2, "Step": [2, 2]},
        },
        "s": {"Bottom": "a", "Type": "Softmax", "Params": {"Dimension": "Channel"}},
        "t": {
            "Bottom": "a",
            "Type": "Transpose",
            "Params": {"Permutation": ["Batch", "Channel", "Width", "Height"]},
        },
        "m": {"Bottom": ["a", "b"], "Type": "MatrixMultiplication"},
    }
    d = doc(units, inputs)
    d["net"]["Outputs"] = [f"{u}@output" for u in units]
    d["net"].update({f"{u}@output": {"Bottom": u} for u in units})
    graph = parse(d)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1, 2, 4, 4)).astype(np.float16) for _ in range(2))
    out = graph.run({"a": a, "b": b})
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(out["p"], a.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)))
    e = np.exp(a32 - a32.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["s"], e / e.sum(axis=1, keepdims=True), rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(out["t"], a.transpose(0, 1, 3, 2))
    np.testing.assert_allclose(out["m"], a32 @ b32, rtol=1e-3, atol=1e-3)


def test_output_ports_convert_to_their_output_type():
    d = doc({"y": NEURON})
    d["net"]["y@output"]["OutputType"] = "Float32"
    graph = parse(d)
    # the unit's value keeps its name; the converted port value takes the port's name
    assert graph.outputs[0].dtype.numpy == np.float32 and graph.output_names == ("y@output",)


def test_unescaped_names_name_the_values():
    d = doc({"y": {**NEURON, "UnescapedName": "block/act:0"}})
    graph = parse(d)
    assert "block/act:0" in graph.values and graph.output_names == ("y",)


def test_unused_missing_weight_files_are_no_error():
    d = doc({"y": NEURON})
    d["net"]["Weights"] = ["/private/var/folders/x/model.espresso.weights"]
    assert parse(d).output_names == ("y",)


def test_the_fixture_comment_documents_still_parse_with_plistlib_values():
    """Our reading agrees with plistlib on every fixture's names (comments are XML, not keys)."""
    for path in sorted(NETPLIST_DIR.glob("simple/*.plist")):
        names = plist(path)["net"]["Units"]
        parsed = netplist.parse_document(path.read_bytes(), str(path))
        assert [u.name for u in parsed.networks[0].units] == names
