"""Where each weight of the source model lies in a bundle's weight files (``weights.json``).

Recorded at compile time: a compiled program's weight blobs hold the engine graph's
constants, and the passes make a constant that is only a layout change of a source weight
(transposed, reshaped, sliced) as a numpy view of it. So a blob whose engine constant is a
view of a source constant holds exactly that source weight, at an element offset and with
element strides inside it; that geometry is what :func:`record` writes down, per blob:
``{"segment", "record" (the BLOBFILE offset), "dtype" (as stored), "shape", "start",
"strides"}``. Rewriting the weight then needs no compiler: take the same view of the new
array and convert it as the compiler did.

A source weight that no blob holds unchanged (folded into another constant, e.g. a batch
norm into a convolution, or inline in the MIL text because it is tiny) is listed under
``fixed`` with the reason: it can only change by recompiling.

The file is read as untrusted input: every field is checked, and every placement is
bounds-checked against the source weight's size.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError, FormatError
from anekit.formats.bundle import canonical_json
from anekit.formats.mil import BlobFile, dtype_info, print_program

WEIGHT_MAP = "weights.json"
FORMAT = "anekit-weight-map"
VERSION = 1
_FLOATS = {n: dtype_info(n).little_endian for n in ("fp16", "fp32")}  # stored weight dtypes
MAX_RANK = 8


@dataclass(frozen=True)
class Placement:
    """One blob holding a view of a source weight: its element ``start`` and ``strides``."""

    segment: int
    record: int  # the BLOBFILE offset: the blob's record in the segment's weight file
    dtype: str  # how the blob stores it: fp16 or fp32
    shape: tuple[int, ...]
    start: int
    strides: tuple[int, ...]

    def take(self, flat: np.ndarray) -> np.ndarray:
        """The blob's view of a source weight given as a flat C-ordered array."""
        item = flat.itemsize
        return np.ndarray(
            self.shape, flat.dtype, flat, self.start * item, tuple(s * item for s in self.strides)
        )


@dataclass(frozen=True)
class SourceWeight:
    name: str
    shape: tuple[int, ...]
    dtype: str  # the source array's float dtype: fp16 or fp32
    placements: tuple[Placement, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class WeightMap:
    weights: Mapping[str, SourceWeight]
    fixed: Mapping[str, str]  # source weight -> why it cannot be updated in place

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "format": FORMAT,
                "version": VERSION,
                "weights": {
                    w.name: {
                        "shape": list(w.shape),
                        "dtype": w.dtype,
                        "placements": [
                            {
                                "segment": p.segment,
                                "record": p.record,
                                "dtype": p.dtype,
                                "shape": list(p.shape),
                                "start": p.start,
                                "strides": list(p.strides),
                            }  # fmt: skip
                            for p in w.placements
                        ],
                    }
                    for w in self.weights.values()
                },
                "fixed": dict(self.fixed),
            }
        )

    @classmethod
    def parse(cls, raw: bytes, where: str, segments: int) -> WeightMap:
        """Read ``weights.json`` bytes, checking every field (``segments``: how many the
        bundle has)."""
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise FormatError(f"{WEIGHT_MAP} is not valid JSON text: {exc}", where=where) from None
        c = _Check(where)
        c.keys(data, "", {"format", "version", "weights", "fixed"})
        if data["format"] != FORMAT or data["version"] != VERSION:
            raise c.fail("format", f"expected {FORMAT!r} version {VERSION}")
        weights = {}
        for name, w in c.obj(data["weights"], "weights").items():
            path = f"weights[{name!r}]"
            c.keys(w, path, {"shape", "dtype", "placements"})
            shape = c.shape(w["shape"], f"{path}.shape")
            dtype = c.choice(w["dtype"], f"{path}.dtype", _FLOATS)
            size = int(np.prod(shape, dtype=np.int64))
            placements = []
            for k, p in enumerate(c.list_(w["placements"], f"{path}.placements")):
                at = f"{path}.placements[{k}]"
                c.keys(p, at, {"segment", "record", "dtype", "shape", "start", "strides"})
                pl = Placement(
                    segment=c.int_(p["segment"], f"{at}.segment", 0, segments - 1),
                    record=c.int_(p["record"], f"{at}.record", 0, 2**62),
                    dtype=c.choice(p["dtype"], f"{at}.dtype", _FLOATS),
                    shape=c.shape(p["shape"], f"{at}.shape"),
                    start=c.int_(p["start"], f"{at}.start", 0, 2**62),
                    strides=tuple(
                        c.int_(s, f"{at}.strides", -(2**62), 2**62)
                        for s in c.list_(p["strides"], f"{at}.strides", MAX_RANK)
                    ),
                )
                if len(pl.strides) != len(pl.shape) or not _inside(pl, size):
                    raise c.fail(at, f"does not lie inside the {list(shape)} weight")
                placements.append(pl)
            weights[name] = SourceWeight(name, shape, dtype, tuple(placements))
        fixed = {
            name: c.str_(why, f"fixed[{name!r}]")
            for name, why in c.obj(data["fixed"], "fixed").items()
        }
        return cls(weights, fixed)


