"""MIL printer: canonical text for trees built in Python; hex floats checked against C's printf("%a")."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anekit.formats.mil import (
    ArgList,
    Binding,
    BlobFile,
    Function,
    MilProgram,
    MilTensorType,
    Scalar,
    ScalarType,
    Tensor,
    Var,
    blob_const,
    const,
    format_float,
    format_operation,
    format_value,
    literal,
    operation,
    parse,
    print_program,
)
from anekit.formats.mil.printer import quote

LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def c_hex(value: float) -> str:
    buf = ctypes.create_string_buffer(64)
    LIBC.snprintf(buf, 64, b"%a", ctypes.c_double(value))
    return buf.value.decode()


@settings(max_examples=500)
@given(st.floats(allow_nan=False))
def test_format_float_matches_c_printf_a(value: float):
    assert format_float(value) == c_hex(value)
    assert float.fromhex(format_float(value)) == value or math.isinf(value)


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, 10.0, -10000.0, 65504.0, 2.0**-24, 5e-324, 1.7976931348623157e308, 0.1],
)
def test_format_float_edge_cases_match_c(value: float):
    assert format_float(value) == c_hex(value)


def test_special_floats():
    assert format_float(math.inf) == "inf"
    assert format_float(-math.inf) == "-inf"
    assert format_float(math.nan) == "nan"


def test_quote_escapes():
    assert quote('a"b\\c\nd\te\rf\x01g\x7fé') == '"a\\"b\\\\c\\nd\\te\\rf\\x01g\\x7fé"'


# FACTS section 1's example, in canonical spacing (the parser tests read the same file)
EXPECTED = (Path(__file__).parent / "data" / "facts_example.mil").read_text()


def facts_program() -> MilProgram:
    """FACTS section 1's example, built with the Python helpers."""
    act = MilTensorType("fp16", (1, 32, 1, 16))
    ops = (
        blob_const("w", MilTensorType("fp16", (32, 64, 1, 1)), 64),
        const("pt", "valid"),
        const("st", [1, 1]),
        const("pd", [0, 0, 0, 0]),
        const("dl", [1, 1]),
        const("gr", 1),
        operation(
            "conv",
            ("y0", act),
            {
                "x": "x",
                "weight": "w",
                "strides": "st",
                "pad_type": "pt",
                "pad": "pd",
                "groups": "gr",
                "dilations": "dl",
            },
        ).sorted(),  # fmt: skip
        operation("relu", ("y", act), {"x": "y0"}),
    )
    main = Function(
        "main", "ios18", (Binding("x", MilTensorType("fp16", (1, 64, 1, 16))),), ops, ("y",)
    )
    build = (("coremlc-component-MIL", "3520.4.1"), ("coremlc-version", "3520.5.1"))
    return MilProgram("1.3", build, (main,))


def test_program_built_in_python_prints_like_facts_section_1():
    assert print_program(facts_program()) == EXPECTED
    assert parse(EXPECTED) == facts_program()


def test_inputs_print_in_stored_order_and_sorted_gives_apple_order():
    op = operation("add", ("z", MilTensorType("fp16", (2,))), {"y": "b", "x": "a"})
    assert format_operation(op) == 'tensor<fp16, [2]> z = add(y = b, x = a)[name = string("z")];'
    assert format_operation(op.sorted()) == (
        'tensor<fp16, [2]> z = add(x = a, y = b)[name = string("z")];'
    )


def test_values_print_in_apple_spelling():
    assert format_value(literal(0.5, "fp16")) == "fp16(0x1p-1)"
    assert format_value(literal(-1e4, "fp16")) == "fp16(-0x1.388p+13)"
    assert format_value(literal(True)) == "bool(true)"
    assert format_value(literal('a"b')) == 'string("a\\"b")'
    assert format_value(Scalar(MilTensorType("string", ()), "x")) == 'tensor<string, []>("x")'
    assert format_value(literal(np.array([[1, 2], [3, 4]], np.int32))) == (
        "tensor<int32, [2, 2]>([1, 2, 3, 4])"
    )
    assert format_value(literal(np.array([1.0, -0.0, np.inf, np.nan], np.float16))) == (
        "tensor<fp16, [4]>([0x1p+0, -0x0p+0, inf, nan])"
    )
    assert format_value(literal(np.array([True, False]))) == "tensor<bool, [2]>([true, false])"
    assert format_value(literal(np.array(["a", "b"]))) == 'tensor<string, [2]>(["a", "b"])'
    blob = BlobFile(MilTensorType("fp16", (4,)), "@model_path/weights/weight.bin", 128)
    assert format_value(blob) == (
        'tensor<fp16, [4]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), '
        "offset = uint64(128)))"
    )


def test_tuple_arguments_and_multiple_outputs():
    t = MilTensorType("fp16", (1, 2))
    op = operation(
        "split",
        [("a", t), ("b", t)],
        {"x": "x", "num_splits": Scalar(ScalarType("int32"), 2)},
        name="s",
    )
    assert format_operation(op) == (
        "tensor<fp16, [1, 2]> a, tensor<fp16, [1, 2]> b = "
        'split(x = x, num_splits = int32(2))[name = string("s")];'
    )
    cat = operation("concat", ("c", t), {"values": ("a", "b"), "axis": 1})
    assert cat.input("values") == ArgList((Var("a"), Var("b")))
    assert format_operation(cat) == (
        'tensor<fp16, [1, 2]> c = concat(values = (a, b), axis = int32(1))[name = string("c")];'
    )


def test_functions_are_separated_by_a_blank_line_and_attributes_are_optional():
    t = MilTensorType("fp32", (1,))
    f = Function("a", "ios17", (Binding("x", t),), (), ("x",))
    g = Function("b", None, (), (const("c", np.float32(2.0)),), ("c",))
    text = print_program(MilProgram("1.0", (), (f, g)))
    assert text == (
        "program(1.0)\n{\n"
        "    func a<ios17>(tensor<fp32, [1]> x) {\n    } -> (x);\n"
        "\n"
        "    func b() {\n"
        '        fp32 c = const()[name = string("c"), val = fp32(0x1p+1)];\n'
        "    } -> (c);\n"
        "}\n"
    )
    assert parse(text) == MilProgram("1.0", (), (f, g))


def test_tensor_literal_of_int4_prints_values():
    value = Tensor(MilTensorType("int4", (3,)), np.array([-8, 0, 7]))
    assert format_value(value) == "tensor<int4, [3]>([-8, 0, 7])"
