"""Written-out norms, softmaxes, GELUs and attention are recognised and lowered fp16-safe.

Each case is written as exporters write it: a torch module spelled out by hand, exported by
torch.onnx.export, or an ONNX graph built node by node. For m1 and m4: the compiled engine
graph in fp32 equals onnxruntime's output (exact up to fp32 rounding), and the fp16
simulator stays within fp16 tolerance at input std 1, 100 and 1000 (plus an offset of
std / 2, as in a residual stream), where the written-out ops themselves overflow fp16
(a square past 65504 once |x| > 256) or lose the variance to cancellation.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from anekit import targets
from anekit.compiler import compile as compile_model
from anekit.frontend.onnx import from_onnx
from anekit.passes.context import PassContext
from anekit.passes.decompose import GELU_TANH_MAX_ABS_ERROR
from anekit.passes.pipeline import DEFAULT_PIPELINE, run_pipeline, stamp_origins
from tests.passes.support import EXACT_RTOL, rel_err

CHIPS = ("m1", "m4")
STDS = (1.0, 100.0, 1000.0)
D = 512
TOLERANCE = 8 * 2.0**-11  # as tests/passes/test_fp16_safe_norms.py: ~10 rounded fp16 steps


def _affine(d: int) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    g = torch.Generator().manual_seed(d)
    return (
        torch.nn.Parameter(torch.rand(d, generator=g) + 0.5),
        torch.nn.Parameter(torch.randn(d, generator=g)),
    )


class LayerNormMoments(torch.nn.Module):
    """var = E[x^2] - E[x]^2 (BERT ports, many hand-written LayerNorms)."""

    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = _affine(D)

    def forward(self, x):
        m = x.mean(-1, keepdim=True)
        v = (x * x).mean(-1, keepdim=True) - m * m
        return (x - m) / torch.sqrt(v + 1e-5) * self.w + self.b


class LayerNormDeviations(LayerNormMoments):
    """var = mean((x - mean)^2), as the TF-style LayerNorm of many ports."""

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.w * ((x - u) / torch.sqrt(s + 1e-12)) + self.b


class LayerNormRsqrt(LayerNormMoments):
    def forward(self, x):
        d = x - x.mean(-1, keepdim=True)
        return d * torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-6) * self.w


class RMSNorm(LayerNormMoments):
    """LLaMA's RMSNorm."""

    def forward(self, x):
        return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class GroupNorm(torch.nn.Module):
    """GroupNorm written out over (N, groups, C/groups * H * W)."""

    def __init__(self, c: int = 32, groups: int = 4) -> None:
        super().__init__()
        self.groups = groups
        w, b = _affine(c)
        self.register_buffer("w", w.detach().reshape(1, c, 1, 1))
        self.register_buffer("b", b.detach().reshape(1, c, 1, 1))

    def forward(self, x):
        n, c, h, w = x.shape
        g = x.reshape(n, self.groups, -1)
        m = g.mean(-1, keepdim=True)
        v = ((g - m) ** 2).mean(-1, keepdim=True)
        return ((g - m) / torch.sqrt(v + 1e-5)).reshape(n, c, h, w) * self.w + self.b


class InstanceNorm(GroupNorm):
    def forward(self, x):
        m = x.mean((2, 3), keepdim=True)
        v = (x * x).mean((2, 3), keepdim=True) - m * m
        return (x - m) / torch.sqrt(v + 1e-5) * self.w + self.b


class Softmax(torch.nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(-1, keepdim=True).values)
        return e / e.sum(-1, keepdim=True)


class LogSoftmax(torch.nn.Module):
    def forward(self, x):
        s = x - x.max(-1, keepdim=True).values
        return s - torch.log(torch.exp(s).sum(-1, keepdim=True))


class LogOfSoftmax(torch.nn.Module):
    def forward(self, x):
        return torch.log(torch.softmax(x, -1))