def record(source: Any, graph: Any, segments: Sequence[Any], min_blob: int) -> WeightMap:
    """The weight map of a compiled model: ``source`` and ``graph`` are its source and
    engine graphs, ``segments`` the emitted segments (with their ``constants``: const op
    name -> the engine constant it holds unchanged), ``min_blob`` the fewest elements a
    weight needs to be stored in a weight file rather than inline."""
    candidates = {
        name: array
        for name, array in source.constants.items()
        if array.dtype in (np.float16, np.float32) and array.flags.c_contiguous and array.size
    }
    spans = _Spans(
        sorted(
            (array.ctypes.data, array.ctypes.data + array.nbytes, name)
            for name, array in candidates.items()
        )
    )
    found: dict[str, list[Placement]] = {name: [] for name in candidates}
    copies: dict[str, str] = {}  # source weight -> an engine constant derived by computation
    for s in segments:
        blobs = _blobfiles(s.program)
        for const, ir_name in s.constants.items():
            blob = blobs.get(const)
            array = graph.constants.get(ir_name)
            if blob is None or array is None:
                continue
            hit = _owner(array, spans, candidates)
            if hit is None:
                copies.setdefault(ir_name.split("/", 1)[0], ir_name)
                continue
            name, start, strides = hit
            offset, dtype, shape = blob
            if shape != tuple(array.shape):
                continue
            found[name].append(Placement(s.index, offset, dtype, shape, start, strides))
    weights: dict[str, SourceWeight] = {}
    fixed: dict[str, str] = {}
    for name, array in candidates.items():
        placements = found[name]
        dtype = "fp16" if array.dtype == np.float16 else "fp32"
        if name in copies and placements:
            fixed[name] = (
                f"besides its own blobs, the compiler baked a computed copy of it "
                f"('{copies[name]}'): updating it in place would leave that copy stale"
            )
        elif placements:
            weights[name] = SourceWeight(name, tuple(array.shape), dtype, tuple(placements))
        elif array.size < min_blob:
            fixed[name] = f"it has {array.size} elements, so the MIL text holds it inline"
        else:
            fixed[name] = (
                "no weight file holds it unchanged: the compiler folded it into other "
                "constants (or no operation uses it)"
            )
    return WeightMap(weights, fixed)


def _blobfiles(program: Any) -> dict[str, tuple[int, str, tuple[int, ...]]]:
    """const op name -> (BLOBFILE offset, stored dtype, shape)."""
    out = {}
    for function in program.functions:
        for op in function.operations:
            if op.op != "const":
                continue
            for key, value in op.attributes:
                if key == "val" and isinstance(value, BlobFile):
                    t = value.type
                    out[op.outputs[0].name] = (
                        value.offset,
                        t.dtype,
                        tuple(int(d) for d in t.shape),
                    )
    return out


class _Spans:
    """The source weights' memory ranges (lo, hi, name), sorted by start, with the furthest
    end reached by any range up to each one: the ranges holding an address are found by
    bisection and a backward walk that stops where no earlier range reaches it (a scan of
    every range per engine constant is quadratic in a model's weights)."""

    def __init__(self, spans: list[tuple[int, int, str]]):
        self.spans = spans
        self.starts = [lo for lo, _, _ in spans]
        self.reach = list(itertools.accumulate((hi for _, hi, _ in spans), max))

    def holding(self, ptr: int) -> Iterator[tuple[int, int, str]]:
        """The ranges with lo <= ptr < hi, the latest start first."""
        k = bisect.bisect_right(self.starts, ptr) - 1
        while k >= 0 and self.reach[k] > ptr:
            lo, hi, name = self.spans[k]
            if ptr < hi:
                yield lo, hi, name
            k -= 1


