"""Mutated Apple programs run in the emulator or raise FormatError, nothing else, quickly.

(The long run is benchmarks/fuzz_formats.py --targets hwx.engine; this is its small,
deterministic form.)"""

from __future__ import annotations

import struct
import time
from functools import cache

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit.emulator import EngineProgram
from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import HWX

NAMES = ("relu", "sigmoid", "conv", "gemm", "sum", "concat", "mul_zin7")
EXTREMES = (0, 1, 0x40, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


@cache
def _program(name: str) -> tuple[bytes, tuple[int, ...]]:
    """The file and the offsets of every register word its descriptors write."""
    data = (HWX / f"h13_{name}.hwx").read_bytes()
    f = hwx.parse(data)
    text = f.section("__TEXT", "__text")
    offsets = []
    for td in f.task_descriptors:
        offsets += range(text.offset + td.offset, text.offset + td.offset + 0x28, 4)
        for stream in td.streams:
            offsets += range(text.offset + stream.offset + 4, text.offset + stream.offset + 4 + 4 * len(stream.words), 4)  # fmt: skip
    return data, tuple(offsets)


def _runs_or_refuses(data: bytes) -> None:
    start = time.perf_counter()
    try:
        program = EngineProgram(data)
        feeds = {t.name: np.ones(t.shape, np.float32) for t in program.inputs}
        program.run(feeds)
    except FormatError:
        pass
    assert time.perf_counter() - start < 2.0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    pick=st.integers(min_value=0),
    value=st.one_of(st.sampled_from(EXTREMES), st.integers(0, 0xFFFFFFFF)),
    bit=st.integers(0, 31),
    flip=st.booleans(),
)
def test_a_corrupted_register_runs_or_is_refused(name, pick, value, bit, flip):
    data, offsets = _program(name)
    at = offsets[pick % len(offsets)]
    mutated = bytearray(data)
    (old,) = struct.unpack_from("<I", mutated, at)
    struct.pack_into("<I", mutated, at, old ^ (1 << bit) if flip else value)
    _runs_or_refuses(bytes(mutated))
