"""``_native.run_steps``: the simulator's run loop for its common steps, in C.

A program run with it must give the Python loop's bits (the same kernels, the same rounding),
and every case the C loop does not finish itself (no spec, a kernel's exception, a result
that needs the Python checks or the exact conversion, an operand the Python loop gathers)
must come back to the Python loop at that step, with nothing of the step done twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from anekit.formats import mil
from anekit.simulator import SimProgram, fp16
from anekit.simulator.execute import RUN_ARGS

native = fp16._native
pytestmark = pytest.mark.skipif(
    native is None or not hasattr(native, "run_steps"), reason="no C extension here"
)
F32 = np.dtype(np.float32)


class _WithoutRunSteps:
    """The C module as the Python loop sees it where it has no run_steps."""

    def __getattr__(self, name: str) -> Any:
        if name == "run_steps":
            raise AttributeError(name)
        return getattr(native, name)


def _program() -> SimProgram:
    """Steps of each kind the loop meets: views needing rounding (a reshape of a product),
    results past fp16's range (exp), an elementwise step given a large transposed operand
    (gathered by the Python loop), a multi-input op (concat, its values spread out), values freed."""
    t = mil.MilTensorType
    x, big = t("fp16", (64, 128)), t("fp16", (128, 64))
    ops = (
        mil.const("w", np.linspace(-2, 2, 128 * 8, dtype=np.float16).reshape(128, 8)),
        mil.const("perm", np.array([1, 0], np.int32)),
        mil.const("shape", np.array([8, 64], np.int32)),
        mil.operation("exp", ("e", x), {"x": "x"}),
        mil.operation("transpose", ("xt", big), {"x": "x", "perm": "perm"}),
        mil.operation("add", ("s", big), {"x": "xt", "y": "b"}),
        mil.operation("matmul", ("m", t("fp16", (64, 8))), {"x": "x", "y": "w"}),
        mil.operation("reshape", ("r", t("fp16", (8, 64))), {"x": "m", "shape": "shape"}),
        mil.operation("sigmoid", ("g", t("fp16", (8, 64))), {"x": "r"}),
        mil.operation(
            "concat",
            ("c", t("fp16", (16, 64))),
            {"values": ("g", "r"), "axis": 0, "interleave": False},
        ),  # fmt: skip
        mil.operation("mul", ("y", x), {"x": "e", "y": "x"}),
    )
    binds = (mil.Binding("x", x), mil.Binding("b", big))
    function = mil.Function("main", "ios18", binds, ops, ("y", "s", "c"))
    return SimProgram(mil.MilProgram("1.3", (), (function,)))


def test_a_run_in_c_gives_the_python_loops_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    prog = _program()
    in_c_steps = [s.op for s, spec in zip(prog._plan.steps, prog._specs, strict=True) if spec]
    assert in_c_steps == [
        "exp",
        "transpose",
        "matmul",
        "reshape",
        "sigmoid",
        "concat",
    ]  # fused: Python's
    feeds = [
        {"x": rng.standard_normal((64, 128)) * scale, "b": rng.standard_normal((128, 64))}
        for scale in (0.1, 3.0, 12.0)  # exp of 12: past 65504, infinities
    ]
    feeds[2]["x"][0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    in_c = [prog.run(f, fp32_outputs=True) for f in feeds]
    monkeypatch.setattr(fp16, "_native", _WithoutRunSteps())
    in_python = [prog.run(f, fp32_outputs=True) for f in feeds]
    assert np.isinf(in_c[2]["y"]).any() and np.isnan(in_c[2]["y"]).any()
    for a, b in zip(in_c, in_python, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype == np.float32
            np.testing.assert_array_equal(a[name].view(np.uint32), b[name].view(np.uint32))


def _spec(kernel: Any, slots: tuple, values: tuple, slot: int, shape: tuple, *,
          rounds: bool = True, frees: tuple = (), gather: int = 0) -> tuple:  # fmt: skip
    return (kernel, slots, values, slot, F32, shape, rounds, frees, gather)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def test_run_steps_rounds_stores_and_frees() -> None:
    x = _frozen(np.array([1 / 3, 0.1, -0.0, 2.0], np.float32))
    env: list[Any] = [x, None, None]
    specs = (
        _spec(lambda a, k: a * k, (0, -1), (None, np.float32(3)), 1, (4,)),
        _spec(lambda a: a + np.float32(1), (1,), (None,), 2, (4,), rounds=False, frees=(0, 1)),
    )
    assert native.run_steps(specs, env, 0, np.ndarray) == (2, None, None)
    assert env[0] is None and env[1] is None
    want = (x * np.float32(3)).astype(np.float16).astype(np.float32) + np.float32(1)
    np.testing.assert_array_equal(env[2].view(np.uint32), want.view(np.uint32))
    assert not env[2].flags.writeable


@pytest.mark.parametrize(
    "kernel, why",
    [
        (lambda a: a * np.float32(70000), "past fp16's range: the exact conversion"),
        (lambda a: a.reshape(2, 2), "the declared shape is not the result's"),
        (lambda a: a.astype(np.float64), "another dtype"),
        (lambda a: a, "read-only (an input): rounded as a copy"),
        (lambda a: a.tolist(), "not an ndarray"),
        (lambda a: np.repeat(a, 2)[::2], "strided: rounded as a copy"),
    ],
)
def test_run_steps_hands_back_a_result_the_python_loop_must_check(kernel: Any, why: str) -> None:
    x = _frozen(np.array([1 / 3, 1.0, 2.0, 3.0], np.float32))
    env: list[Any] = [x, None]
    index, result, exc = native.run_steps((_spec(kernel, (0,), (None,), 1, (4,)),), env, 0,
                                          np.ndarray)  # fmt: skip
    assert (index, exc) == (0, None), why
    assert result is not None and env[1] is None  # not stored: the Python loop finishes it
    assert env[0] is x


def test_run_steps_stops_at_a_python_step_and_at_a_gathered_operand() -> None:
    calls: list[int] = []
    strided = _frozen(np.zeros((80, 80), np.float32)).T

    def kernel(a: Any) -> np.ndarray:
        calls.append(1)
        return np.zeros(4, np.float32)

    env: list[Any] = [strided, None]
    spec = _spec(kernel, (0,), (None,), 1, (4,), gather=4096)
    assert native.run_steps((None, spec), env, 0, np.ndarray) == (0, None, None)
    assert native.run_steps((None, spec), env, 1, np.ndarray) == (1, None, None)
    assert not calls  # a large transposed operand: the Python loop gathers it first
    small = _spec(kernel, (0,), (None,), 1, (4,), gather=10**6)
    assert native.run_steps((small,), env, 0, np.ndarray) == (1, None, None)
    assert calls == [1]


def test_run_steps_hands_back_a_kernels_exception() -> None:
    def kernel(a: Any) -> Any:
        raise ValueError("indices out of range")

    env: list[Any] = [np.zeros(4, np.float32), None]
    index, result, exc = native.run_steps((_spec(kernel, (0,), (None,), 1, (4,)),), env, 0,
                                          np.ndarray)  # fmt: skip
    assert index == 0 and result is None
    assert isinstance(exc, ValueError) and str(exc) == "indices out of range"
    assert exc.__traceback__ is not None


def test_run_steps_takes_as_many_arguments_as_the_specs_give_it() -> None:
    """RUN_ARGS (execute.py) is the C loop's limit: a spec with that many runs, one more is
    refused (program.py never builds one)."""
    env: list[Any] = [np.ones(4, np.float32), None]

    def total(*values: np.ndarray) -> np.ndarray:
        return np.sum(values, axis=0, dtype=np.float32)

    most = _spec(total, (0,) * RUN_ARGS, (None,) * RUN_ARGS, 1, (4,))
    assert native.run_steps((most,), env, 0, np.ndarray) == (1, None, None)
    np.testing.assert_array_equal(env[1], np.full(4, RUN_ARGS, np.float32))
    over = _spec(total, (0,) * (RUN_ARGS + 1), (None,) * (RUN_ARGS + 1), 1, (4,))
    with pytest.raises(TypeError, match="malformed"):
        native.run_steps((over,), env, 0, np.ndarray)


def test_run_steps_refuses_malformed_specs() -> None:
    env: list[Any] = [np.zeros(4, np.float32), None]
    with pytest.raises(TypeError, match="9-tuple"):
        native.run_steps(((abs, (0,)),), env, 0, np.ndarray)
    with pytest.raises(IndexError, match="a slot outside env"):
        native.run_steps((_spec(abs, (5,), (None,), 1, (4,)),), env, 0, np.ndarray)
    with pytest.raises(IndexError, match="a slot outside env"):
        native.run_steps((_spec(abs, (0,), (None,), 1, (4,), frees=(9,)),), env, 0, np.ndarray)
