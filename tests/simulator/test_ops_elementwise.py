"""Elementwise and activation kernels against three oracles.

1. Correct rounding: for ``+ - * /`` (and max, min, sqrt...) on fp16 values, an fp16 program
   must return exactly the float64 result rounded once to fp16 (fp32 arithmetic has enough
   bits that its extra rounding never changes the fp16 result).
2. onnxruntime on an equivalent one-node ONNX model, fed the same values (all exactly
   representable in fp16, as fp32). Tolerances: an fp32 program within a relative 4e-6 (plus
   2e-7 of the largest magnitude, for results near zero) of onnxruntime, whose vectorised
   exp, tanh, sigmoid and erf are themselves accurate to about 1e-6; an fp16 program within
   1 fp16 ulp of onnxruntime's fp32 result (0.5 ulp from the final rounding, the rest for the
   fp32 differences that can move a value across a rounding boundary).
3. coremltools' value inference (Apple's numpy reference for each op) on the same inputs.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import pytest

from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import assert_fp16_within, coreml, fp16_exact, run_mil, ulp16

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _rng_per_test(request: pytest.FixtureRequest) -> None:
    """Each test draws from its own seeded stream, so its data never depends on which
    other tests ran before it in the same worker."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def fp16_values(shape: tuple[int, ...], low: float = -4.0, high: float = 4.0) -> np.ndarray:
    """float32 values that are exactly fp16 numbers."""
    return RNG.uniform(low, high, shape).astype(np.float16).astype(np.float32)


def assert_fp32_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 4e-6) -> None:
    a, e = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert a.shape == e.shape
    np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
    fin = np.isfinite(e)
    np.testing.assert_array_equal(a[~fin & ~np.isnan(e)], e[~fin & ~np.isnan(e)])
    scale = float(np.abs(e[fin]).max(initial=0.0))
    np.testing.assert_allclose(a[fin], e[fin], rtol=rtol, atol=2e-7 * scale)


# --- binary arithmetic: exact fp16 rounding -------------------------------------------------

EXACT_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "real_div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@pytest.mark.parametrize("op", sorted(EXACT_BINARY))
def test_binary_fp16_is_correctly_rounded(op: str) -> None:
    x = fp16_values((3, 1, 5), -300, 300)
    y = fp16_values((4, 1), 0.5, 60) * RNG.choice([-1, 1], (4, 1)).astype(np.float32)
    expected = fp16_exact(EXACT_BINARY[op](x.astype(np.float64), y.astype(np.float64)))
    (got,) = run_mil(op, {"x": x, "y": y}, {}, expected, dtype="fp16")
    assert got.dtype == np.float16 and got.shape == (3, 4, 5)
    np.testing.assert_array_equal(got, expected)


def test_binary_fp16_overflows_to_infinity() -> None:
    x = np.array([60000, -60000, 300, 63, 65504], np.float32)
    y = np.array([2, 2, 300, 1040, 1], np.float32)
    (got,) = run_mil("mul", {"x": x}, {"y": y}, x, dtype="fp16")
    # 63 * 1040 = 65520 is the tie between 65504 and 65536 (which is infinity): to even, inf
    want = np.array([np.inf, -np.inf, np.inf, np.inf, 65504], np.float16)
    np.testing.assert_array_equal(got, want)


# --- onnxruntime -----------------------------------------------------------------------------

# mil op -> (onnx op, onnx attributes)
BINARY_ORT = {
    "add": ("Add", {}),
    "sub": ("Sub", {}),
    "mul": ("Mul", {}),
    "real_div": ("Div", {}),
    "pow": ("Pow", {}),
    "maximum": ("Max", {}),
    "minimum": ("Min", {}),
}


@pytest.mark.parametrize("op", sorted(BINARY_ORT))
def test_binary_against_onnxruntime(op: str) -> None:
    onnx_op, attrs = BINARY_ORT[op]
    x = fp16_values((2, 3, 4), 0.25, 4)
    y = fp16_values((3, 1), -2, 2)
    (ref,) = run_ort(onnx_op, [x, y], **attrs)
    (got32,) = run_mil(op, {"x": x, "y": y}, {}, ref)
    assert_fp32_close(got32, ref)
    (got16,) = run_mil(op, {"x": x, "y": y}, {}, ref, dtype="fp16")
    assert_fp16_within(got16, ref, 1)


