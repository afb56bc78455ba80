"""Mutation fuzzer for anekit's format readers: every mutated fixture must decode or raise FormatError.

Each target is one `FuzzTarget` entry (a name, its fixtures, how to decode bytes, and the
offsets worth corrupting). A case takes one fixture, applies one seeded mutation (bit
flips, random overwrites, inserted or deleted runs, a header/table field set to an
extreme value, truncation at a structural boundary) and decodes the result. Anything
other than success or `anekit.errors.FormatError` (another exception, or a case slower
than the time limit) is a finding, recorded with its case seed so it can be replayed:

    python benchmarks/fuzz_formats.py                  # 12,000 cases per target, seed 6
    python benchmarks/fuzz_formats.py --targets hwx    # only the .hwx reader
    python benchmarks/fuzz_formats.py --targets netplist netplist.weights
    python benchmarks/fuzz_formats.py --replay hwx:h13_relu:6:417

Results go to benchmarks/results/fuzz_formats.json (written atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anekit.errors import FormatError

def _fixtures() -> Path:
    """$ANEKIT_FIXTURES, else the shared/fixtures folder beside this checkout, else /work/shared."""
    if os.environ.get("ANEKIT_FIXTURES"):
        return Path(os.environ["ANEKIT_FIXTURES"])
    beside = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return beside if beside.is_dir() else Path("/work/shared/fixtures")


FIXTURES = _fixtures()
RESULTS = Path(__file__).resolve().parent / "results" / "fuzz_formats.json"
DEFAULT_SEED = 6
DEFAULT_CASES = 12_000
SLOW_CASE_SECONDS = 2.0
EXTREME_VALUES = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    0x10,
    0x3F,
    0x40,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
)


@dataclass(frozen=True)
class Field:
    """A little-endian integer in a fixture worth corrupting (header, table entry, count)."""

    offset: int
    size: int  # 1, 2, 4 or 8 bytes
    name: str


@dataclass(frozen=True)
class FuzzTarget:
    """One reader under test. `decode` must do everything a user-facing command does."""

    name: str
    fixtures: Callable[[], list[tuple[str, bytes]]]  # (name, pristine bytes)
    decode: Callable[[bytes], Any]
    fields: Callable[[bytes], list[Field]]  # structural fields of a pristine fixture
    boundaries: Callable[[bytes], list[int]]  # offsets where truncation is interesting
    # mutations only this target uses (e.g. structure-aware ones), on top of MUTATIONS
    mutations: dict[str, Callable[[random.Random, Prepared], tuple[bytes, str]]] = field(
        default_factory=dict
    )

    def mutation_table(self) -> dict[str, Callable[[random.Random, Prepared], tuple[bytes, str]]]:
        return {**MUTATIONS, **self.mutations}


@dataclass
class Tally:
    cases: int = 0
    ok: int = 0
    format_error: int = 0
    findings: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "cases": self.cases,
            "ok": self.ok,
            "format_error": self.format_error,
            "findings": self.findings,
        }


@dataclass
class Run:
    seed: int
    tallies: dict[str, dict[str, Tally]] = field(default_factory=dict)  # target -> fixture -> tally
    # target -> mutation kind -> tally
    by_mutation: dict[str, dict[str, Tally]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # target -> time decoding its cases
    findings: list[dict[str, Any]] = field(default_factory=list)


# ---- the .hwx target ---------------------------------------------------------------------


def _hwx_decode(data: bytes) -> Any:
    from anekit.formats import hwx

    return hwx.read(data).to_json()


def _hwx_fields(data: bytes) -> list[Field]:
    """Every header, command, segment, section, symtab, relocation and descriptor field."""
    from anekit.formats import hwx

    f = hwx.read(data)
    fields = [Field(4 * i, 4, f"header[{i}]") for i in range(8)]
    for command in f.commands:
        fields += [Field(command.offset, 4, "cmd"), Field(command.offset + 4, 4, "cmdsize")]
        if command.kind in ("io_buffer", "mapped_region"):
            fields += [
                Field(command.offset + 8, 4, "io name offset"),
                Field(command.offset + 16, 4, "io address"),
            ]
        elif command.kind == "thread":
            fields += [
                Field(command.offset + 8, 4, "thread flavor"),
                Field(command.offset + 12, 4, "thread count"),
            ]
        elif command.kind == "symtab":
            fields += [Field(command.offset + 8 + 4 * i, 4, f"symtab[{i}]") for i in range(4)]
    for segment in f.segments:
        at = segment.command_offset
        fields += [Field(at + 24 + 8 * i, 8, f"{segment.name} range[{i}]") for i in range(4)]
        fields += [
            Field(at + 56 + 4 * i, 4, f"{segment.name} prot/nsects/flags[{i}]") for i in range(4)
        ]
        for i, section in enumerate(segment.sections):
            base = at + 72 + 80 * i
            fields += [
                Field(base + 32, 8, f"{section.full_name} addr"),
                Field(base + 40, 8, f"{section.full_name} size"),
            ]
            fields += [
                Field(base + 48 + 4 * k, 4, f"{section.full_name} word[{k}]") for k in range(5)
            ]
    for symbol in f.symbols:
        fields += [
            Field(symbol.entry_offset, 4, "n_strx"),
            Field(symbol.entry_offset + 5, 1, "n_sect"),
            Field(symbol.entry_offset + 8, 8, "n_value"),
        ]
    for relocation in f.relocations:
        fields += [
            Field(relocation.entry_offset, 4, "r_address"),
            Field(relocation.entry_offset + 4, 4, "r_info"),
        ]
    text = f.section("__TEXT", "__text")
    if text is not None:
        for descriptor in f.task_descriptors:
            base = text.offset + descriptor.offset
            fields += [
                Field(base + 4 * i, 4, f"td header[{i}]") for i in range(len(descriptor.header))
            ]
            fields += [
                Field(text.offset + s.offset, 4, f"stream header {s.name}")
                for s in descriptor.streams
            ]
    return fields


def _hwx_boundaries(data: bytes) -> list[int]:
    from anekit.formats import hwx

    f = hwx.read(data)
    points = {0, 4, 8, 16, 20, 24, 28, 32, f.size - 1}
    for command in f.commands:
        points.update((command.offset, command.offset + 8, command.offset + command.size - 1))
    for section in f.sections:
        if section.has_file_data:
            points.update(
                (section.offset, section.offset + section.size - 1, section.offset + section.size)
            )
        if section.nreloc:
            points.update((section.reloff, section.reloff + 8 * section.nreloc - 1))
    symtab = next((c for c in f.commands if c.kind == "symtab"), None)
    if symtab is not None and f.symbols:
        first = f.symbols[0]
        points.update((first.entry_offset, f.symbols[-1].entry_offset + 15, first.name_offset))
    text = f.section("__TEXT", "__text")
    if text is not None:
        for descriptor in f.task_descriptors:
            points.update(text.offset + s.offset for s in descriptor.streams)
            points.add(text.offset + descriptor.offset + 0x1C)
    return sorted(p for p in points if 0 <= p < f.size)


def hwx_target() -> FuzzTarget:
    return FuzzTarget(
        name="hwx",
        fixtures=lambda: [
            (path.stem, path.read_bytes()) for path in sorted((FIXTURES / "hwx").glob("*.hwx"))
        ],
        decode=_hwx_decode,
        fields=_hwx_fields,
        boundaries=_hwx_boundaries,
    )


# ---- the weight.bin target (files written by coremltools' own MILBlob writer) -------------


def _weight_bin_fixtures() -> list[tuple[str, bytes]]:
    """Two weight.bin files from coremltools' `_BlobStorageWriter`: every dtype it writes."""
    import numpy as np

    try:
        from coremltools.libmilstoragepython import _BlobStorageWriter
    except ImportError as exc:
        raise SystemExit(
            f"the weight.bin target needs coremltools (pip install 'anekit[coreml]'): {exc}"
        ) from None
    rng = np.random.default_rng(0)
    groups = {
        "coremltools_wide": [
            ("fp16", rng.standard_normal(37).astype(np.float16)),
            ("float", rng.standard_normal(19).astype(np.float32)),
            ("int8", rng.integers(-128, 128, 33).astype(np.int8)),
            ("uint8", rng.integers(0, 256, 70).astype(np.uint8)),
            ("int16", rng.integers(-999, 999, 9).astype(np.int16)),
            ("uint16", rng.integers(0, 999, 9).astype(np.uint16)),
            ("int32", rng.integers(-999, 999, 5).astype(np.int32)),
            ("uint32", rng.integers(0, 999, 5).astype(np.uint32)),
        ],
        "coremltools_sub_byte": [
            ("int4", rng.integers(-8, 8, 13).astype(np.int8)),
            ("uint1", rng.integers(0, 2, 13).astype(np.uint8)),
            ("uint2", rng.integers(0, 4, 13).astype(np.uint8)),
            ("uint3", rng.integers(0, 8, 13).astype(np.uint8)),
            ("uint4", rng.integers(0, 16, 13).astype(np.uint8)),
            ("uint6", rng.integers(0, 64, 13).astype(np.uint8)),
        ],
    }
    fixtures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, arrays in groups.items():
            path = Path(tmp) / f"{name}.bin"
            writer = _BlobStorageWriter(str(path))
            for dtype, array in arrays:
                getattr(writer, f"write_{dtype}_data")(array)
            del writer  # the file is complete once the writer is destroyed
            fixtures.append((name, path.read_bytes()))
    return fixtures


