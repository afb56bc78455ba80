"""Shape, tensor-building, gather/scatter and cast ops against onnxruntime and coremltools.

These ops move, select or build values, so results must be exact (fp16 inputs stay the same
fp16 values; no rounding happens).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from anekit.formats.mil import MilTensorType
from anekit.simulator import SimProgram
from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import build, coreml, run_mil

RNG = np.random.default_rng(17)


def fp16_values(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.uniform(-9, 9, shape).astype(np.float16).astype(np.float32)


def exact(op: str, inputs: dict, consts: dict, expected, dtypes=("fp32", "fp16"), **kw) -> None:
    outs = [expected] if isinstance(expected, np.ndarray) else list(expected)
    for dtype in dtypes:
        got = run_mil(op, inputs, consts, outs, dtype=dtype, **kw)
        for g, e in zip(got, outs, strict=True):
            assert g.shape == e.shape, (op, g.shape, e.shape)
            np.testing.assert_array_equal(g, e.astype(g.dtype))


def i32(values) -> np.ndarray:
    return np.array(values, np.int32)


# --- shape ops ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, opset, want",
    [
        ((4, -1, 3), "ios18", (4, 2, 3)),
        ((0, -1, 1), "ios16", (4, 6, 1)),  # iOS 15/16: 0 copies the same dimension
        ((1, 0, -1, 0), "ios17", (1, 4, 2, 3)),  # iOS 17: 0s align from the right
    ],
)
def test_reshape(shape, opset, want) -> None:
    x = fp16_values((4, 2, 3))
    exact("reshape", {"x": x}, {"shape": i32(shape)}, x.reshape(want), opset=opset)


def test_reshape_shape_at_runtime_against_onnxruntime() -> None:
    x = fp16_values((2, 3, 4))
    (ref,) = run_ort("Reshape", [x, np.array([4, -1], np.int64)])
    exact("reshape", {"x": x, "shape": i32([4, -1])}, {}, ref)


def test_transpose_squeeze_expand_against_onnxruntime() -> None:
    x = fp16_values((2, 1, 3, 1))
    (ref,) = run_ort("Transpose", [x], perm=[2, 0, 3, 1])
    exact("transpose", {"x": x}, {"perm": i32([2, 0, -1, 1])}, ref)
    (ref,) = run_ort("Squeeze", [x, np.array([1], np.int64)])
    exact("squeeze", {"x": x}, {"axes": i32([1])}, ref)
    exact("squeeze", {"x": x}, {}, x.reshape(2, 3))
    # like PyTorch: a named axis whose size is not 1 is left alone (the definition's type
    # inference; coremltools' value inference calls np.squeeze, which refuses)
    exact("squeeze", {"x": x}, {"axes": i32([0, 3])}, x.reshape(2, 1, 3))
    (ref,) = run_ort("Unsqueeze", [x, np.array([0, -1], np.int64)])
    exact("expand_dims", {"x": x}, {"axes": i32([0, -1])}, ref)


@pytest.mark.parametrize(
    "begin, end, stride, masks",
    [
        ([0, 1, 2], [2, 4, 9], [1, 1, 3], {}),
        ([-1, 0, 8], [0, 4, 0], [-1, 2, -2], {}),
        ([1, 2, 0], [0, 0, 0], None, {"begin_mask": [False, False, True],
                                     "end_mask": [True, True, True]}),
        ([1, 0, -2], [0, 4, 0], None, {"squeeze_mask": [True, False, True]}),
    ],
)  # fmt: skip
def test_slice_by_index_against_coremltools(begin, end, stride, masks) -> None:
    x = fp16_values((3, 4, 9))
    kwargs = {k: np.array(v) for k, v in masks.items()}
    if stride is not None:
        kwargs["stride"] = i32(stride)
    ref = coreml("slice_by_index", x=x, begin=i32(begin), end=i32(end), **kwargs)
    consts = {k: v.astype(np.int32) if v.dtype.kind == "i" else v for k, v in kwargs.items()}
    exact("slice_by_index", {"x": x}, {"begin": i32(begin), "end": i32(end), **consts},
          np.asarray(ref, np.float32))  # fmt: skip


def test_slice_by_index_runtime_bounds_against_onnxruntime() -> None:
    x = fp16_values((5, 6))
    (ref,) = run_ort("Slice", [x, np.array([1, -5], np.int64), np.array([4, 6], np.int64)])
    exact("slice_by_index", {"x": x, "begin": i32([1, -5]), "end": i32([4, 6])}, {}, ref)


def test_slice_by_size_and_update() -> None:
    x = fp16_values((4, 5, 6))
    ref = coreml("slice_by_size", x=x, begin=i32([1, 0, -4]), size=i32([2, -1, 3]))
    exact("slice_by_size", {"x": x}, {"begin": i32([1, 0, -4]), "size": i32([2, -1, 3])}, ref)
    update = fp16_values((2, 5, 2))
    ref = coreml("slice_update", x=x, update=update, begin=i32([1, 0, 0]), end=i32([3, 5, 6]),
                 stride=i32([1, 1, 3]))  # fmt: skip
    exact("slice_update", {"x": x, "update": update},
          {"begin": i32([1, 0, 0]), "end": i32([3, 5, 6]), "stride": i32([1, 1, 3])}, ref)  # fmt: skip


def test_reverse_and_reverse_sequence() -> None:
    x = fp16_values((3, 4, 5))
    exact("reverse", {"x": x}, {"axes": i32([0, -1])}, coreml("reverse", x=x, axes=[0, -1]))
    exact("reverse", {"x": x}, {}, x[::-1, ::-1, ::-1])
    lengths = i32([4, 1, 0])
    (ref,) = run_ort("ReverseSequence", [x, lengths.astype(np.int64)], batch_axis=0, time_axis=1)
    exact("reverse_sequence", {"x": x, "lengths": lengths}, {"seq_axis": 1, "batch_axis": 0}, ref)


@pytest.mark.parametrize("mode, op", [("DCR", "depth_to_space"), ("CRD", "pixel_shuffle")])
def test_depth_to_space_and_pixel_shuffle_against_onnxruntime(mode: str, op: str) -> None:
    x = fp16_values((2, 12, 3, 4))
    (ref,) = run_ort("DepthToSpace", [x], blocksize=2, mode=mode)
    key = "block_size" if op == "depth_to_space" else "upscale_factor"
    exact(op, {"x": x}, {key: 2}, ref)


def test_space_to_depth_and_pixel_unshuffle() -> None:
    x = fp16_values((1, 3, 4, 6))
    (ref,) = run_ort("SpaceToDepth", [x], blocksize=2)
    exact("space_to_depth", {"x": x}, {"block_size": 2}, ref)
    torch = pytest.importorskip("torch")
    ref = torch.nn.functional.pixel_unshuffle(torch.from_numpy(x), 2).numpy()
    exact("pixel_unshuffle", {"x": x}, {"downscale_factor": np.uint32(2)}, ref,
          const_dtypes={"downscale_factor": "uint32"})  # fmt: skip


def test_space_to_batch_round_trip_against_formula() -> None:
    # TensorFlow's space_to_batch_nd on NCHW: out[(i*bw + j)*N + n, c, h, w] =
    # padded[n, c, h*bh + i, w*bw + j]
    x = fp16_values((2, 3, 3, 4))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 2)))
    want = np.empty((2 * 2 * 3, 3, 2, 2), np.float32)
    for i in range(2):
        for j in range(3):
            for n in range(2):
                want[(i * 3 + j) * 2 + n] = padded[n, :, i::2, j::3]
    paddings = i32([[1, 0], [0, 2]])
    exact("space_to_batch", {"x": x}, {"block_shape": i32([2, 3]), "paddings": paddings}, want)
    exact("batch_to_space", {"x": want}, {"block_shape": i32([2, 3]), "crops": paddings}, x)


def test_sliding_windows_flatten_and_shape() -> None:
    x = fp16_values((2, 9, 3))
    # the definition: [*d0, (d_axis - size) // stride + 1, size, *dn]
    ref = np.stack([x[:, w * 2 : w * 2 + 4] for w in range((9 - 4) // 2 + 1)], axis=1)
    exact("sliding_windows", {"x": x}, {"axis": 1, "size": 4, "stride": 2}, ref)
    exact("flatten2d", {"x": x}, {"axis": -1}, coreml("flatten2d", x=x, axis=-1))
    (ref,) = run_ort("Shape", [x])
    exact("shape", {"x": x}, {}, ref.astype(np.int32))


# --- building tensors ---------------------------------------------------------------------------


@pytest.mark.parametrize("interleave", [False, True])
def test_concat_against_onnxruntime_and_coremltools(interleave: bool) -> None:
    a, b = fp16_values((2, 3, 4)), fp16_values((2, 3, 4))
    if interleave:  # the definition's example: out[:, 0::2] = a, out[:, 1::2] = b
        ref = np.empty((2, 6, 4), np.float32)
        ref[:, 0::2], ref[:, 1::2] = a, b
    else:
        (ref,) = run_ort("Concat", [a, b], axis=1)
    consts = {"values": ("a", "b"), "axis": 1, "interleave": interleave}
    exact("concat", {"a": a, "b": b}, consts, ref)


def test_concat_with_a_constant_and_stack() -> None:
    a = fp16_values((2, 3))
    c = fp16_values((2, 1))
    exact("concat", {"a": a}, {"values": ("a", c), "axis": -1}, np.concatenate([a, c], -1))
    exact("stack", {"a": a}, {"values": ("a", "a"), "axis": 1},
          coreml("stack", values=(a, a), axis=1))  # fmt: skip


@pytest.mark.parametrize("sizes", [None, [1, 4, 2]])
def test_split_against_onnxruntime(sizes) -> None:
    x = fp16_values((2, 7 if sizes else 6, 3))
    if sizes:
        refs = run_ort("Split", [x, np.array(sizes, np.int64)], n_out=3, axis=1)
        consts = {"axis": 1, "split_sizes": i32(sizes)}
    else:
        refs = run_ort("Split", [x], n_out=3, axis=1, num_outputs=3, opset=18)
        consts = {"axis": -2, "num_splits": 3}
    exact("split", {"x": x}, consts, refs)


def test_tile_pad_and_band_part() -> None:
    x = fp16_values((2, 3))
    (ref,) = run_ort("Tile", [x, np.array([2, 3], np.int64)])
    exact("tile", {"x": x}, {"reps": i32([2, 3])}, ref)
    x4 = fp16_values((1, 2, 4, 5))
    for mode, onnx_mode in (("constant", "constant"), ("reflect", "reflect"),
                            ("replicate", "edge")):  # fmt: skip
        pads = np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64)
        args = [x4, pads] + ([np.array(2.5, np.float32)] if mode == "constant" else [])
        (ref,) = run_ort("Pad", args, mode=onnx_mode)
        consts = {"pad": i32([1, 3, 2, 1]), "mode": mode,
                  **({"constant_val": 2.5} if mode == "constant" else {})}  # fmt: skip
        exact("pad", {"x": x4}, consts, ref)
    square = fp16_values((2, 5, 5))
    for lower, upper in ((0, -1), (-1, 0), (1, 2)):
        exact("band_part", {"x": square}, {"lower": lower, "upper": upper},
              coreml("band_part", x=square, lower=lower, upper=upper))  # fmt: skip


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_against_onnxruntime(exclusive: bool, reverse: bool) -> None:
    x = RNG.integers(-9, 9, (3, 5)).astype(np.float32)  # small ints: exact in fp16 too
    (ref,) = run_ort("CumSum", [x, np.array(1, np.int64)], exclusive=int(exclusive),
                     reverse=int(reverse))  # fmt: skip
    exact("cumsum", {"x": x}, {"axis": 1, "exclusive": exclusive, "reverse": reverse}, ref)
    xi = x.astype(np.int32)
    exact("cumsum", {"x": xi}, {"axis": -1, "exclusive": exclusive, "reverse": reverse},
          ref.astype(np.int32), dtypes=("fp32",))  # fmt: skip


def test_fill_range_one_hot() -> None:
    exact("fill", {}, {"shape": i32([2, 3]), "value": 1.5}, np.full((2, 3), 1.5, np.float32))
    exact("fill", {"shape": i32([2, 1])}, {}, np.zeros((2, 1), np.float32), dtypes=("fp32",))
    x = fp16_values((3, 2))
    exact("fill_like", {"ref_tensor": x}, {"value": 7}, np.full((3, 2), 7, np.int32))
    (ref,) = run_ort("Range", [np.array(1, np.int32), np.array(20, np.int32),
                               np.array(3, np.int32)])  # fmt: skip
    exact("range_1d", {}, {"start": 1, "end": 20, "step": 3}, ref)
    (ref,) = run_ort("Range", [np.array(0.5, np.float32), np.array(-2, np.float32),
                               np.array(-0.75, np.float32)])  # fmt: skip
    exact("range_1d", {}, {"start": 0.5, "end": -2.0, "step": -0.75}, ref)
    indices = i32([[0, 3], [2, 1]])
    (ref,) = run_ort("OneHot", [indices.astype(np.int64), np.array(4, np.int64),
                                np.array([0, 5], np.float32)], axis=1)  # fmt: skip
    exact(
        "one_hot",
        {"indices": indices},
        {"one_hot_vector_size": 4, "axis": 1, "on_value": 5.0, "off_value": 0.0},
        ref,
    )
    # an index outside [0, depth) selects nothing (TensorFlow's one_hot, whose inputs MIL's
    # are): all off_value
    exact("one_hot", {"indices": i32([-1, 4])}, {"one_hot_vector_size": 4},
          np.zeros((2, 4), np.int32), dtypes=("fp32",))  # fmt: skip
    exact("one_hot", {"indices": i32([1, 0])}, {"one_hot_vector_size": 3},
          np.eye(3, dtype=np.int32)[[1, 0]], dtypes=("fp32",))  # fmt: skip


@pytest.mark.parametrize("ascending", [False, True])
def test_topk_and_argsort_against_onnxruntime(ascending: bool) -> None:
    x = RNG.permutation(30).reshape(5, 6).astype(np.float32)  # no ties
    values, indices = run_ort("TopK", [x, np.array([3], np.int64)], n_out=2, axis=1,
                              largest=int(not ascending))  # fmt: skip
    exact("topk", {"x": x}, {"k": 3, "axis": 1, "ascending": ascending},
          [values, indices.astype(np.int32)])  # fmt: skip
    exact("topk", {"x": x}, {"k": 3, "axis": -1, "ascending": ascending, "return_indices": False},
          [values])  # fmt: skip
    ref = coreml("argsort", x=x, axis=0, ascending=ascending)
    exact("argsort", {"x": x}, {"axis": 0, "ascending": ascending}, ref.astype(np.int32))


# --- gather and scatter ---------------------------------------------------------------------------


def test_gathers_against_onnxruntime() -> None:
    x = fp16_values((4, 5, 3))
    idx = i32([[3, -1], [0, 2]])
    (ref,) = run_ort("Gather", [x, idx.astype(np.int64)], axis=1)
    exact("gather", {"x": x, "indices": idx}, {"axis": 1}, ref)
    exact("gather", {"x": x}, {"indices": np.int32(2), "axis": 0}, x[2])
    along = RNG.integers(0, 5, (4, 2, 3)).astype(np.int32)
    (ref,) = run_ort("GatherElements", [x, along.astype(np.int64)], axis=1)
    exact("gather_along_axis", {"x": x, "indices": along}, {"axis": 1}, ref)
    nd = i32([[[1, 2], [3, 0]], [[0, 4], [2, 2]]])
    (ref,) = run_ort("GatherND", [x, nd.astype(np.int64)])
    exact("gather_nd", {"x": x, "indices": nd}, {}, ref)


def test_gather_batch_dims_against_coremltools() -> None:
    x = fp16_values((2, 4, 3))
    idx = i32([[0, 3], [1, 1]])
    ref = coreml("gather", x=x, indices=idx, axis=1, batch_dims=1)
    exact("gather", {"x": x, "indices": idx}, {"axis": 1, "batch_dims": 1}, ref)
    nd = i32([[[1], [3]], [[0], [2]]])
    (ref,) = run_ort("GatherND", [x, nd.astype(np.int64)], batch_dims=1)
    exact("gather_nd", {"x": x, "indices": nd}, {"batch_dims": 1}, ref)


SCATTER_MODES = {"update": "none", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@pytest.mark.parametrize("mode", sorted(SCATTER_MODES))
def test_scatters_against_onnxruntime(mode: str) -> None:
    data = RNG.integers(-4, 5, (4, 3)).astype(np.float32)
    updates = RNG.integers(-4, 5, (4, 3)).astype(np.float32)
    along = i32([[1, 0, 3], [2, 2, 0], [0, 1, 1], [3, 3, 2]])  # no repeats along the axis
    (ref,) = run_ort("ScatterElements", [data, along.astype(np.int64), updates], axis=0,
                     reduction=SCATTER_MODES[mode])  # fmt: skip
    exact("scatter_along_axis", {"data": data, "indices": along, "updates": updates},
          {"axis": 0, "mode": mode}, ref)  # fmt: skip
    nd = i32([[1], [3]])
    rows = updates[:2]
    (ref,) = run_ort("ScatterND", [data, nd.astype(np.int64), rows], reduction=SCATTER_MODES[mode])
    exact("scatter_nd", {"data": data, "indices": nd, "updates": rows}, {"mode": mode}, ref)
    ref = data.copy()
    for i, row in zip([2, 0], updates[:2], strict=True):
        ref[i] = {"update": row, "add": ref[i] + row, "mul": ref[i] * row,
                  "max": np.maximum(ref[i], row), "min": np.minimum(ref[i], row)}[mode]  # fmt: skip
    exact("scatter", {"data": data, "indices": i32([2, 0]), "updates": rows},
          {"axis": 0, "mode": mode}, ref)  # fmt: skip


def test_scatter_add_accumulates_repeated_indices() -> None:
    data = np.zeros((3, 2), np.float32)
    updates = np.ones((3, 2), np.float32)
    ref = np.array([[0, 0], [3, 3], [0, 0]], np.float32)  # the default mode is add
    exact("scatter", {"data": data, "updates": updates}, {"indices": i32([1, 1, 1])}, ref)


# --- cast, select, identity, non_zero ---------------------------------------------------------


@pytest.mark.parametrize("target", ["int32", "int8", "uint8", "int16", "uint16", "bool", "fp32"])
def test_cast_from_float_against_coremltools(target: str) -> None:
    x = np.array([[-3.75, -0.5, 0.0, 0.25, 2.5, 100.0]], np.float32)
    if target in ("uint8", "uint16"):
        x = np.abs(x)
    ref = coreml("cast", x=x, dtype=target)  # truncation toward zero, as numpy casts
    dtypes = ("fp32",) if target == "fp32" else ("fp32", "fp16")
    exact("cast", {"x": x}, {"dtype": target}, np.asarray(ref), dtypes=dtypes)


def test_cast_rounds_to_fp16_and_saturates_integers() -> None:
    x = np.array([0.1, 1e5, -70000.0, np.nan, 3e9], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        half = x.astype(np.float16)  # 1e5 -> inf, nan stays nan
    (got,) = run_mil("cast", {"x": x}, {"dtype": "fp16"}, half)
    np.testing.assert_array_equal(got, half)
    (got,) = run_mil("cast", {"x": x}, {"dtype": "int32"}, np.zeros(5, np.int32))
    np.testing.assert_array_equal(got, [0, 100000, -70000, 0, 2**31 - 1])


def test_select_identity_non_zero_against_onnxruntime() -> None:
    cond = RNG.random((3, 1)) < 0.5
    a, b = fp16_values((3, 4)), fp16_values((1, 4))
    (ref,) = run_ort("Where", [cond, a, b])
    exact("select", {"cond": cond, "a": a, "b": b}, {}, ref)
    exact("identity", {"x": a}, {}, a)
    x = RNG.integers(0, 2, (3, 4)).astype(np.float32)
    (ref,) = run_ort("NonZero", [x])
    want = np.ascontiguousarray(ref.T.astype(np.int32))
    # a data-dependent shape is declared with '?'
    program = build("non_zero", {"x": x}, {}, [want])
    f = program.functions[0]
    last = f.operations[-1]
    out = replace(last.outputs[0], type=MilTensorType("int32", ("?", 2)))
    f = replace(f, operations=(*f.operations[:-1], replace(last, outputs=(out,))))
    got = SimProgram(replace(program, functions=(f,))).run({"x": x})
    np.testing.assert_array_equal(got["y0"], want)


@pytest.mark.parametrize("mode", ["add", "sub", "mul", "div", "max", "min"])
def test_scatter_rounds_give_ufunc_at_bits(mode: str) -> None:
    # repeated targets are updated in rounds (the k-th update of each target in round k);
    # every target must see the same operations in the same order as numpy's ufunc.at
    from anekit.simulator.ops.gather import _MODES, ROUNDS_MAX, _accumulate

    rng = np.random.default_rng(len(mode))
    data = rng.standard_normal((12, 5)).astype(np.float32)
    data[0, 0] = np.nan
    for rows in (rng.integers(0, 12, 300), np.arange(12), np.zeros(ROUNDS_MAX + 1, np.int64)):
        updates = (rng.standard_normal((len(rows), 5)) * 3).astype(np.float32)
        updates[::7] = -0.0
        want, got = data.copy(), data.copy()
        with np.errstate(all="ignore"):
            _MODES[mode].at(want, (rows,), updates)
            _accumulate(got, (rows,), updates, _MODES[mode])
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    grid = (rng.integers(0, 4, (6, 7)), rng.integers(0, 3, (6, 7)))  # scatter_nd's index pairs
    cube = rng.standard_normal((4, 3, 2)).astype(np.float32)
    updates = rng.standard_normal((6, 7, 2)).astype(np.float32)
    want, got = cube.copy(), cube.copy()
    with np.errstate(all="ignore"):
        _MODES[mode].at(want, grid, updates)
        _accumulate(got, grid, updates, _MODES[mode])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