def _owner(
    array: np.ndarray, spans: _Spans, candidates: Mapping[str, np.ndarray]
) -> tuple[str, int, tuple[int, ...]] | None:
    """The source weight ``array`` is a view of, with its element start and strides."""
    if not array.size:
        return None
    ptr = array.ctypes.data
    for lo, _hi, name in reversed(list(spans.holding(ptr))):  # earliest start first, as before
        source = candidates[name]
        item = source.itemsize
        if array.dtype != source.dtype or (ptr - lo) % item or any(s % item for s in array.strides):
            continue
        start, strides = (ptr - lo) // item, tuple(s // item for s in array.strides)
        placement = Placement(0, 0, "fp16", tuple(array.shape), start, strides)
        if _inside(placement, source.size):
            return name, start, strides
    return None


def _inside(p: Placement, size: int) -> bool:
    """Every element of the view lies inside a weight of ``size`` elements."""
    if any(d < 0 for d in p.shape):
        return False
    if 0 in p.shape:
        return True
    low = p.start + sum((d - 1) * s for d, s in zip(p.shape, p.strides, strict=True) if s < 0)
    high = p.start + sum((d - 1) * s for d, s in zip(p.shape, p.strides, strict=True) if s > 0)
    return 0 <= low and high < size


class _Check:
    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, message: str) -> FormatError:
        return FormatError(f"{WEIGHT_MAP} field '{path}': {message}", where=self.where)

    def obj(self, data: Any, path: str) -> dict:
        if not isinstance(data, dict):
            raise self.fail(path, "expected an object")
        return data

    def keys(self, data: Any, path: str, keys: set[str]) -> None:
        if set(self.obj(data, path)) != keys:
            raise self.fail(path, f"expected exactly the keys {sorted(keys)}")

    def list_(self, data: Any, path: str, limit: int = 1 << 16) -> list:
        if not isinstance(data, list) or len(data) > limit:
            raise self.fail(path, f"expected a list of at most {limit} entries")
        return data

    def int_(self, data: Any, path: str, low: int, high: int) -> int:
        if not isinstance(data, int) or isinstance(data, bool) or not low <= data <= high:
            raise self.fail(path, f"expected an integer in [{low}, {high}], found {data!r}")
        return data

    def str_(self, data: Any, path: str) -> str:
        if not isinstance(data, str):
            raise self.fail(path, "expected a string")
        return data

    def choice(self, data: Any, path: str, choices: Mapping[str, Any]) -> str:
        if data not in choices:
            raise self.fail(path, f"expected one of {sorted(choices)}, found {data!r}")
        return data

    def shape(self, data: Any, path: str) -> tuple[int, ...]:
        return tuple(self.int_(d, path, 0, 2**31 - 1) for d in self.list_(data, path, MAX_RANK))


def read(source: Path | bytes | None, where: str, segments: int) -> WeightMap:
    """A program's weight map from its file (a verified path) or bytes."""
    if source is None:
        raise AnekitError(
            "this program has no weight map, so its weights cannot be named or updated",
            where=where,
            hint="compile the model with anekit.compile (bundles it writes carry weights.json)",
        )
    raw = source.read_bytes() if isinstance(source, Path) else source
    return WeightMap.parse(raw, where, segments)


def identity(program: Any) -> str:
    """sha256 over every segment's MIL text digest and the weight keys it reads (Orion
    section 5.1: the engine keeps a program's identity while text and keys are unchanged)."""
    digest = hashlib.sha256()
    for seg, mil_program in zip(program.segments, program.programs, strict=True):
        entry = program.manifest.files.get(seg.program)
        if entry is not None:
            text = entry.sha256
        else:  # a bare MIL file: its text as printed
            text = hashlib.sha256(print_program(mil_program).encode()).hexdigest()
        keys = sorted(
            {
                value.path
                for function in mil_program.functions
                for op in function.operations
                for _, value in (*op.inputs, *op.attributes)
                if isinstance(value, BlobFile)
            }
        )
        digest.update(json.dumps([seg.index, text, keys]).encode())
    return digest.hexdigest()
