"""Fuzz targets, the seeded mutations, one case run and its tallies (what every target shares)."""

from __future__ import annotations

import random
import resource
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anekit.errors import AnekitError, FormatError

# Case costs are CPU seconds of this process (time.process_time), not wall time: on a loaded
# machine a case can wait for a core far longer than it runs.
SLOW_CASE_SECONDS = 2.0
HANG_SECONDS = 30  # a case still running after this much CPU time is stopped: a hang
# Peak resident memory (bytes) a case may reach: set by the driver to the process's size
# before the run plus the memory budget the run is under; None: not checked.
memory_ceiling: int | None = None
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
    # what counts as a clean refusal: FormatError for the pure readers; any AnekitError (exit
    # 2 on the command line) for targets that import, load and run what they decode
    refusal: tuple[type[BaseException], ...] = (FormatError,)
    slow_seconds: float = SLOW_CASE_SECONDS
    # decode for targets whose cases need their fixture (a bundle file: the rest of its
    # bundle); used instead of `decode` when set
    decode_case: Callable[[Prepared, bytes], Any] | None = None

    def run(self, fixture: Prepared, data: bytes) -> Any:
        return self.decode_case(fixture, data) if self.decode_case else self.decode(data)

    def mutation_table(self) -> dict[str, Callable[[random.Random, Prepared], tuple[bytes, str]]]:
        return {**MUTATIONS, **self.mutations}


def user_facing_target(
    name: str,
    fixtures: Callable[[], list[tuple[str, bytes]]],
    decode: Callable[[bytes], Any],
    fields: Callable[[bytes], list[Field]],
    boundaries: Callable[[bytes], list[int]],
    edit: Callable[[random.Random, Prepared], tuple[bytes, str]],
    **extra: Any,
) -> FuzzTarget:
    """A target that imports, loads or runs what it decodes, as a command would: any
    AnekitError (exit 2) is a clean refusal. Its structure-aware ``edit`` is drawn as often
    as two byte-level mutations, so that cases get past the first checks."""
    edits = {edit.__name__: edit, f"{edit.__name__}_2": edit}
    return FuzzTarget(name, fixtures, decode, fields, boundaries, edits, (AnekitError,), **extra)


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
    start = time.process_time()
    previous = signal.signal(signal.SIGPROF, _hang)
    signal.setitimer(signal.ITIMER_PROF, HANG_SECONDS)
    try:
        target.run(fixture, data)
        outcome, problem = "ok", None
    except target.refusal:
        outcome, problem = "format_error", None
    except BaseException as exc:  # noqa: BLE001 - the point of the fuzzer
        # a Rust panic in an extension (pyo3's PanicException) is a BaseException: a finding,
        # like any other exception; only an interrupt stops the run
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        frame = frames[-2] if isinstance(exc, Hang) and len(frames) > 1 else frames[-1]
        outcome = "finding"
        problem = (
            f"{type(exc).__name__}: {exc}"[:300] + f" at {Path(frame.filename).name}:{frame.lineno}"
        )
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    elapsed = time.process_time() - start
    if outcome != "finding" and elapsed > target.slow_seconds:
        outcome, problem = "finding", f"slow: {elapsed:.2f} CPU seconds"
    if outcome != "finding" and memory_ceiling is not None and peak_rss() > memory_ceiling:
        outcome, problem = "finding", f"memory: peak {peak_rss() >> 20} MiB, past the budget"
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


class Hang(BaseException):
    """A case that ran past HANG_SECONDS (a BaseException: nothing under test catches it)."""


def _hang(*_: object) -> None:
    raise Hang(f"still running after {HANG_SECONDS} s")


def peak_rss() -> int:
    """The process's peak resident memory in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def prepare(target: FuzzTarget) -> list[Prepared]:
    prepared = []
    for name, data in target.fixtures():
        prepared.append(
            Prepared(name, data, tuple(target.fields(data)), tuple(target.boundaries(data)))
        )
    return prepared
