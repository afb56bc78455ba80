"""Compressed-weight ops against coremltools' own decompress functions, and (de)quantize.

The oracles are the ``decompress`` static methods coremltools uses to materialise these ops
(``iOS16/constexpr_ops.py``, ``iOS18/compression.py``). Results must be equal: the
simulator computes in float32 like they do, and fp16 outputs round the same float32 values.
Weights also come from a weight.bin (int4/uint4/uint2 blobs, as Core ML stores them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit.formats.blob import BlobWriter
from anekit.formats.mil import Binding, Function, MilProgram, MilTensorType, blob_const, operation
from anekit.simulator import SimProgram
from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import coreml, run_mil
from tests.simulator.test_ops_linear import assert_fp16_rounded

ct_ops16 = pytest.importorskip("coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops")
ct_ops18 = pytest.importorskip("coremltools.converters.mil.mil.ops.defs.iOS18.compression")

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("vector", [False, True])
def test_affine_dequantize(dtype: str, vector: bool) -> None:
    data = RNG.integers(0, 256, (4, 6)).astype(np.uint8)
    scale = np.array([0.5, 0.25, 2.0, 0.125], np.float32) if vector else np.float32(0.5)
    zero = np.array([128, 0, 3, 255], np.uint8) if vector else np.uint8(100)
    ref = ct_ops16.constexpr_affine_dequantize.decompress(data, zero, scale, 0)
    consts = {"quantized_data": data, "zero_point": zero, "scale": scale, "axis": 0}
    (got,) = run_mil("constexpr_affine_dequantize", {}, consts, ref.astype(np.float32),
                     dtype=dtype)  # fmt: skip
    np.testing.assert_array_equal(got, ref.astype(got.dtype))


def test_blockwise_shift_scale() -> None:
    data = RNG.integers(-8, 8, (4, 6)).astype(np.int8)
    scale = RNG.uniform(0.1, 1, (2, 3)).astype(np.float16).astype(np.float32)
    offset = RNG.integers(-2, 2, (2, 3)).astype(np.int8)
    ref = ct_ops18.constexpr_blockwise_shift_scale.decompress(data, scale, offset)
    consts = {"data": data, "scale": scale, "offset": offset}
    (got,) = run_mil("constexpr_blockwise_shift_scale", {}, consts, ref.astype(np.float32))
    np.testing.assert_array_equal(got, ref)
    ref = ct_ops18.constexpr_blockwise_shift_scale.decompress(data, scale, None)
    (got,) = run_mil("constexpr_blockwise_shift_scale", {}, {"data": data, "scale": scale},
                     ref.astype(np.float32), dtype="fp16")  # fmt: skip
    np.testing.assert_array_equal(got, ref.astype(np.float16))


def test_lut_to_dense_ios16_packed_indices() -> None:
    lut = RNG.uniform(-1, 1, 4).astype(np.float16).astype(np.float32)
    shape = np.array([3, 5], np.uint32)
    indices = RNG.integers(0, 256, 4).astype(np.uint8)  # ceil(2 bits * 15 / 8) = 4 bytes
    ref = ct_ops16.constexpr_lut_to_dense.decompress(lut, indices, shape)
    (got,) = run_mil("constexpr_lut_to_dense", {}, {"indices": indices, "lut": lut,
                     "shape": shape}, ref, const_dtypes={"shape": "uint32"})  # fmt: skip
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("vector_axis", [None, 0, 1])
def test_lut_to_dense_ios18_blocks_and_vectors(vector_axis: int | None) -> None:
    indices = RNG.integers(0, 4, (4, 6)).astype(np.uint8)
    vector = 1 if vector_axis is None else 3
    lut = RNG.uniform(-1, 1, (2, 1, 4, vector)).astype(np.float32)  # two tables along axis 0
    ref = ct_ops18.constexpr_lut_to_dense.decompress(indices, lut, vector_axis)
    consts = {"indices": indices, "lut": lut, **({} if vector_axis is None else
              {"vector_axis": vector_axis})}  # fmt: skip
    (got,) = run_mil("constexpr_lut_to_dense", {}, consts, ref, const_dtypes={"indices": "uint2"})
    np.testing.assert_array_equal(got, ref)


def test_sparse_to_dense_both_forms() -> None:
    dense = np.where(RNG.random((3, 6)) < 0.5, RNG.uniform(-2, 2, (3, 6)), 0).astype(np.float32)
    flags = dense != 0
    nonzero = dense[flags]
    mask = np.packbits(flags.reshape(-1), bitorder="little")
    ref = ct_ops16.constexpr_sparse_to_dense.decompress(nonzero, mask, (3, 6))
    consts = {"nonzero_data": nonzero, "mask": mask, "shape": np.array([3, 6], np.uint32)}
    (got,) = run_mil("constexpr_sparse_to_dense", {}, consts, ref,
                     const_dtypes={"shape": "uint32"})  # fmt: skip
    np.testing.assert_array_equal(got, dense)
    ref = ct_ops18.constexpr_sparse_to_dense.decompress(nonzero, flags.astype(np.uint8))
    (got,) = run_mil("constexpr_sparse_to_dense", {}, {"nonzero_data": nonzero,
                     "mask": flags.astype(np.uint8)}, ref, const_dtypes={"mask": "uint1"})  # fmt: skip
    np.testing.assert_array_equal(got, dense)


def test_constexpr_cast_and_quantize_dequantize() -> None:
    half = RNG.uniform(-2, 2, (3, 4)).astype(np.float16)
    (got,) = run_mil("constexpr_cast", {}, {"source_val": half, "output_dtype": "fp32"},
                     half.astype(np.float32), const_dtypes={"source_val": "fp16"})  # fmt: skip
    np.testing.assert_array_equal(got, half.astype(np.float32))
    x = RNG.uniform(-3, 3, (2, 5)).astype(np.float32)
    scale, zero = np.float32(0.05), np.int8(3)
    (ref,) = run_ort("QuantizeLinear", [x, np.array(scale), np.array(zero)])
    ours = coreml("quantize", input=x, scale=scale, zero_point=zero, output_dtype="int8")
    np.testing.assert_array_equal(ours, ref)
    (got,) = run_mil("quantize", {"input": x}, {"scale": scale, "zero_point": zero,
                     "output_dtype": "int8"}, ref)  # fmt: skip
    np.testing.assert_array_equal(got, ref)
    (back,) = run_ort("DequantizeLinear", [ref, np.array(scale), np.array(zero)])
    (got,) = run_mil("dequantize", {"input": ref}, {"scale": scale, "zero_point": zero}, back)
    np.testing.assert_array_equal(got, back)


def test_int4_weights_from_weight_bin_feed_a_conv(tmp_path: Path) -> None:
    # a palettized / int4 conv as Core ML stores it: int4 data and fp16 scales in weight.bin
    data = RNG.integers(-8, 8, (8, 4, 1, 1)).astype(np.int8)
    scale = RNG.uniform(0.01, 0.1, (8, 1, 1, 1)).astype(np.float16)
    writer = BlobWriter()
    data_at = writer.add(data, "int4")
    scale_at = writer.add(scale)
    (tmp_path / "weights").mkdir()
    writer.write(tmp_path / "weights" / "weight.bin")
    x_t = MilTensorType("fp16", (1, 4, 1, 16))
    w_t = MilTensorType("fp16", (8, 4, 1, 1))
    ops = (
        blob_const("q", MilTensorType("int4", data.shape), data_at),
        blob_const("s", MilTensorType("fp16", scale.shape), scale_at),
        operation("constexpr_blockwise_shift_scale", ("w", w_t), {"data": "q", "scale": "s"}),
        operation("conv", ("y", MilTensorType("fp16", (1, 8, 1, 16))), {"x": "x", "weight": "w"}),
    )
    f = Function("main", "ios18", (Binding("x", x_t),), ops, ("y",))
    program = SimProgram(MilProgram("1.3", (), (f,)), tmp_path)
    x = RNG.uniform(-1, 1, (1, 4, 1, 16)).astype(np.float16)
    weight = ct_ops18.constexpr_blockwise_shift_scale.decompress(data, scale, None)
    (ref,) = run_ort("Conv", [x.astype(np.float32), weight.astype(np.float32)])
    assert_fp16_rounded(program.run({"x": x})["y"], ref)
