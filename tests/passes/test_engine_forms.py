"""Ops that used to fall back to the CPU now run on the engine in an exact form.

Each case is a one-node ONNX model: onnxruntime gives the expected output, the compiled
engine graph runs on the reference backend, and every node must be placed on the ANE
(m1 and m4). A few torch modules (pixel shuffle, ViT patchify, wav2vec2's positional conv,
ConvTranspose1d) check the same against torch.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.compiler import compile as compile_model
from tests.passes.support import EXACT_RTOL, rel_err

RNG = np.random.default_rng(16)


def _model(
    op: str,
    inputs: dict[str, np.ndarray],
    out_rank: int,
    consts=None,
    *,
    const_first=False,
    **attrs,
):
    consts = consts or {}
    names = [*consts, *inputs] if const_first else [*inputs, *consts]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_rank)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, feeds)
    for chip in ("m1", "m4"):
        cm = compile_model(model, chip)
        cpu = [r.node for r in cm.ops if r.placement == "cpu"]
        assert cpu == [], f"{chip}: {cpu} still on the CPU: {[r.reason for r in cm.ops]}"
        (got,) = cm.run(feeds).values()
        assert rel_err(got, expected) < EXACT_RTOL, chip


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("bhqd,bhkd->bhqk", [(1, 2, 5, 8), (1, 2, 6, 8)]),
        ("bqk,bkd->bqd", [(2, 5, 6), (2, 6, 3)]),
        ("ij,jk->ik", [(4, 5), (5, 3)]),
        ("bld,dk->blk", [(1, 7, 6), (6, 4)]),
        ("bij,bjk->bik", [(3, 2, 4), (3, 4, 5)]),
        ("nchw,nqhw->nqc", [(1, 3, 4, 5), (1, 2, 4, 5)]),
        ("bi,bj->bij", [(2, 3), (2, 4)]),
        ("abc->cab", [(2, 3, 4)]),
        ("abc->ac", [(2, 3, 4)]),
    ],
)
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    feeds = {f"x{i}": _rand(*s) for i, s in enumerate(shapes)}
    out_rank = len(equation.split("->")[1])
    _check(_model("Einsum", feeds, out_rank, equation=equation), feeds)


def test_einsum_with_a_constant_left_operand() -> None:
    feeds = {"x": _rand(1, 6, 7)}
    model = _model(
        "Einsum", feeds, 3, consts={"w": _rand(4, 6)}, const_first=True, equation="kd,bdl->bkl"
    )
    _check(model, feeds)


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_shuffles(op: str, mode: str) -> None:
    shape = (1, 12, 3, 5) if op == "DepthToSpace" else (1, 3, 6, 4)
    feeds = {"x": _rand(*shape)}
    if op == "SpaceToDepth" and mode == "CRD":  # ONNX has no CRD SpaceToDepth: numpy is the oracle
        x = feeds["x"]
        t = x.reshape(1, 3, 3, 2, 2, 2).transpose(0, 1, 3, 5, 2, 4).reshape(1, 12, 3, 2)
        graph = _model("SpaceToDepth", feeds, 4, blocksize=2)
        imported = anekit.from_onnx(graph)
        node = imported.nodes[0]
        imported = imported.replace(nodes=[node.with_(attrs={**node.attrs, "mode": "CRD"})])
        cm = compile_model(imported, "m4")
        assert [r.node for r in cm.ops if r.placement == "cpu"] == []
        assert rel_err(next(iter(cm.run(feeds).values())), t) < EXACT_RTOL
        return
    attrs = {"blocksize": 2} | ({"mode": mode} if op == "DepthToSpace" else {})
    _check(_model(op, feeds, 4, **attrs), feeds)


@pytest.mark.parametrize("repeats", [(1, 2, 1, 3), (2, 1, 3)])
def test_tile(repeats: tuple[int, ...]) -> None:
    feeds = {"x": _rand(*((1, 4, 5, 6) if len(repeats) == 4 else (2, 3, 4)))}
    model = _model("Tile", feeds, len(repeats), consts={"r": np.array(repeats, np.int64)})
    _check(model, feeds)


@pytest.mark.parametrize("axis, exclusive, reverse", [(-1, 0, 0), (1, 1, 0), (2, 0, 1), (0, 1, 1)])
def test_cumsum(axis: int, exclusive: int, reverse: int) -> None:
    feeds = {"x": _rand(3, 5, 7)}
    model = _model(
        "CumSum", feeds, 3, consts={"axis": np.array(axis, np.int64)},
        exclusive=exclusive, reverse=reverse,
    )  # fmt: skip
    _check(model, feeds)


@pytest.mark.parametrize("exponent", [1.5, 2.5, -1.5, 0.3, 1.0 / 3.0, -0.7])
def test_fractional_pow(exponent: float) -> None:
    feeds = {"x": (np.abs(_rand(2, 4, 8)) + 0.05).astype(np.float32)}
    model = _model("Pow", feeds, 3, consts={"p": np.array(exponent, np.float32)})
    _check(model, feeds)


def test_fractional_pow_of_negative_and_zero_matches_pow() -> None:
    """NaN below zero, 0 (or inf for a negative exponent) at zero, as onnxruntime gives."""
    x = np.array([[-2.0, 0.0, 3.0, 0.5]], np.float32)
    for exponent in (0.3, -0.7, 1.5):
        model = _model("Pow", {"x": x}, 2, consts={"p": np.array(exponent, np.float32)})
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (expected,) = session.run(None, {"x": x})
        (got,) = compile_model(model, "m4").run({"x": x}).values()
        np.testing.assert_allclose(got, expected, rtol=EXACT_RTOL, equal_nan=True)


@pytest.mark.parametrize(
    "strides, pads, output_padding", [(2, (1, 1), 0), (3, (0, 2), 1), (1, (0, 0), 0)]
)
def test_conv_transpose_1d(strides: int, pads: tuple[int, int], output_padding: int) -> None:
    feeds = {"x": _rand(1, 6, 9)}
    consts = {"w": _rand(6, 4, 4), "b": _rand(4)}
    model = _model(
        "ConvTranspose", feeds, 3, consts=consts, strides=[strides], pads=list(pads),
        output_padding=[output_padding],
    )  # fmt: skip
    _check(model, feeds)


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 3, 32, 48), (8, 3, 16, 16), {"strides": [16, 16]}),  # ViT patchify
        ((1, 4, 1, 40), (4, 2, 1, 31), {"pads": [0, 15, 0, 15], "group": 2}),  # wide 1-D
        ((1, 2, 20, 20), (3, 2, 17, 3), {"pads": [3, 1, 2, 1], "strides": [2, 1]}),
        ((1, 2, 40, 9), (2, 2, 16, 1), {"dilations": [2, 1], "pads": [5, 0, 5, 0]}),
    ],
)
def test_wide_kernel_split(x_shape, w_shape, attrs) -> None:
    feeds = {"x": _rand(*x_shape)}
    model = _model("Conv", feeds, 4, consts={"w": _rand(*w_shape), "b": _rand(w_shape[0])}, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize(
    "width, channels, kernel, stride, pads",
    [
        (576, 1, 256, 128, (0, 0)),  # silero-vad's STFT, its reflect padding done before
        (600, 1, 400, 160, (0, 0)),  # whisper's 25 ms window at 10 ms: zeros past the end
        (130, 2, 20, 3, (0, 0)),  # kernel not a multiple of the stride, two channels
        (500, 1, 64, 16, (32, 32)),  # the convolution's own padding: one pad op
        (97, 3, 24, 8, (5, 0)),  # padding before only, the end cropped
    ],
)
def test_wide_strided_1d_kernel_is_folded_into_one_convolution(
    width, channels, kernel, stride, pads
) -> None:
    """An STFT front end (silero-vad: 258 filters of 256 taps at stride 128): the stride
    folded into the channels gives one convolution of ceil(k / s) taps, not pieces summed."""
    feeds = {"x": _rand(1, channels, width)}
    w, b = _rand(10, channels, kernel), _rand(10)
    model = _model("Conv", feeds, 3, consts={"w": w, "b": b}, strides=[stride], pads=list(pads))
    _check(model, feeds)
    graph = compile_model(model, "m4").graph
    mains = [n.attrs["main"] for n in graph.nodes]
    (conv,) = [n for n in graph.nodes if n.attrs["main"] == "conv"]
    assert graph.values[conv.inputs[1]].shape == (10, channels * stride, 1, -(-kernel // stride))
    assert "add" not in mains


def test_torch_modules_match_torch() -> None:
    import torch

    from anekit.frontend.torch import from_torch

    nn = torch.nn
    torch.manual_seed(0)

    class Net(nn.Module):
        """ViT patchify, pixel shuffle, wav2vec2-style grouped positional conv, ConvTranspose1d."""

        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 16, 16, 16)
            self.pos = nn.Conv1d(16, 16, 32, padding=16, groups=4)
            self.up = nn.ConvTranspose1d(16, 8, 4, 2, 1)

        def forward(self, x):
            p = self.patch(x)  # [1, 16, 2, 4]
            s = nn.functional.pixel_shuffle(p, 2)  # [1, 4, 4, 8]
            seq = p.flatten(2)  # [1, 16, 8]
            seq = seq + self.pos(seq)[:, :, :-1]
            return s, self.up(seq)

    net = Net().eval()
    x = torch.randn(1, 3, 32, 64)
    with torch.no_grad():
        expected = [t.numpy() for t in net(x)]
    graph = from_torch(net, (x,), ["x"])
    for chip in ("m1", "m4"):
        cm = compile_model(graph, chip)
        assert [r.node for r in cm.ops if r.placement == "cpu"] == [], chip
        got = list(cm.run({"x": x.numpy()}).values())
        for g, e in zip(got, expected, strict=True):
            assert rel_err(g, e) < EXACT_RTOL


def test_pooled_reshape_before_the_classifier_is_no_layer_of_its_own() -> None:
    """conv -> mean over H, W (keepdims=False) -> Linear: 3 layers, the reshape folded."""
    x = _rand(1, 3, 8, 8)
    w, wl = _rand(8, 3, 3, 3), _rand(10, 8)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
        helper.make_node("Gemm", ["m", "wl"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wl, "wl")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _check(model, {"x": x})
    cm = compile_model(model, "m4")
    assert [n.attrs["main"] for n in cm.graph.nodes if n.op == "ane_layer"] == [
        "conv", "reduce_mean", "conv",
    ]  # fmt: skip


def test_swin_window_partition_through_rank_6_runs_on_the_engine() -> None:
    """[B, H, W, C] -> [B, H/w, w, W/w, w, C] -> windows: the rank-6 view and transpose
    reach the engine (rank <= 5) once unit and adjacent axes merge."""
    b, h, w, c, win = 2, 8, 8, 16, 4
    feeds = {"x": _rand(b, h, w, c)}
    consts = {
        "s6": np.array([b, h // win, win, w // win, win, c], np.int64),
        "s3": np.array([-1, win * win, c], np.int64),
    }
    nodes = [
        helper.make_node("Reshape", ["x", "s6"], ["r6"]),
        helper.make_node("Transpose", ["r6"], ["t6"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["t6", "s3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, h, w, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 3)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    _check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds)


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((0, 1), (2**62, 2**62), (1, 2), (2, 2)),  # Swin's patch merging, whole blocks
        ((1,), (7,), (2,), (3,)),  # a partial last block: padded to a whole one first
        ((0, 2), (5, 2**62), (0, 3), (1, 2)),  # a unit-step axis beside a stepped one
        ((-1,), (-9, ), (1,), (-2,)),  # reverse: no block form, the engine lacks it, so CPU
    ],
)  # fmt: skip
def test_strided_slice_on_a_chip_without_one(starts, ends, axes, steps) -> None:
    """M1 has no strided slice: whole step-blocks, a reshape and a width-1 slice instead
    (M4 keeps the slice). Checked against onnxruntime on the reference backend and, in fp16,
    bit for bit against the input's own fp16 values on the simulator."""
    feeds = {"x": _rand(3, 8, 7, 6)}
    consts = {k: np.array(v, np.int64) for k, v in zip(("starts", "ends", "axes", "steps"), (starts, ends, axes, steps), strict=True)}  # fmt: skip
    model = _model("Slice", feeds, 4, consts=consts)
    if min(steps) < 0:
        cm = compile_model(model, "m1")
        assert [r.op for r in cm.ops if r.placement == "cpu"] == ["slice"]
        return
    _check(model, feeds)
    assert "slice" in [r.op for r in compile_model(model, "m4").ops]
    cm = compile_model(model, "m1")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x16 = feeds["x"].astype(np.float16).astype(np.float32)
    (want,) = session.run(None, {"x": x16})
    (got,) = cm.run({"x": x16}, "sim").values()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "mode, nearest, factors",
    [("asymmetric", "floor", (2, 2)), ("half_pixel", "round_prefer_floor", (2, 3)),
     ("pytorch_half_pixel", "round_prefer_ceil", (3, 1)), ("align_corners", "round_prefer_floor", (2, 2)),
     ("asymmetric", "ceil", (2, 2))],
)  # fmt: skip
def test_nearest_upsample_on_a_chip_without_resize(mode, nearest, factors) -> None:
    """M1 has no resize: a whole-factor nearest upsample is a transposed convolution with
    all-ones depthwise weights, when the coordinate mode makes each output block copy one
    pixel (checked by running the op's own kernel: align_corners on 4x3 -> 8x6 does);
    asymmetric with ceil rounding does not (it shifts by one), and stays on the CPU."""
    feeds = {"x": _rand(1, 5, 4, 3)}
    scales = np.array([1, 1, *factors], np.float32)
    model = _model("Resize", feeds, 4, consts={"roi": np.zeros(0, np.float32), "scales": scales},
                   mode="nearest", coordinate_transformation_mode=mode, nearest_mode=nearest)  # fmt: skip
    if nearest == "ceil":
        cm = compile_model(model, "m1")
        assert [r.op for r in cm.ops if r.placement == "cpu"] == ["resize"]
        return
    _check(model, feeds)
    cm = compile_model(model, "m1")
    assert "conv_transpose" in {n.attrs.get("main") for n in cm.graph.nodes}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x16 = feeds["x"].astype(np.float16).astype(np.float32)
    (want,) = session.run(None, {"x": x16})
    (got,) = cm.run({"x": x16}, "sim").values()
    np.testing.assert_array_equal(got, want)  # copies: exact in fp16