UNARY_ORT: dict[str, tuple[str, dict[str, Any], tuple[float, float]]] = {
    "abs": ("Abs", {}, (-5, 5)),
    "acos": ("Acos", {}, (-1, 1)),
    "asin": ("Asin", {}, (-1, 1)),
    "atan": ("Atan", {}, (-8, 8)),
    "atanh": ("Atanh", {}, (-0.99, 0.99)),
    "ceil": ("Ceil", {}, (-5, 5)),
    "cos": ("Cos", {}, (-6, 6)),
    "cosh": ("Cosh", {}, (-5, 5)),
    "erf": ("Erf", {}, (-3, 3)),
    "exp": ("Exp", {}, (-8, 8)),
    "floor": ("Floor", {}, (-5, 5)),
    "round": ("Round", {}, (-5, 5)),
    "sign": ("Sign", {}, (-2, 2)),
    "sin": ("Sin", {}, (-6, 6)),
    "sinh": ("Sinh", {}, (-5, 5)),
    "sqrt": ("Sqrt", {}, (0, 50)),
    "tan": ("Tan", {}, (-1.5, 1.5)),
    "tanh": ("Tanh", {}, (-4, 4)),
    "relu": ("Relu", {}, (-4, 4)),
    "sigmoid": ("Sigmoid", {}, (-8, 8)),
    "softplus": ("Softplus", {}, (-8, 8)),
    "softsign": ("Softsign", {}, (-8, 8)),
}


@pytest.mark.parametrize("op", sorted(UNARY_ORT))
def test_unary_against_onnxruntime(op: str) -> None:
    onnx_op, attrs, (low, high) = UNARY_ORT[op]
    x = fp16_values((4, 64), low, high)
    if op == "round":
        x[0, :4] = [0.5, 1.5, 2.5, -0.5]  # half to even, as the definition says
    (ref,) = run_ort(onnx_op, [x], **attrs)
    (got32,) = run_mil(op, {"x": x}, {}, ref)
    assert_fp32_close(got32, ref)
    (got16,) = run_mil(op, {"x": x}, {}, ref, dtype="fp16")
    assert_fp16_within(got16, ref, 1)


# mil op, mil consts, onnx op, onnx attrs, input range; constants are fp16 numbers so that
# fp16 programs compute with the same parameters as onnxruntime
ACTIVATIONS_ORT = [
    ("elu", {"alpha": 0.75}, "Elu", {"alpha": 0.75}, (-4, 4)),
    ("leaky_relu", {"alpha": 0.125}, "LeakyRelu", {"alpha": 0.125}, (-4, 4)),
    ("thresholded_relu", {"alpha": 0.5}, "ThresholdedRelu", {"alpha": 0.5}, (-2, 2)),
    ("sigmoid_hard", {"alpha": 0.25, "beta": 0.5}, "HardSigmoid", {"alpha": 0.25, "beta": 0.5},
     (-5, 5)),
    ("clip", {"alpha": -1.0, "beta": 2.0}, "Clip", None, (-4, 4)),
    # gelu's outputs for negative x are tiny differences (1 + erf, 1 + tanh) that
    # onnxruntime computes with an fp32 cancellation error of more than an fp16 ulp: its fp32
    # result is checked here, the fp16 result against a float64 formula below
    ("gelu", {"mode": "EXACT"}, "Gelu", {}, (-4, 4)),
    ("gelu", {"mode": "TANH_APPROXIMATION"}, "Gelu", {"approximate": "tanh"}, (-4, 4)),
    ("softmax", {"axis": 1}, "Softmax", {"axis": 1}, (-6, 6)),
    ("softmax", {}, "Softmax", {"axis": -1}, (-6, 6)),
    ("silu", {}, "HardSwish", None, (-4, 4)),
]  # fmt: skip


@pytest.mark.parametrize("case", ACTIVATIONS_ORT, ids=lambda c: f"{c[0]}-{c[2]}")
def test_activations_against_onnxruntime(case: tuple) -> None:
    op, consts, onnx_op, attrs, (low, high) = case
    x = fp16_values((3, 5, 7), low, high)
    if op == "clip":
        (ref,) = run_ort("Clip", [x, np.array(-1, np.float32), np.array(2, np.float32)])
    elif op == "silu":  # no one-node ONNX silu: x * Sigmoid(x)
        ref = x * run_ort("Sigmoid", [x])[0]
    else:
        (ref,) = run_ort(onnx_op, [x], opset=22 if onnx_op != "Gelu" else 20, **attrs)
    (got32,) = run_mil(op, {"x": x}, consts, ref)
    assert_fp32_close(got32, ref)
    if op != "gelu":
        (got16,) = run_mil(op, {"x": x}, consts, ref, dtype="fp16")
        assert_fp16_within(got16, ref, 1)


