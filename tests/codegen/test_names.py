"""MIL names from IR names: valid, unique, stable."""

from __future__ import annotations

import pytest

from anekit.codegen.names import RESERVED, Namer, sanitize
from anekit.formats.mil.types import IDENTIFIER


@pytest.mark.parametrize(
    ("ir", "expected"),
    [
        ("/h.0/attn/MatMul_output_0", "h_0_attn_MatMul_output_0"),
        ("x", "x"),
        ("0", "v_0"),
        ("", "v_"),
        ("onnx::Add_12", "onnx_Add_12"),
        ("fp16", "fp16_"),
        ("tensor", "tensor_"),
        ("héllo wörld", "h_llo_w_rld"),
    ],
)
def test_sanitize(ir: str, expected: str) -> None:
    assert sanitize(ir) == expected
    assert IDENTIFIER.match(sanitize(ir))


def test_reserved_words_are_never_names() -> None:
    namer = Namer()
    names = [namer.value(word) for word in sorted(RESERVED)]
    assert not set(names) & RESERVED
    assert all(IDENTIFIER.match(n) for n in names)


def test_clashes_get_suffixes_and_answers_are_stable() -> None:
    namer = Namer()
    a = namer.value("a/b")
    b = namer.value("a.b")  # sanitises to the same text
    c = namer.fresh("a_b")
    assert (a, b, c) == ("a_b", "a_b_1", "a_b_2")
    assert namer.value("a/b") == a and namer.value("a.b") == b
    again = Namer()
    assert [again.value("a/b"), again.value("a.b"), again.fresh("a_b")] == [a, b, c]