def _weight_bin_decode(data: bytes) -> Any:
    from anekit.formats.blob import BlobReader

    with BlobReader(data) as reader:
        return [reader.read(record.offset) for record in reader.records()]


def _weight_bin_records(data: bytes) -> list[int]:
    from anekit.formats.blob import BlobReader

    with BlobReader(data) as reader:
        return [record.offset for record in reader.records()]


def _weight_bin_fields(data: bytes) -> list[Field]:
    fields = [Field(0, 4, "count"), Field(4, 4, "version")]
    for at in _weight_bin_records(data):
        fields += [Field(at, 4, "sentinel"), Field(at + 4, 4, "dtype"), Field(at + 8, 8, "size")]
        fields += [Field(at + 16, 8, "data offset"), Field(at + 24, 8, "padding bits")]
    return fields


def _weight_bin_boundaries(data: bytes) -> list[int]:
    points = {0, 8, 63, 64}
    for at in _weight_bin_records(data):
        points.update((at, at + 32, at + 63, at + 64))
    return sorted(p for p in points if p < len(data))


def weight_bin_target() -> FuzzTarget:
    return FuzzTarget(
        "weight.bin",
        _weight_bin_fixtures,
        _weight_bin_decode,
        _weight_bin_fields,
        _weight_bin_boundaries,
    )


