"""The load-time rewrite of a concat read only by a transpose into one copy (simulator.movement).

Oracles: numpy's own ``transpose(concatenate(...))`` for the fused kernel, and numpy float16
rounding of float32 matmuls for whole programs (the same program unfused must agree bit for
bit).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from anekit.formats import mil
from anekit.simulator import SimProgram
from anekit.simulator.movement import concat_transpose

RNG = np.random.default_rng(41)


@pytest.mark.parametrize(
    "shapes, axis, perm",
    [
        ([(1, 5, 4), (1, 3, 4)], 1, (0, 2, 1)),  # the vocabulary head's layout
        ([(2, 3, 7), (2, 3, 1), (2, 3, 9)], -1, (2, 0, 1)),
        ([(4, 6), (9, 6)], 0, (1, 0)),
        ([(3, 2, 5, 2)], 2, (3, 2, 1, 0)),  # a single input: the transpose alone
        ([(70_000, 2), (5, 2)], 0, (1, 0)),  # parts longer than one copied block
    ],
)
def test_concat_transpose_is_numpys_transpose_of_the_concatenation(
    shapes: list[tuple[int, ...]], axis: int, perm: tuple[int, ...]
) -> None:
    values = tuple(RNG.standard_normal(s).astype(np.float32) for s in shapes)
    got = concat_transpose(values, np.array(axis, np.int32), np.array(perm, np.int32))
    want = np.transpose(np.concatenate(values, axis=axis), perm)
    assert got.flags.c_contiguous and got.flags.owndata
    np.testing.assert_array_equal(got, want)


W0 = RNG.uniform(-1, 1, (5, 6)).astype(np.float16)
W1 = RNG.uniform(-1, 1, (3, 6)).astype(np.float16)


def head(*, also_return_concat: bool = False, interleave: bool = False) -> mil.MilProgram:
    """x [1, 6, 4] -> two matmuls with constant weights -> concat on axis 1 -> transpose."""
    t = mil.MilTensorType
    ops = (
        mil.const("w0", W0),
        mil.const("w1", W1),
        mil.operation("matmul", ("p0", t("fp16", (1, 5, 4))), {"x": "w0", "y": "x"}),
        mil.operation("matmul", ("p1", t("fp16", (1, 3, 4))), {"x": "w1", "y": "x"}),
        mil.const("axis", 1),
        mil.const("interleave", interleave),
        mil.operation(
            "concat",
            ("c", t("fp16", (1, 8, 4))),
            {
                "values": mil.ArgList((mil.Var("p0"), mil.Var("p1"))),
                "axis": "axis",
                "interleave": "interleave",
            },
        ),  # fmt: skip
        mil.const("perm", np.array([0, 2, 1], np.int32)),
        mil.operation("transpose", ("y", t("fp16", (1, 4, 8))), {"x": "c", "perm": "perm"}),
    )
    outputs = ("y", "c") if also_return_concat else ("y",)
    binds = (mil.Binding("x", t("fp16", (1, 6, 4))),)
    return mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, ops, outputs),))


def test_a_concat_read_only_by_a_transpose_is_copied_once_into_the_transposed_result() -> None:
    prog = SimProgram(head())
    assert [s.op for s in prog._plan.steps] == ["matmul", "matmul", "transpose"]
    assert prog._plan.steps[-1].kernel is concat_transpose
    x = RNG.uniform(-2, 2, (1, 6, 4)).astype(np.float16)
    y = prog.run({"x": x})["y"]
    parts = [(w.astype(np.float32) @ x.astype(np.float32)).astype(np.float16) for w in (W0, W1)]
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=1).transpose(0, 2, 1))
    unfused = SimProgram(head(also_return_concat=True)).run({"x": x})
    np.testing.assert_array_equal(y.view(np.uint16), unfused["y"].view(np.uint16))
    wide = prog.run({"x": x}, fp32_outputs=True)["y"]
    assert wide.flags.owndata and wide.flags.writeable  # handed over without a copy


@pytest.mark.parametrize("kwargs", [{"also_return_concat": True}, {"interleave": True}])
def test_a_concat_read_elsewhere_or_interleaved_is_left_alone(kwargs: dict) -> None:
    prog = SimProgram(head(**kwargs))
    assert [s.op for s in prog._plan.steps] == ["matmul", "matmul", "concat", "transpose"]


def test_symbolic_shapes_are_left_alone() -> None:
    f = head().function("main")
    symbolic = (mil.Binding("c", mil.MilTensorType("fp16", (1, "n", 4))),)
    ops = tuple(replace(o, outputs=symbolic) if o.name == "c" else o for o in f.operations)
    program = mil.MilProgram("1.3", (), (mil.Function("main", "ios18", f.inputs, ops, f.outputs),))
    prog = SimProgram(program)
    assert "concat" in [s.op for s in prog._plan.steps]
    x = RNG.uniform(-2, 2, (1, 6, 4)).astype(np.float16)
    np.testing.assert_array_equal(prog.run({"x": x})["y"], SimProgram(head()).run({"x": x})["y"])


def reshapes(perm: tuple[int, ...] | None, shape: tuple[int, ...]) -> mil.MilProgram:
    """x [2, 3, 4] (transposed by ``perm`` first, when given) reshaped by ``shape``
    (declared [4, 6] or [6, 4])."""
    t = mil.MilTensorType
    ops: list = []
    src = "x"
    if perm is not None:
        ops += [mil.const("perm", np.array(perm, np.int32)),
                mil.operation("transpose", ("t", t("fp16", tuple((2, 3, 4)[p] for p in perm))),
                              {"x": "x", "perm": "perm"})]  # fmt: skip
        src = "t"
    out = (4, 6) if shape[0] in (4, -1) else (6, 4)
    ops += [mil.const("shape", np.array(shape, np.int32)),
            mil.operation("reshape", ("y", t("fp16", out)), {"x": src, "shape": "shape"})]  # fmt: skip
    binds = (mil.Binding("x", t("fp16", (2, 3, 4))),)
    return mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, tuple(ops), ("y",)),))


@pytest.mark.parametrize("perm", [None, (2, 1, 0), (0, 2, 1)])
@pytest.mark.parametrize("shape", [(4, 6), (-1, 6), (6, -1)])
def test_reshapes_between_static_shapes_give_numpys_values(perm, shape) -> None:
    """A contiguous value is taken as a view, a transposed one is copied by the op's kernel;
    both give numpy's reshape of the (transposed) values."""
    x = RNG.uniform(-2, 2, (2, 3, 4)).astype(np.float16)
    want = (x if perm is None else x.transpose(perm)).reshape((4, 6) if shape[0] in (4, -1) else (6, 4))
    prog = SimProgram(reshapes(perm, shape))
    assert prog._plan.steps[-1].known == {}  # rewritten: the target worked out at load
    np.testing.assert_array_equal(prog.run({"x": x})["y"], want)


