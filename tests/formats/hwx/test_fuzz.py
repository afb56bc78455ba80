"""Mutated real .hwx files decode or raise FormatError, nothing else (the small, deterministic fuzz)."""

from __future__ import annotations

import json
import struct
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.formats.fuzz_benchmark import load_fuzz_benchmark

from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import HWX_IDS, fixture_bytes

EXTREMES = (
    0,
    1,
    4,
    8,
    0x40,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFE,
    0xFFFFFFFF,
)


@cache
def pristine(name: str) -> bytes:
    return fixture_bytes(name)


@cache
def structural_words(name: str) -> tuple[int, ...]:
    """Offsets of 32-bit fields that steer parsing: header, commands, sections, symtab, chain."""
    f = hwx.read(pristine(name))
    offsets = [4 * i for i in range(8)]
    for command in f.commands:
        offsets += range(command.offset, command.offset + min(command.size, 24), 4)
    for segment in f.segments:
        for i in range(len(segment.sections)):
            base = segment.command_offset + 72 + 80 * i
            offsets += range(base + 32, base + 64, 4)
    offsets += [s.entry_offset for s in f.symbols] + [r.entry_offset + 4 for r in f.relocations]
    text = f.section("__TEXT", "__text")
    for descriptor in f.task_descriptors:
        offsets += [text.offset + descriptor.offset + 0x1C] + [
            text.offset + s.offset for s in descriptor.streams
        ]
    return tuple(offsets)


@st.composite
def mutated_fixture(draw: st.DrawFn) -> tuple[str, str, bytes]:
    name = draw(st.sampled_from(HWX_IDS))
    data = bytearray(pristine(name))
    where = st.one_of(st.integers(0, 0x1000), st.integers(0, len(data) - 1))
    kind = draw(st.sampled_from(["flip", "overwrite", "insert", "delete", "truncate", "field"]))
    if kind == "flip":
        flips = draw(st.lists(st.tuples(where, st.integers(0, 7)), min_size=1, max_size=8))
        for offset, bit in flips:
            data[offset] ^= 1 << bit
        detail = str(flips)
    elif kind == "overwrite":
        offset, run = draw(where), draw(st.binary(min_size=1, max_size=16))
        data[offset : offset + len(run)] = run
        detail = f"0x{offset:x} {run.hex()}"
    elif kind == "insert":
        offset, run = draw(where), draw(st.binary(min_size=1, max_size=32))
        data[offset:offset] = run
        detail = f"0x{offset:x} {run.hex()}"
    elif kind == "delete":
        offset, size = draw(where), draw(st.integers(1, 64))
        del data[offset : offset + size]
        detail = f"0x{offset:x}+{size}"
    elif kind == "truncate":
        size = draw(st.one_of(st.integers(0, 0x1000), st.integers(0, len(data) - 1)))
        del data[size:]
        detail = f"0x{size:x}"
    else:
        offset = draw(st.sampled_from(structural_words(name)))
        value = draw(st.one_of(st.sampled_from(EXTREMES), st.integers(0, 0xFFFFFFFF)))
        struct.pack_into("<I", data, offset, value)
        detail = f"0x{offset:x} = 0x{value:x}"
    return name, f"{kind} {detail}", bytes(data)


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_fixture())
def test_mutated_fixture_decodes_or_raises_format_error(case):
    name, description, data = case
    try:
        decoded = hwx.read(data)
    except FormatError as exc:
        assert exc.message and exc.where is not None  # always says where, usually an offset
        return
    json.loads(decoded.to_json())  # what `inspect --json` does must not fail either


def test_fuzz_benchmark_runs_and_finds_nothing(tmp_path):
    fuzz = load_fuzz_benchmark()
    out = tmp_path / "fuzz.json"
    cases = 6 * len(HWX_IDS)
    assert fuzz.main(["--targets", "hwx", "--cases", str(cases), "--seed", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["cases"] == cases and doc["findings"] == 0 and doc["finding_records"] == []
    fixtures = doc["targets"]["hwx"]["fixtures"]
    assert set(fixtures) == set(HWX_IDS)
    assert all(t["ok"] + t["format_error"] == t["cases"] == 6 for t in fixtures.values())


def test_fuzz_benchmark_reports_a_planted_bug_with_a_replayable_seed():
    fuzz = load_fuzz_benchmark()

    def fragile_decode(data: bytes) -> None:
        if len(data) < 32:
            raise IndexError("planted: short input")
        hwx.read(data)

    real = fuzz.hwx_target()
    planted = fuzz.FuzzTarget(
        "hwx", real.fixtures, fragile_decode, real.fields, lambda data: [0, 8, 16]
    )
    fixture = next(p for p in fuzz.prepare(planted) if p.name == "h13_relu")
    records = [fuzz.run_case(planted, fixture, 3, case)[2] for case in range(120)]
    findings = [r for r in records if r is not None]
    assert findings, "truncations below 32 bytes must be reported"
    for record in findings:
        assert record["mutation"].startswith("truncate at")
        assert "IndexError: planted" in record["problem"]
        target, fixture_name, seed, case = record["replay"].split(":")
        assert (target, fixture_name, int(seed)) == ("hwx", "h13_relu", 3)
        # Replaying the case seed regenerates the same mutation.
        again = fuzz.run_case(planted, fixture, 3, int(case))[2]
        assert again == record


@pytest.mark.parametrize("name", ["h13_relu", "h13_gemm"])
def test_every_truncation_of_the_load_commands_is_a_format_error(name):
    data = pristine(name)
    end = 32 + struct.unpack_from("<I", data, 0x14)[0]
    for size in range(0, end, 7):
        with pytest.raises(FormatError):
            hwx.read(data[:size])