# ---- the netplist targets: the XML plists, and the weight files they read ------------------

NETPLIST_DIR = FIXTURES / "netplist"
RUN_LIMIT = 1 << 20  # run a decoded graph on zeros when all its values hold fewer elements


def _netplist_weight_files() -> dict[str, bytes]:
    """Every weight file the fixtures name by a relative path, keyed by that name."""
    files = {}
    for path in sorted(NETPLIST_DIR.glob("*.weights")):
        files[path.name] = files[f"../{path.name}"] = path.read_bytes()
    return files


def _netplist_plists() -> list[tuple[str, bytes]]:
    return [
        (str(path.relative_to(NETPLIST_DIR).with_suffix("")), path.read_bytes())
        for path in sorted(NETPLIST_DIR.glob("**/*.plist"))
    ]


def _netplist_use(data: bytes, files: dict[str, bytes]) -> Any:
    """What `anekit inspect` and `anekit run` do with a netplist: describe, read, run."""
    import numpy as np

    from anekit.formats import netplist
    from anekit.formats.netplist.describe import describe_bytes

    json.dumps(describe_bytes(data, files=files))
    graph = netplist.parse(data, files=files)
    if sum(v.numel for v in graph.values.values()) <= RUN_LIMIT:
        graph.run({v.name: np.zeros(v.shape, v.dtype.numpy) for v in graph.inputs})
    return graph


def _xml_fields(data: bytes) -> list[Field]:
    """The digits of every <integer> (bit flips there change sizes, offsets and indices)."""
    import re

    return [
        Field(m.start(1), min(8, m.end(1) - m.start(1)), "integer")
        for m in re.finditer(rb"<integer>(-?\d+)</integer>", data)
    ]


def _xml_boundaries(data: bytes) -> list[int]:
    import re

    return sorted(
        {0, len(data) - 1} | {m.start() for m in re.finditer(rb"<(?:key|dict|array)>", data)}
    )


PLIST_INTS = (-1, 0, 1, 2, 3, 7, 64, 0xFFFF, 1 << 16, 1 << 24, (1 << 31) - 1, 1 << 31)
PLIST_INTS += (1 << 32, 1 << 48, (1 << 63) - 1, -(1 << 63))
PLIST_STRINGS = ("", "Depth", "Channel", "Width", "Float32", "UInt8", "Int8", "Bogus")
PLIST_STRINGS += ("/etc/passwd", "../../x.weights", "Units", "image", "probs@output")


