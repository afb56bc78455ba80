"""Weight compression: a convolution weight emitted as a MIL constexpr op over compressed
data in the weight.bin, in the dialect of the target's MIL opset.

| scheme       | iOS 16 (M1, M2)                                   | iOS 18 (M3 and later)                                  |
|--------------|---------------------------------------------------|--------------------------------------------------------|
| ``int8``     | constexpr_affine_dequantize, int8, scale per output channel | constexpr_blockwise_shift_scale, int8, scale per output channel |
| ``int4``     | refused (iOS 16 quantizes to 8 bits only)         | constexpr_blockwise_shift_scale, int4, scale per block of 32 inputs of each output channel |
| ``palettize4``/``6`` | constexpr_lut_to_dense, one 16/64-entry table per tensor, indices packed in uint8 bytes | constexpr_lut_to_dense, a table per group of 16 output channels, uint4/uint6 indices |
| ``sparse``   | constexpr_sparse_to_dense, 50% of weights (smallest magnitudes) zero, packed bit mask | the same with a uint1 mask tensor |

Quantization is symmetric (no zero point). Palettes are 1-d k-means of the weights (Lloyd's
iterations on a fine histogram, initialised at quantiles). Only weights of at least
``MIN_ELEMENTS`` elements are compressed; smaller ones stay fp16.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import TargetError
from anekit.float16 import to_float16
from anekit.ir.engine import LayerView
from anekit.ir.graph import Graph

SCHEMES = ("int8", "int4", "palettize4", "palettize6", "sparse")
MIN_ELEMENTS = 4096
INT4_BLOCK = 32  # input channels sharing one int4 scale
LUT_GROUP = 16  # output channels sharing one palette (iOS 18)
SPARSITY = 0.5
_HIST_BINS = 4096
_LLOYD_STEPS = 12


@dataclass(frozen=True)
class Part:
    """One operand of the constexpr op: a const (written to the weight.bin when ``blob``)."""

    name: str  # the op's argument name
    array: np.ndarray  # unpacked values (blob) or the literal
    dtype: str  # MIL dtype
    blob: bool

    @property
    def nbytes(self) -> int:
        if not self.blob:  # a literal in the program text, not streamed from the weight.bin
            return 0
        bits = {"uint1": 1, "uint4": 4, "int4": 4, "uint6": 6, "int8": 8, "uint8": 8,
                "fp16": 16, "uint32": 32, "int32": 32}[self.dtype]  # fmt: skip
        return math.ceil(self.array.size * bits / 8)


@dataclass(frozen=True)
class Compressed:
    """A weight as a constexpr op: its type, its operands, and what it decodes to."""

    op: str
    parts: tuple[Part, ...]
    dense: np.ndarray  # the weight the op reconstructs (float32), for accuracy reports

    @property
    def nbytes(self) -> int:
        """Bytes the engine streams for this weight."""
        return sum(p.nbytes for p in self.parts)


def check_scheme(scheme: str, opset: str | None = None) -> None:
    """Refuse an unknown scheme, or one the dialect cannot express."""
    if scheme not in SCHEMES:
        raise TargetError(f"unknown compression '{scheme}'", hint=f"choose one of: {', '.join(SCHEMES)}")
    if scheme == "int4" and opset is not None and _ios(opset) < 18:
        raise TargetError(
            f"int4 weights need the iOS 18 MIL dialect (M3 and later); this target speaks {opset}",
            hint="use int8 or palettize4 on M1/M2",
        )


def compressible(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" and array.ndim == 4 and array.size >= MIN_ELEMENTS


def compress(weight: np.ndarray, scheme: str, opset: str) -> Compressed:
    """``weight`` [out, in, kh, kw] compressed by ``scheme`` for the ``opset`` dialect."""
    check_scheme(scheme, opset)
    w = np.asarray(weight, dtype=np.float32)
    ios18 = _ios(opset) >= 18
    if scheme in ("int8", "int4"):
        return _quantized(w, 8 if scheme == "int8" else 4, ios18)
    if scheme.startswith("palettize"):
        return _palettized(w, int(scheme[-1]), ios18)
    return _sparse(w, ios18)


def _ios(opset: str) -> int:
    return int(opset.removeprefix("ios"))


_fp16 = to_float16


def _quantized(w: np.ndarray, bits: int, ios18: bool) -> Compressed:
    out, cin = w.shape[:2]
    qmax = 2 ** (bits - 1) - 1
    block = INT4_BLOCK if bits == 4 and cin % INT4_BLOCK == 0 else cin
    blocks = w.reshape(out, cin // block, block, *w.shape[2:])
    peak = np.abs(blocks).max(axis=tuple(range(2, blocks.ndim)), keepdims=True)
    scale = _fp16(np.where(peak > 0, peak / qmax, 1.0)).astype(np.float32)
    q = np.clip(np.round(blocks / scale), -qmax - 1, qmax).astype(np.int8).reshape(w.shape)
    dense = (q.reshape(blocks.shape) * scale).reshape(w.shape)
    dtype = "int8" if bits == 8 else "int4"
    if ios18:
        scale_shape = (out, cin // block, *(1,) * (w.ndim - 2))
        parts = (Part("data", q, dtype, True),
                 Part("scale", _fp16(scale.reshape(scale_shape)), "fp16", True))  # fmt: skip
        return Compressed("constexpr_blockwise_shift_scale", parts, dense)
    parts = (
        Part("quantized_data", q, "int8", True),
        Part("zero_point", np.int8(0), "int8", False),
        Part("scale", _fp16(scale.reshape(out)), "fp16", True),
        Part("axis", np.int32(0), "int32", False),
    )
    return Compressed("constexpr_affine_dequantize", parts, dense)


def kmeans_1d(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``k`` sorted centroids of ``values`` and each value's centroid index."""
    flat = values.reshape(-1).astype(np.float64)
    lo, hi = float(flat.min()), float(flat.max())
    if hi == lo:
        return np.full(k, lo), np.zeros(flat.size, np.int64)
    counts, edges = np.histogram(flat, bins=_HIST_BINS, range=(lo, hi))
    mids = (edges[:-1] + edges[1:]) / 2
    cdf = np.cumsum(counts) / flat.size
    centers = mids[np.minimum(np.searchsorted(cdf, (np.arange(k) + 0.5) / k), _HIST_BINS - 1)]
    for _ in range(_LLOYD_STEPS):
        centers = np.unique(centers)
        bounds = (centers[:-1] + centers[1:]) / 2
        owner = np.searchsorted(bounds, mids)
        mass = np.bincount(owner, counts, len(centers))
        total = np.bincount(owner, counts * mids, len(centers))
        centers = np.where(mass > 0, total / np.maximum(mass, 1), centers)
    centers = np.sort(np.concatenate([centers, np.full(k - len(centers), centers[-1])]))
    index = np.searchsorted((centers[:-1] + centers[1:]) / 2, flat)
    return centers, index