def test_a_transposed_value_reshaped_by_unit_axes_is_taken_as_a_view() -> None:
    """silero-vad's STFT fold: [1, 1, 128, 5], the transpose of [1, 1, 5, 128], reshaped to
    [1, 128, 1, 5] is the same layout with one axis moved: a view of it, as the op's kernel
    returns, not a copy."""
    t = mil.MilTensorType
    ops = (
        mil.const("perm", np.array([0, 1, 3, 2], np.int32)),
        mil.operation("transpose", ("t", t("fp16", (1, 1, 128, 5))), {"x": "x", "perm": "perm"}),
        mil.const("shape", np.array([1, 128, 1, 5], np.int32)),
        mil.operation("reshape", ("y", t("fp16", (1, 128, 1, 5))), {"x": "t", "shape": "shape"}),
    )
    binds = (mil.Binding("x", t("fp16", (1, 1, 5, 128))),)
    prog = SimProgram(mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, ops, ("y",)),)))
    x = RNG.uniform(-2, 2, (1, 1, 5, 128)).astype(np.float16)
    want = x.transpose(0, 1, 3, 2).reshape(1, 128, 1, 5)
    np.testing.assert_array_equal(prog.run({"x": x})["y"], want)
    step = prog._plan.steps[-1]
    assert step.known == {}  # rewritten: the target worked out at load
    strided = x.astype(np.float32).transpose(0, 1, 3, 2)
    view = step.kernel(strided)
    assert np.shares_memory(view, strided) and view.shape == (1, 128, 1, 5)
    np.testing.assert_array_equal(view, want)


def _slice(op: str, consts: dict, out: tuple[int, ...]) -> mil.MilProgram:
    t = mil.MilTensorType
    ops = [mil.const(k, v) for k, v in consts.items()]
    ops.append(mil.operation(op, ("y", t("fp16", out)), {"x": "x", **{k: k for k in consts}}))
    binds = (mil.Binding("x", t("fp16", (4, 6, 5))),)
    return mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, tuple(ops), ("y",)),))


I32 = np.int32
SLICES = [
    ("slice_by_size", {"begin": np.array([1, 0, 2], I32), "size": np.array([2, -1, 3], I32)},
     (2, 6, 3), np.s_[1:3, :, 2:5]),
    ("slice_by_index", {"begin": np.array([0, 1, 0], I32), "end": np.array([4, 5, 5], I32),
                        "stride": np.array([2, 1, -1], I32),
                        "begin_mask": np.array([False, False, True]),
                        "end_mask": np.array([False, False, True])},
     (2, 4, 5), np.s_[0:4:2, 1:5, ::-1]),
    ("slice_by_index", {"begin": np.array([3, 0, 0], I32), "end": np.array([4, 6, 5], I32),
                        "squeeze_mask": np.array([True, False, False])},
     (6, 5), np.s_[3, 0:6, 0:5]),
]  # fmt: skip


@pytest.mark.parametrize("op, consts, out, index", SLICES)
def test_slices_between_static_shapes_take_the_index_worked_out_at_load(op, consts, out, index) -> None:
    x = RNG.uniform(-2, 2, (4, 6, 5)).astype(np.float16)
    prog = SimProgram(_slice(op, consts, out))
    assert prog._plan.steps[-1].known == {}  # rewritten
    np.testing.assert_array_equal(prog.run({"x": x})["y"], x[index])


def test_a_reshape_with_a_shape_the_op_refuses_keeps_its_kernel_and_error() -> None:
    from anekit.errors import FormatError

    prog = SimProgram(reshapes(None, (-1, -1)))
    assert "shape" in prog._plan.steps[-1].known  # left to the op's kernel
    with pytest.raises(FormatError, match="more than one -1"):
        prog.run({"x": np.zeros((2, 3, 4), np.float16)})
