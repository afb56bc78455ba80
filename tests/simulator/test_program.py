"""Whole programs on SimProgram: Apple-style MIL files, load-time checks, feeds, outputs.

The numbers are checked against independent oracles (onnxruntime, or a float64 numpy
formula of the same network); the checks against the declared types and the error messages
against what the definitions require.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import FormatError, InputError
from anekit.formats import mil
from anekit.formats.blob import BlobWriter
from anekit.simulator import SimProgram, run_function, supported_ops
from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import assert_fp16_within, ulp16
from tests.simulator.test_ops_linear import assert_fp16_rounded

DATA = Path(__file__).parents[1] / "formats" / "mil" / "data"
RNG = np.random.default_rng(29)


def program_dir(tmp_path: Path, name: str, *arrays: np.ndarray) -> Path:
    """A copy of ``DATA/name`` as ``model.mil`` with a weight.bin holding ``arrays`` in order."""
    shutil.copy(DATA / name, tmp_path / "model.mil")
    (tmp_path / "weights").mkdir()
    writer = BlobWriter()
    for a in arrays:
        writer.add(a)
    writer.write(tmp_path / "weights" / "weight.bin")
    return tmp_path / "model.mil"


def test_facts_example_with_a_blobwriter_weight_file(tmp_path: Path) -> None:
    weight = RNG.uniform(-0.3, 0.3, (32, 64, 1, 1)).astype(np.float16)
    prog = SimProgram.load(program_dir(tmp_path, "facts_example.mil", weight))
    assert list(prog.inputs) == ["x"] and list(prog.outputs) == ["y"]
    x = RNG.uniform(-1, 1, (1, 64, 1, 16)).astype(np.float16)
    (conv,) = run_ort("Conv", [x.astype(np.float32), weight.astype(np.float32)])
    y = prog.run({"x": x})["y"]
    assert y.dtype == np.float16 and y.shape == (1, 32, 1, 16)
    assert_fp16_rounded(y, np.maximum(conv, 0))
    # compact spacing, the same program
    (tmp_path / "model.mil").write_text((DATA / "compact_spacing.mil").read_text())
    np.testing.assert_array_equal(SimProgram.load(tmp_path / "model.mil").run({"x": x})["y"], y)


def test_gpt2_block_against_a_float64_formula(tmp_path: Path) -> None:
    ln_g = RNG.uniform(0.5, 1.5, 64).astype(np.float16)
    ln_b = RNG.uniform(-0.2, 0.2, 64).astype(np.float16)
    qkv_w = RNG.uniform(-0.2, 0.2, (192, 64, 1, 1)).astype(np.float16)
    qkv_b = RNG.uniform(-0.1, 0.1, (1, 192, 1, 1)).astype(np.float16)
    prog = SimProgram.load(program_dir(tmp_path, "gpt2_block.mil", ln_g, ln_b, qkv_w, qkv_b))
    x = RNG.uniform(-2, 2, (1, 64, 1, 16)).astype(np.float16)
    mask = np.triu(np.full((16, 16), -1e4, np.float16), 1).reshape(1, 1, 16, 16)
    out = prog.run({"x": x, "mask": mask})

    h = float.fromhex
    x64 = x.astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(1, keepdims=True)
    g, b = (
        ln_g.astype(np.float64).reshape(1, 64, 1, 1),
        ln_b.astype(np.float64).reshape(1, 64, 1, 1),
    )
    n = (x64 - mu) / np.sqrt(var + h("0x1.5p-17")) * g + b
    qkv = np.einsum("oc,ncs->nos", qkv_w[:, :, 0, 0].astype(np.float64), n[:, :, 0])[:, :, None]
    qkv = qkv + qkv_b.astype(np.float64)
    q, k, v = (qkv[:, i * 64 : (i + 1) * 64].reshape(1, 2, 32, 16) for i in range(3))
    att = np.swapaxes(q, -1, -2) @ k * h("0x1.6ap-3") + mask.astype(np.float64)
    p = np.exp(att - att.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    r = x64 + (v @ np.swapaxes(p, -1, -2)).reshape(1, 64, 1, 16)
    y = 0.5 * r * (1 + np.tanh(h("0x1.988p-1") * (r + h("0x1.6e4p-5") * r**3)))
    # fp16 storage between ~25 ops: each rounding adds up to half an ulp of its own value, and
    # the program computes gelu's 1 + tanh(.) in fp16, which cancels for negative inputs; so
    # the error is bounded relative to each output's largest value (2 fp16 ulps there)
    for got, ref in ((out["p"], p), (out["y"], y)):
        error = np.abs(got.astype(np.float64) - ref).max()
        top = np.abs(ref).max()
        assert error <= 2 * ulp16(np.array(top)), (error, top)


def test_legacy_ios16_program(tmp_path: Path) -> None:
    weight = RNG.uniform(-0.05, 0.05, (768, 768, 1, 1)).astype(np.float16)
    prog = SimProgram.load(program_dir(tmp_path, "legacy_ios16.mil", weight))
    x = RNG.uniform(-1, 1, (1, 768, 1, 16)).astype(np.float16)
    (conv,) = run_ort("Conv", [x.astype(np.float32), weight.astype(np.float32)])
    # conv rounded to fp16, then * 10 rounded, then relu
    y0 = conv.astype(np.float16).astype(np.float64)
    want = np.maximum((y0 * 10).astype(np.float16), 0)
    got = prog.run({"x": x})["y"]
    assert (np.abs(got.astype(np.float64) - want) <= 10 * np.spacing(np.abs(want))).all()


def test_decimal_literals_program() -> None:
    prog = SimProgram.load(DATA / "decimal_literals.mil")
    x = RNG.uniform(-1, 1, (1, 3, 1, 4)).astype(np.float32)
    x16 = x.astype(np.float16).astype(np.float64)
    scale = np.array([0.1, -2.5, 3], np.float16).astype(np.float64).reshape(1, 3, 1, 1)
    want = ((x16 * scale).astype(np.float16).astype(np.float64) + 0.5).astype(np.float16)
    np.testing.assert_array_equal(prog.run({"x": x})["y"], want)


def test_multi_function_program_and_run_function() -> None:
    program = mil.parse_file(DATA / "multi_function.mil")
    x = np.array([[-1, 2, -3, 4, 0.5, -0.5, 60000, -60000]], np.float32)
    bias = np.ones((1, 8), np.float32)
    out = run_function(program, {"x": x, "bias": bias}, function="prefill")
    s = (x + 1).astype(np.float16)
    np.testing.assert_array_equal(out["s"], s)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-s.astype(np.float64)))
    assert_fp16_within(out["y"], want, 1)
    assert list(out) == ["y", "s"]
    empty = run_function(program, {}, function="empty")
    np.testing.assert_array_equal(empty["c"], [[1, 2], [3, 4]])
    with pytest.raises(FormatError, match="no function 'decode'"):
        SimProgram(program, function="decode")


def test_symbolic_shapes() -> None:
    prog = SimProgram.load(DATA / "flexible_shapes.mil")
    for n in (1, 7):
        ids = RNG.integers(0, 50, (1, n)).astype(np.int32)
        np.testing.assert_array_equal(prog.run({"input_ids": ids})["out"], np.cumsum(ids, -1))
    with pytest.raises(InputError, match=r"has shape \[2, 3\], but the function expects"):
        prog.run({"input_ids": np.zeros((2, 3), np.int32)})


def test_stateful_programs_are_refused_at_load() -> None:
    with pytest.raises(FormatError, match=r"does not support: read_state \(1\)"):
        SimProgram.load(DATA / "literals.mil")
    state = mil.StateType(mil.MilTensorType("fp16", (1, 4)))
    with pytest.raises(FormatError, match="input kv has the type state<tensor<fp16, "):
        SimProgram(function(mil.operation("relu", ("y", T16), {"x": "x"}),
                            inputs=(("x", T16), ("kv", state))))  # fmt: skip


# --- load-time checks -----------------------------------------------------------------------

T16 = mil.MilTensorType("fp16", (1, 4))
T32 = mil.MilTensorType("fp32", (1, 4))


def function(*ops: mil.Operation, inputs=(("x", T16),), outputs=("y",)) -> mil.MilProgram:
    binds = tuple(mil.Binding(n, t) for n, t in inputs)
    return mil.MilProgram("1.3", (), (mil.Function("main", "ios18", binds, ops, outputs),))


def test_every_unsupported_op_is_listed_with_counts_at_load() -> None:
    text = mil.print_program(
        function(
            mil.operation("frobnicate", ("a", T16), {"x": "x"}),
            mil.operation("relu", ("b", T16), {"x": "a"}),
            mil.operation("frobnicate", ("c", T16), {"x": "b"}),
            mil.operation("while_loopy", ("y", T16), {"x": "c"}),
        )
    )
    with pytest.raises(FormatError) as info:
        SimProgram.from_text(text)
    message = str(info.value)
    assert (
        "uses 3 operation(s) the simulator does not support: frobnicate (2), while_loopy (1)"
        in message
    )
    assert "relu" not in message.split("hint")[0]
    assert set(supported_ops()) >= {"conv", "matmul", "layer_norm", "softmax", "const"}


@pytest.mark.parametrize(
    "op, message",
    [
        (mil.operation("relu", ("y", T16), {"x": "x", "alpha": 1.0}), "unknown input(s) alpha"),
        (mil.operation("add", ("y", T16), {"x": "x"}), "missing required input(s) y"),
        (mil.operation("add", ("y", T16), {"x": "x", "y": np.ones((1, 4), np.float32)}),
         "input y is fp32 but x is fp16; they must have the same type"),
        (mil.operation("relu", ("y", T32), {"x": "x"}),
         "output y is fp16, the program declares tensor<fp32, [1, 4]>"),
        (mil.operation("softmax", ("y", T16), {"x": "x", "axis": np.float32(1.0)}),
         "input axis is fp32; it must be one of int32"),
        (mil.operation("cast", ("y", T16), {"x": "x", "dtype": mil.string("int64")}),
         "dtype 'int64' is not one of"),
        (mil.operation("split", (("y", T16), ("z", T16)), {"x": "x", "axis": 0, "num_splits": 1}),
         "produced 1 outputs, the program declares 2"),
        (mil.operation("clip", ("y", T16), {"x": "x", "alpha": mil.literal(2.0, "fp16"),
                                            "beta": mil.literal(1.0, "fp16")}),
         "alpha (2.0) must be smaller than beta (1.0)"),
    ],
)  # fmt: skip
def test_load_time_errors_name_the_op_and_line(op: mil.Operation, message: str) -> None:
    text = mil.print_program(function(op))
    with pytest.raises(FormatError) as info:
        SimProgram.from_text(text).run({"x": np.zeros((1, 4), np.float32)})
    assert message in str(info.value)
    assert f"{op.op} 'y'" in str(info.value) and "line 4" in str(info.value)


def test_const_inputs_must_be_known_at_load() -> None:
    ops = (
        mil.const("k", np.array([1, 4], np.int32)),
        mil.operation("transpose", ("y", T16), {"x": "x", "perm": "p"}),
    )
    program = function(*ops, inputs=(("x", T16), ("p", mil.MilTensorType("int32", (2,)))))
    with pytest.raises(FormatError, match="input perm must be a constant known when the program"):
        SimProgram(program)


def test_a_const_whose_value_is_not_its_declared_type() -> None:
    bad = mil.Operation(
        "const",
        (mil.Binding("y", T16),),
        (),
        (("name", mil.string("y")), ("val", mil.literal(np.zeros((1, 4), np.float32)))),
    )
    with pytest.raises(FormatError, match=r"declared tensor<fp16, \[1, 4\]> but its value is"):
        SimProgram(function(bad))


def test_runtime_shape_mismatch_names_op_line_and_types() -> None:
    text = mil.print_program(
        function(
            mil.const("s", np.array([2, 2], np.int32)),
            mil.operation("reshape", ("y", T16), {"x": "x", "shape": "s"}),
        )
    )
    prog = SimProgram.from_text(text)
    with pytest.raises(FormatError) as info:
        prog.run({"x": np.zeros((1, 4), np.float32)})
    assert (
        "reshape 'y' computed y with shape [2, 2], the program declares tensor<fp16, [1, 4]>"
        in str(info.value)
    )
    assert info.value.line == 5


def test_kernel_errors_are_format_errors() -> None:
    text = mil.print_program(
        function(
            mil.operation("gather", ("y", T16), {"x": "x", "indices": "i", "axis": 1}),
            inputs=(("x", T16), ("i", mil.MilTensorType("int32", (1, 4)))),
        )
    )
    prog = SimProgram.from_text(text)
    with pytest.raises(
        FormatError, match=r"gather 'y' failed: indices in \[0, 9\] are out of range"
    ):
        prog.run({"x": np.zeros((1, 4)), "i": np.array([[0, 1, 9, 2]])})


# --- feeds and outputs ----------------------------------------------------------------------


def relu_program() -> SimProgram:
    return SimProgram(function(mil.operation("relu", ("y", T16), {"x": "x"})))


@pytest.mark.parametrize(
    "feeds, message",
    [
        ({}, "missing input(s) ['x']; the function 'main' takes (x: tensor<fp16, [1, 4]>)"),
        ({"x": np.zeros((1, 4)), "z": 1}, "unknown input(s) ['z']"),
        ({"x": np.zeros((4,))}, "input 'x' has shape [4], but the function expects"),
        ({"x": np.zeros((1, 4), bool)}, "input 'x' has dtype bool, but the function expects"),
        ({"x": np.array([["a"] * 4])}, "has dtype <U1"),
    ],
)
def test_bad_feeds_raise_input_error_with_the_signature(feeds: dict, message: str) -> None:
    with pytest.raises(InputError) as info:
        relu_program().run(feeds)
    assert message in str(info.value)


def test_integer_feeds_are_range_checked() -> None:
    t = mil.MilTensorType("int8", (2,))
    prog = SimProgram(function(mil.operation("identity", ("y", t), {"x": "x"}), inputs=(("x", t),)))
    np.testing.assert_array_equal(prog.run({"x": np.array([-128, 127])})["y"], [-128, 127])
    with pytest.raises(InputError, match=r"values in \[0, 300\], outside the int8 range"):
        prog.run({"x": np.array([0, 300])})


def test_feeds_are_rounded_to_fp16_and_outputs_are_fresh_arrays() -> None:
    prog = relu_program()
    x = np.array([[0.1, -1, 70000, 1 / 3]])  # float64 feed: rounded once to fp16
    out = prog.run({"x": x})["y"]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.maximum(x.astype(np.float16), 0))
    wide = prog.run({"x": x}, fp32_outputs=True)["y"]
    assert wide.dtype == np.float32
    np.testing.assert_array_equal(wide, out.astype(np.float32))
    wide[...] = 5  # the caller owns its outputs
    np.testing.assert_array_equal(prog.run({"x": x})["y"], out)
    np.testing.assert_array_equal(x, [[0.1, -1, 70000, 1 / 3]])  # feeds are not modified


def test_float32_feeds_of_the_declared_shape_are_stored_as_any_feed_is() -> None:
    """The feeds' short path (float32 arrays of a static shape): a copy rounded to fp16,
    with the general path's bits (overflow to infinity, NaN, subnormals, -0); the caller's
    array is left as it was."""
    prog = relu_program()
    x = np.array([[0.1, -1e-7, 70000, np.nan]], np.float32)
    assert prog._plain == (("x", (1, 4), True),)
    stored = prog._feeds({"x": x}, {})
    general = prog._feeds({"x": x.astype(np.float64)}, {})  # another dtype: the general path
    assert not stored[0].flags.writeable and not np.shares_memory(stored[0], x)
    np.testing.assert_array_equal(stored[0].view(np.uint32), general[0].view(np.uint32))
    np.testing.assert_array_equal(
        prog.run({"x": x})["y"], prog.run({"x": x.astype(np.float64)})["y"]
    )
    np.testing.assert_array_equal(
        x.view(np.uint32), np.array([[0.1, -1e-7, 70000, np.nan]], np.float32).view(np.uint32)
    )


def test_constant_ops_are_evaluated_once_at_load() -> None:
    ops = (
        mil.const("a", np.ones((1, 4), np.float16)),
        mil.operation("exp", ("b", T16), {"x": "a"}),  # all inputs known: folded at load
        mil.operation("add", ("y", T16), {"x": "x", "y": "b"}),
    )
    prog = SimProgram(function(*ops))
    assert [s.op for s in prog._plan.steps] == ["add"]
    out = prog.run({"x": np.zeros((1, 4), np.float32)})["y"]
    np.testing.assert_array_equal(out, np.full((1, 4), np.float16(np.e)))


def test_dead_values_are_freed_after_their_last_use() -> None:
    ops = (
        mil.operation("relu", ("a", T16), {"x": "x"}),
        mil.operation("exp", ("b", T16), {"x": "a"}),
        mil.operation("add", ("c", T16), {"x": "a", "y": "b"}),
        mil.operation("sigmoid", ("y", T16), {"x": "c"}),
    )
    prog = SimProgram(function(*ops, outputs=("y", "b")))
    steps = {s.name: s for s in prog._plan.steps}
    slots = {e.name: e.slot for s in prog._plan.steps for e in s.outputs}
    assert steps["a"].frees == (0,)  # the input x dies after relu
    assert steps["c"].frees == (slots["a"],)  # b is an output: never freed
    assert steps["y"].frees == (slots["c"],)


def test_many_runs_give_identical_results() -> None:
    prog = relu_program()
    x = RNG.standard_normal((1, 4))
    first = prog.run({"x": x})["y"]
    for _ in range(3):
        np.testing.assert_array_equal(prog(x=x)["y"], first)


def test_program_value_equality_is_unchanged_by_loading() -> None:
    program = function(mil.operation("relu", ("y", T16), {"x": "x"}))
    SimProgram(program)
    assert program == replace(program)


def test_outputs_never_alias_each_other_or_constants() -> None:
    c = np.arange(4, dtype=np.float32).reshape(1, 4)
    ops = (
        mil.const("c", c),
        mil.operation("relu", ("a", T32), {"x": "x"}),
        mil.operation("identity", ("b", T32), {"x": "a"}),  # the very same array as a
        mil.operation("identity", ("k", T32), {"x": "c"}),  # folded: a constant
    )
    prog = SimProgram(function(*ops, inputs=(("x", T32),), outputs=("a", "b", "k")))
    first = prog.run({"x": np.ones((1, 4))})
    assert first["a"] is not first["b"] and first["a"].flags.writeable
    first["a"][...] = -1
    first["k"][...] = -1
    np.testing.assert_array_equal(first["b"], np.ones((1, 4)))
    np.testing.assert_array_equal(prog.run({"x": np.ones((1, 4))})["k"], c)


@pytest.mark.parametrize(
    "op, inputs, consts, message",
    [
        ("fill", {}, {"shape": np.array([2**30, 2**30], np.int32), "value": 1.0},
         "more than the simulator's limit"),
        ("tile", {"x": np.ones((1, 4), np.float32)}, {"reps": np.array([2**20, 2**20], np.int32)},
         "more than the simulator's limit"),
        ("one_hot", {"indices": np.zeros(4, np.int32)}, {"one_hot_vector_size": 2**30},
         "more than the simulator's limit"),
        ("range_1d", {}, {"start": 0, "end": 2**31 - 1, "step": 1}, "more than the simulator's limit"),
        ("pad", {"x": np.ones((1, 4), np.float32)}, {"pad": np.array([2**30, 2**30], np.int32)},
         "more than the simulator's limit"),
        ("upsample_nearest_neighbor", {"x": np.ones((1, 1, 4, 4), np.float32)},
         {"scale_factor_height": 1e6, "scale_factor_width": 1e6}, "more than the simulator's limit"),
        ("reshape", {"x": np.ones((1, 4), np.float32)}, {"shape": np.array([-1, -1], np.int32)},
         "more than one -1"),
        ("conv", {"x": np.ones((1, 1, 4, 4), np.float32)},
         {"weight": np.ones((1, 1, 9, 9), np.float32)}, "smaller than the kernel extent"),
    ],
)  # fmt: skip
def test_hostile_sizes_are_format_errors_not_memory_errors(op, inputs, consts, message) -> None:
    from tests.simulator.milops import run_mil

    # the declared output type fits (int32 for one_hot's and range's ints); only the size is bad
    dtype = np.int32 if op in ("one_hot", "range_1d") else np.float32
    with pytest.raises(FormatError, match=message):
        run_mil(op, inputs, consts, np.zeros((1,), dtype))