def _palettized(w: np.ndarray, bits: int, ios18: bool) -> Compressed:
    k = 2**bits
    out = w.shape[0]
    if not ios18:
        centers, index = kmeans_1d(w, k)
        lut = _fp16(centers)
        packed = _pack(index, bits)
        parts = (
            Part("indices", packed, "uint8", True),
            Part("lut", lut, "fp16", True),
            Part("shape", np.array(w.shape, np.uint32), "uint32", False),
        )
        return Compressed("constexpr_lut_to_dense", parts, lut.astype(np.float32)[index].reshape(w.shape))
    group = LUT_GROUP if out % LUT_GROUP == 0 else out
    rows = w.reshape(out // group, -1)
    luts = np.empty((out // group, k), np.float16)
    indices = np.empty(rows.shape, np.uint8)
    for g in range(rows.shape[0]):
        centers, index = kmeans_1d(rows[g], k)
        luts[g], indices[g] = _fp16(centers), index
    index = indices.reshape(w.shape)
    lut = luts.reshape(out // group, *(1,) * (w.ndim - 1), k, 1)
    dense = luts.astype(np.float32)[np.arange(rows.shape[0])[:, None], indices].reshape(w.shape)
    parts = (Part("indices", index, f"uint{bits}", True), Part("lut", lut, "fp16", True))
    return Compressed("constexpr_lut_to_dense", parts, dense)


def _pack(index: np.ndarray, bits: int) -> np.ndarray:
    """n-bit values packed least significant bit first into bytes (iOS 16 lut indices)."""
    stream = ((index.reshape(-1, 1) >> np.arange(bits)) & 1).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little")


def _sparse(w: np.ndarray, ios18: bool) -> Compressed:
    flat = np.abs(w).reshape(-1)
    keep = flat.size - int(flat.size * SPARSITY)
    threshold_index = np.argpartition(-flat, keep - 1)[:keep]
    mask = np.zeros(flat.size, bool)
    mask[threshold_index] = True
    mask = mask.reshape(w.shape)
    values = _fp16(w[mask])
    dense = np.zeros(w.shape, np.float32)
    dense[mask] = values
    if ios18:
        parts = (Part("nonzero_data", values, "fp16", True), Part("mask", mask.astype(np.uint8), "uint1", True))
    else:
        parts = (
            Part("nonzero_data", values, "fp16", True),
            Part("mask", np.packbits(mask.reshape(-1), bitorder="little"), "uint8", True),
            Part("shape", np.array(w.shape, np.uint32), "uint32", False),
        )
    return Compressed("constexpr_sparse_to_dense", parts, dense)


def conv_weights(graph: Graph, segments: Sequence[Any]) -> list[str]:
    """The constants that are convolution weights in engine segments and large enough to
    compress (a plain conv node, or an engine layer whose main op is a conv)."""
    engine = {n for s in segments if s.device == "ane" for n in s.nodes}
    found: dict[str, None] = {}
    for node in graph.nodes:
        if node.name not in engine:
            continue
        if node.op == "conv":
            main = node.inputs
        elif node.op == "ane_layer" and LayerView(node).main == "conv":
            main = LayerView(node).main_inputs
        else:
            continue
        if len(main) > 1 and graph.is_constant(main[1]) and compressible(graph.constant(main[1])):
            found[main[1]] = None
    return list(found)


def compress_graph(graph: Graph, segments: Sequence[Any], scheme: str, opset: str) -> dict[str, Compressed]:
    """Every compressible convolution weight of the engine segments, compressed."""
    return {name: compress(graph.constant(name), scheme, opset)
            for name in conv_weights(graph, segments)}  # fmt: skip


def accuracy_report(graph: Graph, compressed: Mapping[str, Compressed]) -> dict[str, Any]:
    """How far each compressed weight decodes from the original, and the bytes it saves:
    relative error ||decoded - original|| / ||original|| per weight, fp16 and stored bytes."""
    rows = []
    for name, c in compressed.items():
        w = np.asarray(graph.constant(name), dtype=np.float32)
        norm = float(np.linalg.norm(w))
        err = float(np.linalg.norm(c.dense - w)) / norm if norm else 0.0
        rows.append({"weight": name, "shape": list(w.shape), "op": c.op,
                     "fp16_bytes": w.size * 2, "stored_bytes": c.nbytes,
                     "relative_error": round(err, 6)})  # fmt: skip
    fp16 = sum(r["fp16_bytes"] for r in rows)
    stored = sum(r["stored_bytes"] for r in rows)
    errors = [r["relative_error"] for r in rows]
    return {
        "weights": len(rows),
        "fp16_bytes": fp16,
        "stored_bytes": stored,
        "ratio": round(fp16 / stored, 3) if stored else None,
        "worst_relative_error": max(errors, default=0.0),
        "mean_relative_error": round(float(np.mean(errors)), 6) if errors else 0.0,
        "per_weight": rows,
    }
