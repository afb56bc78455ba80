"""The com.microsoft ops onnxruntime's transformer optimizer writes into diffusion UNets
(GroupNorm, SkipGroupNorm, NhwcConv, BiasSplitGelu). onnxruntime runs them on CUDA only, so
the oracle is onnxruntime running the graph they were fused from: the float model the
optimizer was given, or for hand-built nodes the same computation in standard ONNX ops."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit

MS = "com.microsoft"
RNG = np.random.default_rng(41)


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def _assert_matches(model: onnx.ModelProto, expected: list[np.ndarray], feeds: dict) -> None:
    compiled = anekit.compile(model, "m4", approximate_gelu=False)
    names = [o.name for o in model.graph.output]
    for backend, (rtol, atol) in (("reference", (1e-4, 1e-5)), ("sim", (2e-2, 3e-2))):
        got = compiled.run(feeds, backend)
        for name, want in zip(names, expected, strict=True):
            np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)


def test_a_unet_block_fused_by_onnxruntimes_optimizer(tmp_path: Path) -> None:
    """GroupNorm + SiLU, conv, time embedding added, GroupNorm, conv, residual, and a GEGLU
    projection: the optimizer writes GroupNorm, SkipGroupNorm (an [N, 1, 1, C] skip), two
    NhwcConvs and BiasSplitGelu."""
    torch = pytest.importorskip("torch")
    from onnxruntime.transformers.optimizer import optimize_model

    class Block(torch.nn.Module):
        def __init__(self, c: int = 32, d: int = 16):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.GroupNorm(8, c), torch.nn.GroupNorm(4, c)
            self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1)
            self.proj, self.out = torch.nn.Linear(c, 4 * d), torch.nn.Linear(2 * d, c)

        def forward(self, x, time):
            h = self.conv1(torch.nn.functional.silu(self.norm1(x))) + time[:, :, None, None]
            h = self.conv2(self.norm2(h)) + x
            b, c, height, width = h.shape
            tokens = h.permute(0, 2, 3, 1).reshape(b, height * width, c)
            value, gate = self.proj(tokens).chunk(2, dim=-1)
            return self.out(value * torch.nn.functional.gelu(gate))

    torch.manual_seed(0)
    feeds = {"x": RNG.standard_normal((1, 32, 8, 8)).astype(np.float32),
             "time": RNG.standard_normal((1, 32)).astype(np.float32)}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Block().eval(), tuple(torch.from_numpy(v) for v in feeds.values()),
            tmp_path / "block.onnx", input_names=list(feeds), output_names=["y"],
            opset_version=17, dynamo=False,
        )  # fmt: skip
    optimized = optimize_model(str(tmp_path / "block.onnx"), model_type="unet", opt_level=0)
    model = optimized.model
    kinds = Counter(n.op_type for n in model.graph.node if n.domain == MS)
    assert kinds == {"GroupNorm": 1, "SkipGroupNorm": 1, "NhwcConv": 2, "BiasSplitGelu": 1}, kinds
    _assert_matches(model, _ort(onnx.load(tmp_path / "block.onnx"), feeds), feeds)


def _model(nodes: list, inputs: dict, outputs: list[str], inits: dict, opset: int = 21):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize(("channels_last", "activation"), [(1, 0), (0, 1), (0, 0)])
def test_group_norm_layouts_and_activation(channels_last: int, activation: int) -> None:
    x = _f(2, 5, 6, 12, scale=4.0) if channels_last else _f(2, 12, 5, 6, scale=4.0)
    inits = {"gamma": _f(12), "beta": _f(12)}
    node = helper.make_node(
        "GroupNorm", ["x", "gamma", "beta"], ["y"], domain=MS, groups=3, epsilon=1e-4,
        activation=activation, channels_last=channels_last,
    )  # fmt: skip
    oracle: list = []
    src = "x"
    if channels_last:
        oracle.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]))
        src = "xt"
    oracle.append(helper.make_node(
        "GroupNormalization", [src, "gamma", "beta"], ["n"], num_groups=3, epsilon=1e-4
    ))  # fmt: skip
    last = "n"
    if activation:
        oracle += [helper.make_node("Sigmoid", ["n"], ["s"]), helper.make_node("Mul", ["n", "s"], ["a"])]
        last = "a"
    oracle.append(
        helper.make_node("Transpose", [last], ["y"], perm=[0, 2, 3, 1])
        if channels_last else helper.make_node("Identity", [last], ["y"])
    )  # fmt: skip
    expected = _ort(_model(oracle, {"x": x}, ["y"], inits), {"x": x})
    _assert_matches(_model([node], {"x": x}, ["y"], inits), expected, {"x": x})


def test_skip_group_norm_with_a_per_image_skip_bias_and_the_sum_output() -> None:
    x, skip = _f(2, 4, 5, 16), _f(2, 16)
    inits = {"gamma": _f(16), "beta": _f(16), "bias": _f(16)}
    node = helper.make_node(
        "SkipGroupNorm", ["x", "gamma", "beta", "skip", "bias"], ["y", "sum"], domain=MS,
        groups=4, activation=1,
    )  # fmt: skip
    oracle = [
        helper.make_node("Unsqueeze", ["skip", "axes"], ["skip4"]),
        helper.make_node("Add", ["x", "skip4"], ["t"]),
        helper.make_node("Add", ["t", "bias"], ["sum"]),
        helper.make_node("Transpose", ["sum"], ["st"], perm=[0, 3, 1, 2]),
        helper.make_node("GroupNormalization", ["st", "gamma", "beta"], ["n"], num_groups=4),
        helper.make_node("Sigmoid", ["n"], ["s"]),
        helper.make_node("Mul", ["n", "s"], ["a"]),
        helper.make_node("Transpose", ["a"], ["y"], perm=[0, 2, 3, 1]),
    ]
    feeds = {"x": x, "skip": skip}
    oracle_model = _model(oracle, feeds, ["y", "sum"], inits)
    oracle_model.graph.initializer.append(numpy_helper.from_array(np.array([1, 2], np.int64), "axes"))
    _assert_matches(_model([node], feeds, ["y", "sum"], inits), _ort(oracle_model, feeds), feeds)


@pytest.mark.parametrize(
    "attrs",
    [{"strides": [2, 2], "pads": [1, 0, 1, 2]}, {"group": 2, "dilations": [2, 1]},
     {"auto_pad": "SAME_UPPER", "strides": [2, 1]}],
)  # fmt: skip
def test_nhwc_conv(attrs: dict) -> None:
    group = attrs.get("group", 1)
    x, w, b = _f(1, 9, 7, 6), _f(8, 3, 3, 6 // group, scale=0.3), _f(8)
    node = helper.make_node("NhwcConv", ["x", "w", "b"], ["y"], domain=MS, **attrs)
    oracle = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["xt", "wt", "b"], ["c"], **attrs),
        helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1]),
    ]
    expected = _ort(_model(oracle, {"x": x}, ["y"], {"wt": w.transpose(0, 3, 1, 2), "b": b}), {"x": x})
    _assert_matches(_model([node], {"x": x}, ["y"], {"w": w, "b": b}), expected, {"x": x})


def test_bias_split_gelu() -> None:
    x, bias = _f(2, 6, 20), _f(20)
    node = helper.make_node("BiasSplitGelu", ["x", "bias"], ["y"], domain=MS)
    oracle = [
        helper.make_node("Add", ["x", "bias"], ["h"]),
        helper.make_node("Split", ["h"], ["left", "right"], axis=-1, num_outputs=2),
        helper.make_node("Gelu", ["right"], ["g"]),
        helper.make_node("Mul", ["left", "g"], ["y"]),
    ]
    expected = _ort(_model(oracle, {"x": x}, ["y"], {"bias": bias}), {"x": x})
    _assert_matches(_model([node], {"x": x}, ["y"], {"bias": bias}), expected, {"x": x})


@pytest.mark.parametrize(
    ("op", "attrs", "inputs", "message"),
    [("GroupNorm", {"groups": 2, "activation": 2}, ["x", "g", "g"], "activation 2 is not one of"),
     ("SkipGroupNorm", {"groups": 2, "activation": 0, "channels_last": 0}, ["x", "g", "g", "x"],
      "(?s)channels_last = 1 only.*hint"),
     ("BiasSplitGelu", {}, ["x", "b"], "hidden size 5 does not split")],
)  # fmt: skip
def test_refusals_name_the_node(op: str, attrs: dict, inputs: list, message: str) -> None:
    x = _f(1, 2, 3, 4) if op != "BiasSplitGelu" else _f(1, 3, 5)
    node = helper.make_node(op, inputs, ["y"], domain=MS, name="fused", **attrs)
    model = _model([node], {"x": x}, ["y"], {"g": _f(4), "b": _f(5)})
    with pytest.raises(anekit.AnekitError, match=message) as caught:
        anekit.compile(model, "m4")
    assert "'fused'" in str(caught.value)
