"""print/parse round trips: the test programs, and random trees from hypothesis, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from anekit.formats.mil import parse, parse_file, print_program

from .strategies import VALUES, programs

DATA = Path(__file__).parent / "data"
PROGRAMS = sorted(DATA.glob("*.mil"))
# Files written in the printer's canonical spelling (the others use compact spacing or the
# older tensor<string, []> spelling of BLOBFILE and buildInfo).
CANONICAL = {"facts_example.mil", "gpt2_block.mil", "literals.mil", "multi_function.mil"}


def test_all_test_programs_are_found():
    assert len(PROGRAMS) == 8
    assert CANONICAL <= {p.name for p in PROGRAMS}


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_parse_print_parse_is_identity(path: Path):
    program = parse_file(path)
    text = print_program(program)
    assert parse(text) == program
    assert print_program(parse(text)) == text


@pytest.mark.parametrize(
    "path", sorted(p for p in PROGRAMS if p.name in CANONICAL), ids=lambda p: p.name
)
def test_canonical_text_prints_back_unchanged(path: Path):
    text = path.read_text()
    assert print_program(parse(text)) == text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_round_trip_exactly(program):
    text = print_program(program)
    again = parse(text)
    assert again == program
    assert print_program(again) == text


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_random_values_round_trip_exactly(value):
    from anekit.formats.mil import Binding, Function, MilProgram, Operation, ScalarType

    op = Operation("const", (Binding("c", ScalarType("bool")),), (), (("val", value),))
    program = MilProgram("1.3", (), (Function("main", "ios18", (), (op,), ("c",)),))
    assert parse(print_program(program)) == program


def test_legacy_file_prints_back_in_legacy_spelling():
    # Older coremlc output indents operations by 12 spaces; the printer always uses 8.
    text = (DATA / "legacy_ios16.mil").read_text()
    expected = text.replace("\n            ", "\n        ")
    assert expected != text
    assert print_program(parse(text), legacy_scalars=True) == expected
