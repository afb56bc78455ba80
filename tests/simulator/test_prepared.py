"""Kernels prepared at load for one input shape (simulator/prepared.py) give the general
kernels' bits: a program with static shapes runs them, and the same program with its
preparation switched off runs the general kernels on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.simulator import SimProgram, plan
from anekit.simulator.ops import REGISTRY

from .milops import build


def _both(op: str, inputs: dict, consts: dict, out_shape: tuple[int, ...],
          monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray, bool]:  # fmt: skip
    """(prepared result, general result, whether the step's kernel was prepared)."""
    program = build(op, inputs, consts, [np.zeros(out_shape, np.float32)], dtype="fp16")
    prepared = SimProgram(program)
    took = prepared._plan.steps[0].kernel is not REGISTRY[op].kernel
    with monkeypatch.context() as m:
        m.setattr(plan, "prepare_steps", lambda steps, shapes: list(steps))
        general = SimProgram(program)
    assert general._plan.steps[0].kernel is REGISTRY[op].kernel
    return prepared.run(inputs)["y0"], general.run(inputs)["y0"], took


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint16), b.view(np.uint16))


CONVS = [
    # x shape, weight shape, strides, dilations, groups, pad_type, pad
    ((1, 64, 1, 16), (32, 64, 1, 1), (1, 1), (1, 1), 1, "valid", None),  # 1x1
    ((2, 4, 9, 11), (6, 4, 3, 3), (1, 1), (1, 1), 1, "valid", None),
    ((1, 4, 9, 11), (6, 2, 3, 3), (2, 1), (1, 2), 2, "custom", (1, 2, 0, 3)),
    ((1, 6, 8, 70), (6, 1, 3, 3), (1, 1), (1, 1), 6, "same", None),  # depthwise, two tiles
    ((1, 3, 7, 10), (4, 3, 4, 2), (2, 3), (1, 1), 1, "same_lower", None),
    ((1, 1, 1, 399), (129, 1, 1, 15), (1, 128), (1, 1), 1, "custom", (0, 0, 0, 0)),  # STFT
    ((1, 16, 40, 1), (20, 16, 5, 1), (1, 1), (1, 1), 1, "valid", None),  # along H
    ((1, 3, 20), (5, 3, 4), (3,), (2,), 1, "custom", (2, 1)),  # 1-D
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("bias", [False, True])
def test_prepared_conv_gives_the_general_kernels_bits(
    case, bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    xs, ws, strides, dilations, groups, pad_type, pad = case
    rng = np.random.default_rng(len(xs) + ws[0])
    x = rng.standard_normal(xs).astype(np.float16)
    x.reshape(-1)[::7] = -0.0
    consts = {
        "weight": (rng.standard_normal(ws) * 0.3).astype(np.float16),
        "strides": np.array(strides, np.int32),
        "dilations": np.array(dilations, np.int32),
        "groups": np.int32(groups),
        "pad_type": pad_type,
        **({"pad": np.array(pad, np.int32)} if pad is not None else {}),
        **({"bias": rng.standard_normal(ws[0]).astype(np.float16)} if bias else {}),
    }
    from anekit.simulator.ops.conv import conv

    out = conv(x.astype(np.float32), **{k: np.asarray(v, np.float32) if k in ("weight", "bias")
                                        else v for k, v in consts.items()})  # fmt: skip
    got, want, took = _both("conv", {"x": x}, consts, out.shape, monkeypatch)
    assert took
    assert _same_bits(got, want)


def test_picking_weights_keep_the_general_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conv whose weights only pick inputs (a compiled step's im2col) keeps its exact
    copying path: nothing is prepared."""
    weight = np.zeros((4, 1, 2, 2), np.float16)
    for t in range(4):
        weight[t, 0, t // 2, t % 2] = 1.0
    x = np.random.default_rng(1).standard_normal((1, 1, 5, 5)).astype(np.float16)
    consts = {"weight": weight, "groups": np.int32(1), "pad_type": "valid"}
    got, want, took = _both("conv", {"x": x}, consts, (1, 4, 4, 4), monkeypatch)
    assert not took and _same_bits(got, want)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "constant"])
@pytest.mark.parametrize("shape,amounts", [((1, 576), (0, 0, 64, 64)), ((2, 3, 5, 7), (1, 2, 3, 0))])
def test_prepared_pad_gives_the_general_kernels_values(
    mode: str, shape, amounts, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float16)
    out_shape = tuple(
        d + (a + b if i >= len(shape) - len(amounts) // 2 else 0)
        for i, (d, a, b) in enumerate(
            zip(shape, ([0, 0] * len(shape) + list(amounts))[-2 * len(shape) :: 2],
                ([0, 0] * len(shape) + list(amounts))[-2 * len(shape) + 1 :: 2], strict=True)
        )
    )  # fmt: skip
    consts = {"pad": np.array(amounts, np.int32), "mode": mode}
    got, want, took = _both("pad", {"x": x}, consts, out_shape, monkeypatch)
    assert took
    assert _same_bits(got, want)


@pytest.mark.parametrize("shape,perm", [((1, 1, 5, 128), (0, 1, 3, 2)), ((2, 3, 4), (2, 0, 1))])
def test_prepared_transpose_gives_the_general_kernels_view(
    shape, perm, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float16)
    out_shape = tuple(shape[p] for p in perm)
    consts = {"perm": np.array(perm, np.int32)}
    got, want, took = _both("transpose", {"x": x}, consts, out_shape, monkeypatch)
    assert took and _same_bits(got, want)
    assert _same_bits(got, x.transpose(perm))


@pytest.mark.parametrize("axis,count", [(0, 2), (-1, 3), (1, 8)])
@pytest.mark.parametrize("interleave", [False, True])
def test_prepared_concat_takes_its_values_one_by_one_with_the_general_kernels_bits(
    axis: int, count: int, interleave: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """concat's values spread out as positional arguments (run in C by the run loop), a
    constant among them; interleaving keeps the general kernel."""
    rng = np.random.default_rng(count)
    inputs = {f"v{i}": rng.standard_normal((2, 3, 4)).astype(np.float16) for i in range(count - 1)}
    constant = np.linspace(-1, 1, 24, dtype=np.float16).reshape(2, 3, 4)
    values = [*inputs.values(), constant]
    out_shape = list(constant.shape)
    out_shape[axis] *= count
    consts = {"values": (*inputs, constant), "axis": np.int32(axis), "interleave": interleave}
    got, want, took = _both("concat", inputs, consts, tuple(out_shape), monkeypatch)
    assert took != interleave and _same_bits(got, want)
    if not interleave:
        assert _same_bits(got, np.concatenate(values, axis=axis))
        program = build("concat", inputs, consts, [np.zeros(out_shape, np.float32)], dtype="fp16")
        assert SimProgram(program)._specs[0] is not None  # positional: the run loop's C path


def test_a_pad_the_op_refuses_is_refused_as_before() -> None:
    """Reflect amounts past the dimension: not prepared, and the general kernel's error."""
    from anekit.errors import FormatError

    program = build("pad", {"x": np.zeros((1, 4), np.float16)},
                    {"pad": np.array([0, 0, 5, 5], np.int32), "mode": "reflect"},
                    [np.zeros((1, 14), np.float32)], dtype="fp16")  # fmt: skip
    with pytest.raises(FormatError, match="reflect padding must be smaller"):
        SimProgram(program).run({"x": np.zeros((1, 4), np.float16)})


@pytest.mark.parametrize("consts", [{"axis": np.int32(-1), "num_splits": np.int32(4)},
                                    {"axis": np.int32(1), "split_sizes": np.array([1, 3, 2], np.int32)}])  # fmt: skip
def test_prepared_split_gives_the_general_kernels_views(consts: dict) -> None:
    from anekit.simulator.ops.tensor import prepare_split, split

    x = np.random.default_rng(3).standard_normal((2, 6, 8)).astype(np.float32)
    run = prepare_split(consts, {"x": x.shape})
    assert run is not None
    got, want = run(x), split(x, **consts)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and np.array_equal(g, w) and np.shares_memory(g, x)
    assert prepare_split({"axis": np.int32(1), "num_splits": np.int32(4)}, {"x": x.shape}) is None


REDUCTIONS = ["reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_l2_norm",
              "reduce_log_sum_exp", "reduce_prod"]  # fmt: skip
REDUCED = [  # x shape, axes (None: all), keep_dims
    ((1, 1, 1, 1), (1,), True),  # silero-vad's mean of one value
    ((3, 1, 4, 1), (1, 3), False),  # axes of one value each: the mean is 0 + x
    ((2, 5, 3, 7), (1, 3), False),
    ((2, 5, 3, 7), (-1,), True),
    ((4, 33), None, False),  # every axis: a numpy scalar before the cast
    ((3, 1000), (1,), True),  # pairwise summation blocks
]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("case", REDUCED, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_prepared_reductions_give_the_general_kernels_float32_bits(name, case) -> None:
    """In float32, before any fp16 rounding could hide a difference; with NaN, infinities
    and -0 among the values."""
    shape, axes, keep = case
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    flat[::11], flat[5::17], flat[3::13] = -0.0, np.inf, np.nan
    clean = np.abs(x) + 0.5  # and values where every reduction is finite
    kernel = REGISTRY[name].kernel
    known = {"keep_dims": np.bool_(keep), **({} if axes is None else {"axes": np.array(axes, np.int32)})}
    prepared = kernel.prepare(known, {"x": shape})
    assert prepared is not None
    for values in (x, clean):
        with np.errstate(all="ignore"):  # as the run loop: NaN and inf are values here
            want = kernel(values, known.get("axes"), known["keep_dims"])
            got = prepared(values)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))
        if name == "reduce_mean":  # the mean without np.mean's wrapper: np.mean's bits
            with np.errstate(all="ignore"):
                mean = np.mean(values, axis=None if axes is None else tuple(axes), keepdims=keep,
                               dtype=np.float32)  # fmt: skip
            assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(mean).view(np.uint32))


def test_a_prepared_mean_runs_in_a_program(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(3).standard_normal((2, 6, 5)).astype(np.float16)
    consts = {"axes": np.array([1, 2], np.int32), "keep_dims": np.bool_(True)}
    got, want, took = _both("reduce_mean", {"x": x}, consts, (2, 1, 1), monkeypatch)
    assert took and _same_bits(got, want)


@pytest.mark.parametrize("positions", [1, 7])
def test_prepared_pointwise_conv_on_fp16_weights_gives_the_general_kernels_bits(
    positions: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiled model's 1x1 conv reads its weight file's fp16 values in place
    (plan.HALF_CONSUMERS): the prepared kernel makes conv's own fp16-weight product."""
    import anekit
    from anekit import ops

    rng = np.random.default_rng(positions)
    x = anekit.input("x", (1, 128, 1, positions))
    weight = rng.standard_normal((512, 128, 1, 1)).astype(np.float32) * 0.1
    bias = rng.standard_normal(512).astype(np.float32)
    compiled = anekit.compile(anekit.graph(ops.conv2d(x, weight, bias, name="pw")), "m4")
    feeds = {"x": rng.standard_normal((1, 128, 1, positions)).astype(np.float32)}
    (runner,) = compiled.program.runners("sim")
    steps = [s for s in runner.program._plan.steps if s.op == "conv"]
    assert [s.kernel.__name__ for s in steps] == ["run_1x1"]
    got = compiled.program.run(feeds, "sim")
    with monkeypatch.context() as m:
        m.setattr(plan, "prepare_steps", lambda steps, shapes: list(steps))
        general = anekit.compile(anekit.graph(ops.conv2d(x, weight, bias, name="pw")), "m4")
        (runner,) = general.program.runners("sim")
        assert [s.kernel for s in runner.program._plan.steps if s.op == "conv"] == [
            REGISTRY["conv"].kernel
        ]
        want = general.program.run(feeds, "sim")
    for name in want:
        assert np.array_equal(got[name].view(np.uint32), want[name].view(np.uint32))


@pytest.mark.parametrize("x_shape", [(3, 40, 1, 1), (3, 40, 4, 6), (2, 40, 9, 31), (1, 40, 300)])
@pytest.mark.parametrize("bias", [False, True])
def test_prepared_conv_of_an_fp16_weight_gives_the_general_kernels_bits(x_shape, bias) -> None:
    """A pointwise conv whose weight is held as fp16 (plan.HALF_CONSUMERS) is prepared too:
    the same fp16 product as the general kernel, for an SE block's pooled channels, small
    and large feature maps and a 1-D input."""
    from anekit.simulator.ops.conv import conv, prepare_conv

    rng = np.random.default_rng(sum(x_shape))
    n = len(x_shape) - 2
    known = {"weight": rng.standard_normal((24, 40, *(1,) * n)).astype(np.float16),
             "strides": np.ones(n, np.int32), "pad_type": "valid", "groups": np.int32(1)}  # fmt: skip
    if bias:
        known["bias"] = rng.standard_normal(24).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    run = prepare_conv(known, {"x": x_shape})
    assert run is not None
    got, want = run(x), conv(x, **known)
    assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # a 3x3 fp16 weight is not this path (the plan widens it): not prepared here
    assert prepare_conv({**known, "weight": np.zeros((24, 40, *(3,) * n), np.float16)},
                        {"x": x_shape}) is None  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("kernel_shape", [(1, 1), (3, 3)])
def test_a_prepared_conv_rounds_an_fp16_result_itself_and_leaves_an_fp32_one(
    dtype: str, kernel_shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conv's prepared kernel (the C GEMM's or direct kernel's tiles) rounds an fp16
    result, and the run loop then does not round it again; an fp32 result is left as
    summed. Either way the values are the general kernel's, rounded by the loop for fp16."""
    rng = np.random.default_rng(kernel_shape[0])
    x = (rng.standard_normal((1, 24, 10, 40)) * 50).astype(np.float32)
    x[0, 3, 4, 5] = np.nan
    consts = {"weight": (rng.standard_normal((40, 24, *kernel_shape)) * 200).astype(np.float32),
              "strides": np.array([1, 1], np.int32), "pad_type": "same",
              "dilations": np.array([1, 1], np.int32), "groups": np.int32(1)}  # fmt: skip
    program = build("conv", {"x": x.astype(np.float16) if dtype == "fp16" else x}, consts,
                    [np.zeros((1, 40, 10, 40), np.float32)], dtype=dtype)  # fmt: skip
    prepared = SimProgram(program)
    (step,) = prepared._plan.steps
    assert step.kernel is not REGISTRY["conv"].kernel and not step.outputs[0].round
    with monkeypatch.context() as m:
        m.setattr(plan, "prepare_steps", lambda steps, shapes: list(steps))
        general = SimProgram(program)
    assert general._plan.steps[0].outputs[0].round == (dtype == "fp16")
    feeds = {"x": x.astype(np.float16) if dtype == "fp16" else x}
    got, want = prepared.run(feeds)["y0"], general.run(feeds)["y0"]
    assert np.isinf(want).any() == (dtype == "fp16") and np.isnan(want).any()
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