def test_prelu_against_onnxruntime() -> None:
    x = fp16_values((2, 4, 3, 3))
    alpha = np.array([0.125, -0.5, 2.0, 0.0], np.float32)
    (ref,) = run_ort("PRelu", [x, alpha.reshape(4, 1, 1)])
    (got,) = run_mil("prelu", {"x": x}, {"alpha": alpha}, ref, dtype="fp16")
    assert_fp16_within(got, ref, 0.5)


COMPARE = {
    "equal": "Equal",
    "greater": "Greater",
    "greater_equal": "GreaterOrEqual",
    "less": "Less",
    "less_equal": "LessOrEqual",
}


@pytest.mark.parametrize("op", sorted(COMPARE) + ["not_equal"])
@pytest.mark.parametrize("dtype", ["fp32", "int32"])
def test_comparisons(op: str, dtype: str) -> None:
    x = RNG.integers(-3, 4, (4, 5))
    y = RNG.integers(-3, 4, (1, 5))
    if dtype == "fp32":
        x, y = x.astype(np.float32), y.astype(np.float32)
    else:
        x, y = x.astype(np.int32), y.astype(np.int32)
    if op == "not_equal":
        ref = ~run_ort("Equal", [x, y])[0]
    else:
        (ref,) = run_ort(COMPARE[op], [x, y])
    (got,) = run_mil(op, {"x": x, "y": y}, {}, ref)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor", "logical_not"])
def test_logical(op: str) -> None:
    x = RNG.random((3, 4)) < 0.5
    y = RNG.random((1, 4)) < 0.5
    if op == "logical_not":
        (ref,) = run_ort("Not", [x])
        inputs = {"x": x}
    else:
        (ref,) = run_ort({"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}[op],
                         [x, y])  # fmt: skip
        inputs = {"x": x, "y": y}
    (got,) = run_mil(op, inputs, {}, ref)
    np.testing.assert_array_equal(got, ref)


# --- coremltools value inference --------------------------------------------------------------

INT_BINARY = ["add", "sub", "mul", "real_div", "floor_div", "mod", "maximum", "minimum", "pow"]


@pytest.mark.parametrize("op", INT_BINARY)
def test_int32_binary_against_coremltools(op: str) -> None:
    x = RNG.integers(-20, 20, (3, 4)).astype(np.int32)
    y = RNG.integers(1, 5, (1, 4)).astype(np.int32) * np.array([1, -1, 1, -1], np.int32)
    if op == "pow":
        y = np.abs(y)
    ref = coreml(op, x=x, y=y).astype(np.int32)
    if op == "real_div":  # Core ML truncates (coremltools' backend test expects x / y as int)
        ref = np.trunc(x / y).astype(np.int32)
    (got,) = run_mil(op, {"x": x, "y": y}, {}, ref)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["floor_div", "mod", "pow"])
def test_float_binary_against_coremltools(op: str) -> None:
    x = fp16_values((3, 4), 0.5, 9) * np.array([1, -1, 1, -1], np.float32)
    y = fp16_values((1, 4), 0.5, 3) * np.array([1, 1, -1, -1], np.float32)
    if op == "pow":
        x = np.abs(x)
    ref = coreml(op, x=x, y=y)
    (got32,) = run_mil(op, {"x": x, "y": y}, {}, ref.astype(np.float32))
    assert_fp32_close(got32, ref.astype(np.float32))
    (got16,) = run_mil(op, {"x": x, "y": y}, {}, ref.astype(np.float32), dtype="fp16")
    assert_fp16_within(got16, ref, 1)


EPSILON_OPS = {"inverse": (0.5, 4), "log": (0.1, 9), "rsqrt": (0.1, 9)}