def _plist_slots(value: Any, slots: list[tuple[Any, Any]]) -> None:
    """Every (container, key or index) in a plist tree, depth first."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        slots.append((value, key))
        if isinstance(item, dict | list):
            _plist_slots(item, slots)


def mutate_plist_value(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """Change one value of the parsed plist (extreme number, other name, other type, gone)."""
    import plistlib

    doc = plistlib.loads(fixture.data)
    slots: list[tuple[Any, Any]] = []
    _plist_slots(doc, slots)
    container, key = rng.choice(slots)
    old = container[key]
    action = rng.choice(["extreme", "string", "retype", "delete", "duplicate"])
    if action == "extreme":
        container[key] = rng.choice(PLIST_INTS)
    elif action == "string":
        names = [k for _, k in slots if isinstance(k, str)]
        container[key] = rng.choice([*PLIST_STRINGS, *names])
    elif action == "retype":
        container[key] = rng.choice([str(old), [old], {"x": old}, True, 1.5, b"\0", 0])
    elif action == "delete":
        del container[key]
    elif isinstance(container, list):
        container.insert(key, old)
    else:
        container[rng.choice([k for k in container if k != key] or [key])] = old
    data = plistlib.dumps(doc, sort_keys=False)
    return data, f"plist {action} {key!r} (was {str(old)[:40]!r})"


def netplist_target() -> FuzzTarget:
    files = _netplist_weight_files()
    return FuzzTarget(
        "netplist",
        _netplist_plists,
        lambda data: _netplist_use(data, files),
        _xml_fields,
        _xml_boundaries,
        # listed twice: value-level changes are the ones that reach the unit readers' checks
        {"plist_value": mutate_plist_value, "plist_value_b": mutate_plist_value},
    )


def _weight_users() -> list[Any]:
    """The parsed networks of every fixture that reads weights it finds beside it on disk."""
    from anekit.formats import netplist
    from anekit.formats.netplist.reader import build_graph
    from anekit.formats.netplist.weights import WeightFiles

    users = []
    for path in sorted(NETPLIST_DIR.glob("**/*.plist")):
        for net in netplist.parse_document(path.read_bytes(), str(path)).networks:
            source = WeightFiles(net.weights, path.parent)
            try:
                build_graph(net, source, str(path))
            except FormatError:
                continue
            if source.refs:
                users.append((net, source.refs))
    return users


def _weights_decode(users: list[Any], blob: bytes) -> int:
    """Every weight-reading fixture network, with all its weight files replaced by `blob`.

    Each must read (and run) or raise FormatError; the case counts as rejected
    (FormatError) only when every network rejects the bytes.
    """
    import numpy as np

    from anekit.formats.netplist.reader import build_graph
    from anekit.formats.netplist.weights import WeightFiles

    read = 0
    last: FormatError | None = None
    for net, _ in users:
        source = WeightFiles(net.weights, None, dict.fromkeys(net.weights, blob))
        try:
            graph = build_graph(net, source, "fuzz")
        except FormatError as exc:
            last = exc
            continue
        graph.run({v.name: np.zeros(v.shape, v.dtype.numpy) for v in graph.inputs})
        read += 1
    if not read and last is not None:
        raise last
    return read


def _weights_boundaries(users: list[Any], name: str, blob: bytes) -> list[int]:
    """Where units start and stop reading this file (truncation there is interesting)."""
    points = {0, len(blob) - 1}
    for net, refs in users:
        for ref in refs:
            if net.weights[ref.index].removeprefix("../") == name:
                points.update((ref.offset, ref.offset + ref.nbytes - 1, ref.offset + ref.nbytes))
    return sorted(p for p in points if 0 <= p < len(blob))


def netplist_weights_target() -> FuzzTarget:
    users = _weight_users()
    fixtures = [(p.name, p.read_bytes()) for p in sorted(NETPLIST_DIR.glob("*.weights"))]
    by_bytes = {data: name for name, data in fixtures}
    return FuzzTarget(
        "netplist.weights",
        lambda: fixtures,
        lambda blob: _weights_decode(users, blob),
        lambda blob: [],
        lambda blob: _weights_boundaries(users, by_bytes.get(blob, ""), blob),
    )


# Add other readers here, one entry each (MIL text, ...).
TARGET_FACTORIES: dict[str, Callable[[], FuzzTarget]] = {
    "hwx": hwx_target,
    "weight.bin": weight_bin_target,
    "netplist": netplist_target,
    "netplist.weights": netplist_weights_target,
}


# ---- mutations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """A pristine fixture and what its target says is worth corrupting."""

    name: str
    data: bytes
    fields: tuple[Field, ...]
    boundaries: tuple[int, ...]


def _hot_offset(rng: random.Random, fixture: Prepared) -> int:
    """Half the time near a structural field, else anywhere in the file."""
    if fixture.fields and rng.random() < 0.5:
        target = rng.choice(fixture.fields)
        return min(len(fixture.data) - 1, target.offset + rng.randrange(target.size))
    return rng.randrange(len(fixture.data))


def mutate_bit_flips(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    data = bytearray(fixture.data)
    flips = [(_hot_offset(rng, fixture), rng.randrange(8)) for _ in range(rng.randint(1, 16))]
    for offset, bit in flips:
        data[offset] ^= 1 << bit
    return bytes(data), "bit_flips " + ",".join(f"0x{o:x}:{b}" for o, b in flips)


def mutate_overwrite(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    data = bytearray(fixture.data)
    offset = _hot_offset(rng, fixture)
    run = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 32)))
    data[offset : offset + len(run)] = run[: len(data) - offset]
    return bytes(data), f"overwrite 0x{offset:x} {run.hex()}"


def mutate_insert(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    offset = _hot_offset(rng, fixture)
    run = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    return fixture.data[:offset] + run + fixture.data[offset:], f"insert 0x{offset:x} {run.hex()}"


def mutate_delete(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    offset = _hot_offset(rng, fixture)
    size = rng.randint(1, 64)
    return fixture.data[:offset] + fixture.data[offset + size :], f"delete 0x{offset:x}+{size}"


def mutate_field_extreme(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    if not fixture.fields:
        return mutate_overwrite(rng, fixture)
    target = rng.choice(fixture.fields)
    top = (1 << (8 * target.size)) - 1
    current = int.from_bytes(fixture.data[target.offset : target.offset + target.size], "little")
    candidates = [
        *EXTREME_VALUES,
        top,
        top - 1,
        top >> 1,
        (top >> 1) + 1,
        len(fixture.data),
        len(fixture.data) + 1,
        len(fixture.data) - 1,
        current + 1,
        current - 1,
        current * 2,
        current + 0x4000,
        rng.getrandbits(8 * target.size),
    ]
    value = rng.choice(candidates) & top
    data = bytearray(fixture.data)
    data[target.offset : target.offset + target.size] = value.to_bytes(target.size, "little")
    return bytes(data), f"field {target.name}@0x{target.offset:x} = 0x{value:x}"


def mutate_truncate(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    point = (
        rng.choice(fixture.boundaries) if fixture.boundaries else rng.randrange(len(fixture.data))
    )
    point = max(0, min(len(fixture.data) - 1, point + rng.choice((-1, 0, 0, 1, 4))))
    return fixture.data[:point], f"truncate at 0x{point:x}"


MUTATIONS: dict[str, Callable[[random.Random, Prepared], tuple[bytes, str]]] = {
    "bit_flips": mutate_bit_flips,
    "overwrite": mutate_overwrite,
    "insert": mutate_insert,
    "delete": mutate_delete,
    "field_extreme": mutate_field_extreme,
    "truncate": mutate_truncate,
}


# ---- running -----------------------------------------------------------------------------


def case_rng(target: str, fixture: str, seed: int, case: int) -> random.Random:
    return random.Random(f"{target}:{fixture}:{seed}:{case}")


def run_case(
    target: FuzzTarget, fixture: Prepared, seed: int, case: int
) -> tuple[str, str, dict[str, Any] | None]:
    """(mutation kind, outcome "ok" / "format_error" / "finding", finding record or None)."""
    rng = case_rng(target.name, fixture.name, seed, case)
    table = target.mutation_table()
    kind = rng.choice(sorted(table))
    data, description = table[kind](rng, fixture)
    start = time.perf_counter()
    try:
        target.decode(data)
        outcome, problem = "ok", None
    except FormatError:
        outcome, problem = "format_error", None
    except Exception as exc:  # noqa: BLE001 - the point of the fuzzer
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        outcome = "finding"
        problem = (
            f"{type(exc).__name__}: {exc}"[:300] + f" at {Path(frame.filename).name}:{frame.lineno}"
        )
    elapsed = time.perf_counter() - start
    if outcome != "finding" and elapsed > SLOW_CASE_SECONDS:
        outcome, problem = "finding", f"slow: {elapsed:.2f}s"
    if outcome != "finding":
        return kind, outcome, None
    record = {
        "target": target.name,
        "fixture": fixture.name,
        "seed": seed,
        "case": case,
        "replay": f"{target.name}:{fixture.name}:{seed}:{case}",
        "mutation": description[:500],
        "problem": problem,
    }
    return kind, outcome, record


def prepare(target: FuzzTarget) -> list[Prepared]:
    prepared = []
    for name, data in target.fixtures():
        prepared.append(
            Prepared(name, data, tuple(target.fields(data)), tuple(target.boundaries(data)))
        )
    return prepared


def fuzz(target_names: list[str], cases: int, seed: int) -> tuple[Run, float]:
    """`cases` cases for each target, spread evenly over that target's fixtures."""
    run = Run(seed)
    targets = [TARGET_FACTORIES[name]() for name in target_names]
    plan = []
    for target in targets:
        fixtures = prepare(target)
        plan += [(target, fixture, -(-cases // len(fixtures))) for fixture in fixtures]
    start = time.perf_counter()
    for target, fixture, per_fixture in plan:
        tallies = run.tallies.setdefault(target.name, {})
        mutations = run.by_mutation.setdefault(target.name, {})
        started = time.perf_counter()
        for case in range(per_fixture):
            kind, outcome, record = run_case(target, fixture, seed, case)
            for tally in (
                tallies.setdefault(fixture.name, Tally()),
                mutations.setdefault(kind, Tally()),
            ):
                tally.cases += 1
                if outcome == "ok":
                    tally.ok += 1
                elif outcome == "format_error":
                    tally.format_error += 1
                else:
                    tally.findings += 1
            if record is not None:
                run.findings.append(record)
        run.seconds[target.name] = run.seconds.get(target.name, 0.0) + time.perf_counter() - started
    return run, time.perf_counter() - start


def report(run: Run, seconds: float) -> dict[str, Any]:
    total = sum(t.cases for fixtures in run.tallies.values() for t in fixtures.values())
    return {
        "benchmark": "fuzz_formats",
        "seed": run.seed,
        "cases": total,
        "seconds": round(seconds, 3),
        "cases_per_second": round(total / seconds, 1) if seconds else None,
        "findings": len(run.findings),
        "targets": {
            name: {
                "cases": sum(t.cases for t in fixtures.values()),
                "seconds": round(run.seconds[name], 3),
                "cases_per_second": round(
                    sum(t.cases for t in fixtures.values()) / run.seconds[name], 1
                ),
                "fixtures": {fixture: tally.as_dict() for fixture, tally in fixtures.items()},
                "mutations": {
                    kind: tally.as_dict() for kind, tally in sorted(run.by_mutation[name].items())
                },
            }
            for name, fixtures in run.tallies.items()
        },
        "finding_records": run.findings,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_atomically(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def replay(spec: str) -> int:
    target_name, fixture_name, seed, case = spec.split(":")
    target = TARGET_FACTORIES[target_name]()
    fixture = next(p for p in prepare(target) if p.name == fixture_name)
    rng = case_rng(target_name, fixture_name, int(seed), int(case))
    table = target.mutation_table()
    kind = rng.choice(sorted(table))
    data, description = table[kind](rng, fixture)
    print(f"{spec}: {description}")
    target.decode(data)  # let the exception, if any, show its traceback
    print("decoded without error")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets", nargs="+", default=sorted(TARGET_FACTORIES), choices=sorted(TARGET_FACTORIES)
    )
    parser.add_argument(
        "--cases",
        type=int,
        default=DEFAULT_CASES,
        help="cases per target, spread evenly over its fixtures",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--replay", metavar="TARGET:FIXTURE:SEED:CASE", help="rerun one case with its traceback"
    )
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    run, seconds = fuzz(args.targets, args.cases, args.seed)
    doc = report(run, seconds)
    write_atomically(args.out, doc)
    print(
        f"{doc['cases']} cases in {doc['seconds']} s ({doc['cases_per_second']} cases/s), {doc['findings']} findings"
    )
    for name, target in doc["targets"].items():
        print(f"  {name}: {target['cases']} cases, {target['cases_per_second']} cases/s")
    for record in run.findings[:20]:
        print(f"  {record['replay']}: {record['mutation'][:80]} -> {record['problem']}")
    return 1 if run.findings else 0


if __name__ == "__main__":
    sys.exit(main())
