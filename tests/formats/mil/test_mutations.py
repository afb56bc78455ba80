"""Hostile MIL text: random mutations of valid programs only ever raise FormatError subclasses."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit.errors import FormatError
from anekit.formats.mil import MilSyntaxError, parse, print_program
from anekit.formats.mil.lexer import tokenize

DATA = Path(__file__).parent / "data"
TEXTS = [p.read_text() for p in sorted(DATA.glob("*.mil"))]

# Characters and tokens that matter to MIL, plus hostile ones.
PIECES = st.sampled_from(
    list("()[]{}<>,=;?-+.\"\\ \n\tx0") + [
        "->", "tensor<", "tensor", "list<", "tuple<", "dict<", "state<", "BLOBFILE", "fp16",
        "int32", "uint64", "string", "bool", "0x1p+0", "-0x1.8p-3", "1e400", "0x1p+99999",
        "inf", "-nan", "nan", "true", "99999999999999999999999999", "9" * 5000, "[" * 200,
        "list<" * 200, "\x00", "\u00a0", "é", "\ud7ff", "\\x", "@", "}", "{{", "program",
        "func", ", x = x", "[name = string(\"n\")]", "cond", "-", "2147483648", "-129",
    ]
)  # fmt: skip


def check(text: str) -> None:
    """Parse ``text``: success, or a FormatError subclass; anything else fails the test."""
    try:
        program = parse(text, source="mutated.mil")
    except MilSyntaxError as err:
        assert isinstance(err, FormatError)
        assert err.line is not None and err.column is not None
        assert err.line >= 1 and err.column >= 1
        return
    # Whatever parsed must print and parse back to itself.
    assert parse(print_program(program)) == program


@st.composite
def char_mutations(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "insert_any"]))
        if kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif kind == "insert":
            text = text[:at] + draw(PIECES) + text[at:]
        elif kind == "replace":
            text = text[:at] + draw(PIECES) + text[at + 1 :]
        else:
            text = text[:at] + draw(st.text(min_size=1, max_size=3)) + text[at:]
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


@st.composite
def token_mutations(draw: st.DrawFn) -> str:
    tokens = tokenize(draw(st.sampled_from(TEXTS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert"]))
        if kind == "delete":
            del tokens[at]
        elif kind == "duplicate":
            tokens.insert(at, tokens[at])
        elif kind == "swap":
            other = draw(st.integers(0, len(tokens) - 1))
            tokens[at], tokens[other] = tokens[other], tokens[at]
        elif kind == "replace":
            tokens[at] = draw(st.sampled_from(tokens + ["9" * 50, "0x1p+99999"]))
        else:
            tokens.insert(at, draw(PIECES))
    return " ".join(tokens)


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(char_mutations())
def test_character_mutations_raise_only_format_errors(text: str):
    check(text)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(token_mutations())
def test_token_mutations_raise_only_format_errors(text: str):
    check(text)


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_every_truncation_raises_only_format_errors(text: str):
    # Prefixes cut at token boundaries and inside tokens, 300 per program, evenly spread.
    cuts = sorted(
        {i for i, c in enumerate(text) if c in " ,;()[]<>\n"} | set(range(0, len(text), 7))
    )
    for cut in cuts[:: max(1, len(cuts) // 300)]:
        check(text[:cut])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00",
        "program",
        "program(1.3)",
        "program(1.3){",
        "program(1.3)[buildInfo = int32(1)]{}",
        'program(1.3)[buildInfo = dict<string, int32>({{"a", 1}})]{}',
        "program(1.3){func main<ios18>(tensor<fp16, [1]> x) {} -> (x); func main<ios18>() {} -> ();}",
        "program(1.3){func m(){ tensor<fp16, [99999999999999, 99999999999]> c = const()[val = tensor<fp16, [99999999999999, 99999999999]>([1])]; } -> (c);}",
        "program(1.3){func m(){ tensor<fp16, [2]> c = const()[val = tensor<fp16, [2]>([[1], [2, 3]])]; } -> (c);}",
        "program(1.3){func m(){ tensor<fp16, [2]> c = const()[val = tensor<fp16, [2]>([[1], 2])]; } -> (c);}",
        "program(1.3){func m(){ tensor<fp16, [a, b]> c = const()[val = tensor<fp16, [a, b]>([1, 2])]; } -> (c);}",
        "program(1.3){func m(){ tuple<int32, int32> c = const()[val = tuple<int32, int32>((1, 2, 3))]; } -> (c);}",
        "program(1.3){func m(){ list<int32, 2> c = const()[val = list<int32, 2>([1])]; } -> (c);}",
        "program(1.3){func m(){ state<int32> c = const()[val = state<int32>(1)]; } -> (c);}",
        "program(1.3){func m(){ int32 c = const()[val = int32([1])]; } -> (c);}",
        "program(1.3){func m(){ fp16 c = const()[val = fp16(0x1p+99999)]; } -> (c);}",
        "program(1.3){func m(){ fp16 c = const()[val = fp16(" + "9" * 5000 + ")]; } -> (c);}",
        "program(1.3){func m(){ int32 c = const()[val = int32(" + "9" * 5000 + ")]; } -> (c);}",
        "program(1.3){func m(){ tensor<fp16, [" + "9" * 5000 + "]> c = const()[]; } -> (c);}",
        "program(1.3){func m(){ tensor<fp16, [2]> c = const()[val = tensor<fp16, [2]>(BLOBFILE(path = int32(1), offset = uint64(0)))]; } -> (c);}",
        'program(1.3){func m(){ tensor<fp16, [2]> c = const()[val = tensor<fp16, [2]>(BLOBFILE(path = string("x"), offset = uint64(18446744073709551616)))]; } -> (c);}',
        'program(1.3){func m(){ string c = const()[val = string("\\x4")]; } -> (c);}',
    ],
)
def test_hand_picked_hostile_inputs(text: str):  # each one a distinct error path
    with pytest.raises(MilSyntaxError):
        parse(text)