@pytest.mark.parametrize("op", sorted(EPSILON_OPS))
@pytest.mark.parametrize("epsilon", [None, 0.25])
def test_epsilon_ops_against_coremltools(op: str, epsilon: float | None) -> None:
    x = fp16_values((5, 6), *EPSILON_OPS[op])
    consts = {} if epsilon is None else {"epsilon": epsilon}
    ref = coreml(op, x=x, **consts)  # default epsilon: 1e-4 / 1e-45 / 1e-12 as fp32
    (got32,) = run_mil(op, {"x": x}, consts, ref.astype(np.float32))
    assert_fp32_close(got32, ref)
    # the fp16 default epsilon is the default rounded to fp16 (1e-45 and 1e-12 become 0)
    ref16 = coreml(op, x=x.astype(np.float16), **({} if epsilon is None else
                   {"epsilon": np.float16(epsilon)})).astype(np.float64)  # fmt: skip
    x64 = x.astype(np.float64)
    eps16 = float(np.float16({"inverse": 1e-4, "log": 1e-45, "rsqrt": 1e-12}[op]
                             if epsilon is None else epsilon))  # fmt: skip
    fn = {"inverse": lambda v: 1 / v, "log": np.log, "rsqrt": lambda v: 1 / np.sqrt(v)}[op]
    wide = fn(x64 + eps16)
    (got16,) = run_mil(op, {"x": x}, consts, ref16.astype(np.float32), dtype="fp16")
    assert_fp16_within(got16, wide, 1)
    # coremltools' fp16 value inference rounds x + epsilon to fp16 before the op, which
    # moves its result by |f(x + eps) - f(fp16(x + eps))|, and rounds once more inside
    # rsqrt (sqrt, then the reciprocal). Beyond that shift: ours rounds once (half an ulp),
    # theirs at most twice (one ulp), so the two agree within 2 ulps. The exact check above
    # is the strict one.
    shift = np.abs(wide - fn((x64 + eps16).astype(np.float16).astype(np.float64)))
    error = np.abs(got16.astype(np.float64) - ref16) - shift
    assert (error <= 2 * ulp16(ref16)).all(), (
        f"max excess {np.max(error / ulp16(ref16)):.3g} fp16 ulps"
    )


ALPHA_BETA = {
    "clamped_relu": {"alpha": 0.5, "beta": 2.0},
    "linear_activation": {"alpha": 1.5, "beta": -0.25},
    "scaled_tanh": {"alpha": 2.0, "beta": 0.5},
    "relu6": {},
    "threshold": {"alpha": 0.5},
    "square": {},
    "exp2": {},
}


@pytest.mark.parametrize("op", sorted(ALPHA_BETA))
def test_activations_against_coremltools(op: str) -> None:
    x = fp16_values((4, 9), -8, 8)
    ref = coreml(op, x=x, **ALPHA_BETA[op]).astype(np.float64)
    (got32,) = run_mil(op, {"x": x}, ALPHA_BETA[op], ref.astype(np.float32))
    assert_fp32_close(got32, ref.astype(np.float32))
    (got16,) = run_mil(op, {"x": x}, ALPHA_BETA[op], ref.astype(np.float32), dtype="fp16")
    assert_fp16_within(got16, ref, 1)


def test_softplus_parametric_against_coremltools() -> None:
    x = fp16_values((2, 3, 4, 5))
    alpha = np.array([1.0, 0.5, 2.0], np.float32)
    beta = np.array([1.0, 2.0, 0.5], np.float32)
    ref = coreml("softplus_parametric", x=x, alpha=alpha, beta=beta)
    (got,) = run_mil("softplus_parametric", {"x": x}, {"alpha": alpha, "beta": beta},
                     ref.astype(np.float32), dtype="fp16")  # fmt: skip
    assert_fp16_within(got, ref, 1)


GELU64 = {  # the definition's formulas, in float64
    "EXACT": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2))),
    "TANH_APPROXIMATION": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                                           (x + 0.044715 * x**3))),
    "SIGMOID_APPROXIMATION": lambda x: x / (1 + np.exp(-1.702 * x)),
}  # fmt: skip


@pytest.mark.parametrize("mode", sorted(GELU64))
def test_gelu_modes_against_coremltools(mode: str) -> None:
    x = fp16_values((6, 8), -6, 5)
    ref = coreml("gelu", x=x, mode=mode)
    (got32,) = run_mil("gelu", {"x": x}, {"mode": mode}, ref.astype(np.float32))
    assert_fp32_close(got32, ref)
    (got,) = run_mil("gelu", {"x": x}, {"mode": mode}, ref.astype(np.float32), dtype="fp16")
    assert_fp16_within(got, GELU64[mode](x.astype(np.float64)), 1)


def test_int32_unary_and_select() -> None:
    x = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    for op, fn in (("abs", np.abs), ("sign", np.sign), ("square", np.square)):
        (got,) = run_mil(op, {"x": x}, {}, fn(x))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, fn(x))
    cond = x > 0
    (got,) = run_mil("select", {"cond": cond, "a": x}, {"b": np.int32(-1)}, np.where(cond, x, -1))
    np.testing.assert_array_equal(got, coreml("select", cond=cond, a=x, b=np.int32(-1)))
