"""Test helpers: one MIL op as a program run on the simulator, and the oracles it is checked against.

- :func:`run_mil` builds ``main(inputs) { consts; y = OP(...) } -> (y...)`` in Apple's style
  (every constant a named ``const``), with output types taken from the expected arrays, and
  runs it on :class:`SimProgram`. ``dtype="fp16"`` makes every float input/output fp16.
- :func:`coreml` evaluates the same op with coremltools' own value inference (the numpy code
  that accompanies Apple's op definitions), on constant inputs.
- :func:`fp16_exact` is the correctly rounded fp16 result of a float64 formula: what an
  fp16-storage, wide-arithmetic op must produce for ``+ - * /`` and ``sqrt`` (fp32 has more
  than 2*11+2 bits, so rounding first to fp32 and then to fp16 is exact).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anekit.formats.mil import (
    Binding,
    Function,
    MilProgram,
    MilTensorType,
    ScalarType,
    const,
    operation,
)
from anekit.simulator import SimProgram

_MIL = {
    np.dtype(np.float32): "fp32",
    np.dtype(np.float16): "fp16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int16): "int16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.bool_): "bool",
}


def mil_dtype(array: np.ndarray, float_dtype: str) -> str:
    """float32 arrays take the program's float type; float16 arrays are always fp16."""
    if array.dtype == np.float16:
        return "fp16"
    return float_dtype if array.dtype.kind == "f" else _MIL[array.dtype]


def mil_type(array: np.ndarray, float_dtype: str) -> ScalarType | MilTensorType:
    dtype = mil_dtype(np.asarray(array), float_dtype)
    shape = np.shape(array)
    return ScalarType(dtype) if not shape else MilTensorType(dtype, shape)


def _const_value(value: Any, float_dtype: str) -> tuple[Any, str | None]:
    if isinstance(value, (bool, np.bool_)):
        return bool(value), "bool"
    if isinstance(value, str):
        return value, "string"
    if isinstance(value, int):
        return value, "int32"
    if isinstance(value, float):
        return value, float_dtype
    array = np.asarray(value)
    if array.dtype.kind == "f":
        return array, float_dtype
    return array, _MIL[array.dtype]


def build(
    op: str,
    inputs: Mapping[str, np.ndarray],
    consts: Mapping[str, Any],
    outputs: Sequence[np.ndarray],
    *,
    dtype: str = "fp32",
    opset: str = "ios18",
    const_dtypes: Mapping[str, str] | None = None,
) -> MilProgram:
    """A one-op program; tuple/list values in ``consts`` become ``(a, b, ...)`` arguments."""
    ops = []
    args: dict[str, Any] = {}
    fixed = const_dtypes or {}
    in_tuples: set[str] = set()
    for key, value in consts.items():
        if isinstance(value, (tuple, list)) and not isinstance(value, np.ndarray):
            names = []
            for i, item in enumerate(value):
                if isinstance(item, str) and item in inputs:
                    names.append(item)
                    in_tuples.add(item)
                    continue
                v, dt = _const_value(item, dtype)
                ops.append(const(f"{key}_{i}", v, fixed.get(key, dt)))
                names.append(f"{key}_{i}")
            args[key] = tuple(names)
            continue
        v, dt = _const_value(value, dtype)
        ops.append(const(f"c_{key}", v, fixed.get(key, dt)))
        args[key] = f"c_{key}"
    for key in inputs:
        if key not in in_tuples:
            args.setdefault(key, key)
    outs = [Binding(f"y{i}", mil_type(o, dtype)) for i, o in enumerate(outputs)]
    ops.append(operation(op, outs, args, name="y"))
    params = [Binding(k, mil_type(v, dtype)) for k, v in inputs.items()]
    f = Function("main", opset, tuple(params), tuple(ops), tuple(b.name for b in outs))
    return MilProgram("1.3", (("coremlc-version", "3520.5.1"),), (f,))


def run_mil(
    op: str,
    inputs: Mapping[str, np.ndarray],
    consts: Mapping[str, Any],
    expected: Sequence[np.ndarray] | np.ndarray,
    *,
    dtype: str = "fp32",
    opset: str = "ios18",
    const_dtypes: Mapping[str, str] | None = None,
) -> list[np.ndarray]:
    """Run ``op`` on the simulator; outputs are typed like ``expected`` (shapes and dtypes)."""
    outs = [expected] if isinstance(expected, np.ndarray) else list(expected)
    program = build(op, inputs, consts, outs, dtype=dtype, opset=opset, const_dtypes=const_dtypes)
    result = SimProgram(program).run(dict(inputs))
    return [result[f"y{i}"] for i in range(len(outs))]


def coreml(op: str, **kwargs: Any) -> Any:
    """coremltools' value inference of ``op`` on constant inputs (iOS 18 definitions)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function as CtFunction

    def value(v: Any) -> np.ndarray:
        if v.val is None:
            raise AssertionError(f"coremltools has no value inference for {op}")
        array = np.asarray(v.val)
        return array.astype(np.float32) if array.dtype == object else array

    with CtFunction({}, opset_version=ct.target.iOS18):
        result = getattr(mb, op)(**kwargs)
        if isinstance(result, (tuple, list)):
            return [value(r) for r in result]
        return value(result)


def fp16_exact(values: np.ndarray) -> np.ndarray:
    """float64 values correctly rounded to fp16."""
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(np.float16)


def ulp16(values: np.ndarray) -> np.ndarray:
    """The spacing of fp16 numbers at each value (2**-24 for subnormals)."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    exponent = np.floor(np.log2(np.maximum(a, 2.0**-14)))
    return 2.0 ** (exponent - 10)


def assert_fp16_within(actual: np.ndarray, reference: np.ndarray, ulps: float) -> None:
    """Every fp16 result within ``ulps`` fp16 units of a float64 reference (same specials)."""
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    assert a.shape == r.shape, (a.shape, r.shape)
    finite = np.isfinite(r)
    np.testing.assert_array_equal(a[~finite], fp16_exact(r[~finite]).astype(np.float64))
    error = np.abs(a[finite] - r[finite]) / ulp16(r[finite])
    assert error.size == 0 or error.max() <= ulps, f"max error {error.max():.3g} fp16 ulps"