@pytest.mark.parametrize(
    "mode, factors, shape",
    [("half_pixel", (2, 2), (1, 3, 5, 4)), ("pytorch_half_pixel", (2, 3), (1, 2, 4, 6)),
     ("half_pixel", (4, 4), (1, 2, 3, 3)), ("align_corners", (2, 2), (1, 2, 4, 4)),
     ("asymmetric", (2, 2), (1, 2, 4, 4))],
)  # fmt: skip
def test_bilinear_upsample_on_a_chip_without_resize(mode, factors, shape) -> None:
    """M1 has no resize: a half-pixel bilinear upsample by whole factors is edge copies, a
    depthwise transposed convolution with tent taps and a crop (the crop found by comparing
    with the op's own kernel); aligned corners and asymmetric coordinates have no such form
    and stay on the CPU."""
    feeds = {"x": _rand(*shape)}
    scales = np.array([1, 1, *factors], np.float32)
    model = _model("Resize", feeds, 4, consts={"roi": np.zeros(0, np.float32), "scales": scales},
                   mode="linear", coordinate_transformation_mode=mode)  # fmt: skip
    if mode in ("align_corners", "asymmetric"):
        cm = compile_model(model, "m1")
        assert [r.op for r in cm.ops if r.placement == "cpu"] == ["resize"]
        return
    _check(model, feeds)
    cm = compile_model(model, "m1")
    assert "conv_transpose" in {n.attrs.get("main") for n in cm.graph.nodes}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    (got,) = cm.run(feeds, "sim").values()
    assert rel_err(got, want) < 2e-3  # fp16 storage and products


def test_torch_bilinear_upsample_runs_on_the_m1_engine() -> None:
    """torch's F.interpolate(scale_factor=2, mode='bilinear') as an FPN/U-Net decoder uses it."""
    import torch
    import torch.nn.functional as F

    class Up(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)

    x = _rand(1, 8, 7, 5)
    graph = anekit.from_torch(Up(), (torch.tensor(x),), input_names=["x"])
    cm = compile_model(graph, "m1")
    assert [r.node for r in cm.ops if r.placement == "cpu"] == []
    want = Up()(torch.tensor(x)).numpy()
    assert rel_err(next(iter(cm.run({"x": x}).values())), want) < EXACT_RTOL