class GeluErf(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class GeluTanh(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


class Attention(torch.nn.Module):
    """Pre-norm self-attention as a hand-written block: a (written-out) LayerNorm, q/k/v
    projections, q k^T / sqrt(d) + additive mask, softmax, times v."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.heads = torch.nn.Linear(d, 3 * d), heads
        mask = torch.triu(torch.full((16, 16), -1e4), 1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, n, d = x.shape
        m = x.mean(-1, keepdim=True)
        x = (x - m) / torch.sqrt(((x - m) ** 2).mean(-1, keepdim=True) + 1e-5)
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads) + self.mask
        return torch.softmax(scores, -1) @ v


# name -> (module, input shape, the op it must be raised to, fp32 tolerance against onnxruntime)
TORCH_CASES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...], str, float]] = {
    "layer_norm_moments": (LayerNormMoments, (1, 4, D), "layer_norm", EXACT_RTOL),
    "layer_norm_deviations": (LayerNormDeviations, (1, 4, D), "layer_norm", EXACT_RTOL),
    "layer_norm_rsqrt": (LayerNormRsqrt, (1, 4, D), "layer_norm", EXACT_RTOL),
    "rms_norm": (RMSNorm, (1, 4, D), "rms_norm", EXACT_RTOL),
    "group_norm": (GroupNorm, (1, 32, 6, 6), "layer_norm", EXACT_RTOL),
    "instance_norm": (InstanceNorm, (1, 32, 6, 6), "layer_norm", EXACT_RTOL),
    "softmax": (Softmax, (1, 4, D), "softmax", EXACT_RTOL),
    "log_softmax": (LogSoftmax, (1, 4, D), "log_softmax", EXACT_RTOL),
    "log_of_softmax": (LogOfSoftmax, (1, 4, D), "log_softmax", EXACT_RTOL),
    # decompose writes exact GELU in its tanh form (its bound, measured, in decompose)
    "gelu_erf": (GeluErf, (1, 4, D), "gelu", GELU_TANH_MAX_ABS_ERROR),
    "gelu_tanh": (GeluTanh, (1, 4, D), "gelu", EXACT_RTOL),
    "attention": (Attention, (1, 16, 64), "attention", EXACT_RTOL),
}


def _export(module: torch.nn.Module, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), (torch.zeros(shape),), buffer, input_names=["x"], dynamo=False
        )
    return buffer.getvalue()


def _inputs(shape: tuple[int, ...], std: float) -> np.ndarray:
    """Drawn on the fp16 grid (the simulator reads fp16), with an offset of std / 2."""
    x = np.random.default_rng(int(std)).standard_normal(shape) * std + std / 2
    return x.astype(np.float16).astype(np.float32)


def _raised(model: bytes, chip: str, op: str) -> bool:
    """Whether canonicalize and recognize leave ``op`` in the graph (written out before)."""
    graph = from_onnx(model)
    assert all(n.op != op for n in graph.nodes)
    ctx = PassContext(targets.get(chip))
    result = run_pipeline(stamp_origins(graph), ctx, ("canonicalize", "recognize"))
    return any(n.op == op for n in result.graph.nodes)


def _check(
    model: bytes, shape: tuple[int, ...], op: str, exact: float, stds=STDS, oracle=None
) -> None:
    """``oracle`` (float64) stands in for onnxruntime where the written-out fp32 ops
    themselves break (log(softmax) is -inf where the probability underflows fp32, and
    imprecise where it is subnormal): onnxruntime's elements above log(fp32's smallest
    normal) must still agree."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for chip in CHIPS:
        assert _raised(model, chip, op), f"{chip}: not recognised as {op}"
        cm = compile_model(model, chip)
        for std in stds:
            x = _inputs(shape, std)
            (want,) = session.run(None, {"x": x})
            (ref,) = cm.run({"x": x}).values()
            if oracle is not None:
                finite = want > np.log(np.finfo(np.float32).tiny)
                assert rel_err(ref[finite], want[finite]) < exact, (chip, std)
                want = oracle(x)
            assert rel_err(ref, want) < exact, (chip, std, rel_err(ref, want))
            (got,) = cm.run({"x": x}, "sim").values()
            assert np.isfinite(got).all(), f"{chip} std {std}: non-finite output"
            err = rel_err(got, want)
            assert err <= TOLERANCE, f"{chip} std {std}: relative error {err:.3g}"


@pytest.mark.parametrize("name", [n for n in TORCH_CASES if n != "attention"])
def test_written_out_torch_modules_are_fp16_safe(name: str) -> None:
    make, shape, op, exact = TORCH_CASES[name]
    oracle = None
    if name == "log_of_softmax":
        oracle = lambda x: torch.log_softmax(torch.from_numpy(x).double(), -1).numpy()  # noqa: E731
    _check(_export(make(), shape), shape, op, exact, oracle=oracle)


def test_written_out_attention_is_recognised() -> None:
    """Attention scores grow with the square of the input scale, so beyond the norm nothing
    keeps q k^T within fp16 at std 1000; the norm written in front of it does, at every std."""
    make, shape, op, exact = TORCH_CASES["attention"]
    _check(_export(make(), shape), shape, op, exact)


def _onnx_layer_norm(opset: int, moments: bool = False, c: int = D) -> bytes:
    """A LayerNorm as ONNX nodes: ReduceMean, x - mean, a variance (the mean of Pow(d, 2), or
    with ``moments`` E[x*x] - E[x]*E[x]), + eps, Sqrt, Div; in the opset 13 style (axes an
    attribute) or the opset 18 one (axes an input)."""
    consts = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
              numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]  # fmt: skip
    if opset >= 18:
        consts.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        mean = lambda i, o: helper.make_node("ReduceMean", [i, "axes"], [o])  # noqa: E731
    else:
        mean = lambda i, o: helper.make_node("ReduceMean", [i], [o], axes=[-1])  # noqa: E731
    nodes = [mean("x", "mean"), helper.make_node("Sub", ["x", "mean"], ["d"])]
    if moments:
        nodes += [
            helper.make_node("Mul", ["x", "x"], ["x2"]),
            mean("x2", "ex2"),
            helper.make_node("Mul", ["mean", "mean"], ["mean2"]),
            helper.make_node("Sub", ["ex2", "mean2"], ["var"]),
        ]
    else:
        nodes += [helper.make_node("Pow", ["d", "two"], ["d2"]), mean("d2", "var")]
    nodes += [
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "written_out_layer_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, c])],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize("moments", [False, True])
@pytest.mark.parametrize("opset", [13, 18])
def test_onnx_written_out_layer_norm_is_fp16_safe(opset: int, moments: bool) -> None:
    _check(_onnx_layer_norm(opset, moments), (1, 8, D), "layer_norm", EXACT_RTOL)


def test_minimal_form_gave_zeros_without_recognition() -> None:
    """The issue's minimal form: a LayerNorm over 512 channels written with E[x^2] - E[x]^2.
    Lowered op by op, its squares overflow fp16 and the simulator outputs all zeros (here at
    std 100); recognised, it matches onnxruntime."""
    model = _onnx_layer_norm(17, moments=True)
    x = np.random.default_rng(0).standard_normal((1, 8, D)).astype(np.float16) * 100
    x = x.astype(np.float32)
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    unrecognised = tuple(p for p in DEFAULT_PIPELINE if p != "recognize")
    for chip in CHIPS:
        (before,) = compile_model(model, chip, passes=unrecognised).run({"x": x}, "sim").values()
        assert not np.any(before), f"{chip}: the unrecognised form no longer fails"
        (after,) = compile_model(model, chip).run({"x": x}, "sim").values()
        assert rel_err(after, want) <= TOLERANCE, chip


def test_softmax_without_its_max_is_recognised() -> None:
    """exp(x) / sum(exp(x)) overflows past x = 11 in fp16 (and past 88 in fp32); raised to
    softmax it subtracts the max first."""

    class Naive(torch.nn.Module):
        def forward(self, x):
            e = torch.exp(x)
            return e / e.sum(-1, keepdim=True)

    shape = (1, 4, 64)
    _check(_export(Naive(), shape), shape, "softmax", EXACT_RTOL, stds=(1.0,))
    x = _inputs(shape, 100.0)
    want = torch.softmax(torch.from_numpy(x).double(), -1).numpy()
    for chip in CHIPS:
        (got,) = compile_model(_export(Naive(), shape), chip).run({"x": x}, "sim").values()
        assert rel_err(got, want) <= TOLERANCE, chip


def _jax2tf_layer_norm(trailing: bool, c: int = D, other: int = 8) -> bytes:
    """flax's LayerNorm as jax2tf writes it (magika's): means as ReduceSum (keepdims 0) times
    1/n, var = E[x*x] - E[x]^2 clamped by Max(0, var), reshaped back to the kept dims, + eps,
    Sqrt then Reciprocal, times gamma, times x - mean, + beta. ``trailing`` normalises the
    last axis of (1, other, c), else axis 1 of (1, c, other) (magika's first LayerNorm)."""
    shape = [1, other, c] if trailing else [1, c, other]
    axis, kept = (2, [1, other, 1]) if trailing else (1, [1, 1, other])
    affine = [1, 1, c] if trailing else [1, c, 1]
    g = np.random.default_rng(c)
    consts = [
        numpy_helper.from_array(np.array([axis], np.int64), "axes"),
        numpy_helper.from_array(np.array(1.0 / c, np.float32), "inv_n"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array(np.array(kept, np.int64), "kept"),
        numpy_helper.from_array((g.random(affine) + 0.5).astype(np.float32), "gamma"),
        numpy_helper.from_array(g.standard_normal(affine).astype(np.float32), "beta"),
    ]
    node = helper.make_node
    nodes = [
        node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
        node("Mul", ["x", "x"], ["square"]),
        node("ReduceSum", ["square", "axes"], ["sum_sq"], keepdims=0),
        node("Mul", ["sum_sq", "inv_n"], ["ex2"]),
        node("Mul", ["sum", "inv_n"], ["mean"]),
        node("Mul", ["mean", "mean"], ["mean2"]),
        node("Sub", ["ex2", "mean2"], ["var"]),
        node("Max", ["zero", "var"], ["clamped"]),
        node("Reshape", ["clamped", "kept"], ["var_kept"]),
        node("Add", ["var_kept", "eps"], ["var_eps"]),
        node("Sqrt", ["var_eps"], ["std"]),
        node("Reciprocal", ["std"], ["inv_std"]),
        node("Mul", ["inv_std", "gamma"], ["scale"]),
        node("Reshape", ["mean", "kept"], ["mean_kept"]),
        node("Sub", ["x", "mean_kept"], ["d"]),
        node("Mul", ["d", "scale"], ["scaled"]),
        node("Add", ["scaled", "beta"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "jax2tf_layer_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize("trailing", [True, False])
def test_jax2tf_layer_norm_is_fp16_safe(trailing: bool) -> None:
    """magika's form: unrecognised, the simulator's answer had cosine 0.004 against
    onnxruntime (E[x^2] overflowing fp16 before the subtraction)."""
    shape = (1, 8, D) if trailing else (1, D, 8)
    _check(_jax2tf_layer_norm(trailing), shape, "layer_norm", EXACT_RTOL)
