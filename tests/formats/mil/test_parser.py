"""MIL parser: Apple-style programs, both spellings, literal values, and errors with line/column."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats.mil import (
    MAX_DEPTH,
    ArgList,
    Binding,
    BlobFile,
    DictType,
    ListType,
    ListValue,
    MilSyntaxError,
    MilTensorType,
    Scalar,
    ScalarType,
    StateType,
    Tensor,
    TupleValue,
    Var,
    parse,
    parse_file,
)

DATA = Path(__file__).parent / "data"
FACTS = DATA / "facts_example.mil"


def test_facts_section_1_example_parses_to_the_expected_tree():
    program = parse_file(FACTS)
    assert program.version == "1.3"
    assert program.build_info == (
        ("coremlc-component-MIL", "3520.4.1"),
        ("coremlc-version", "3520.5.1"),
    )
    main = program.function("main")
    assert main.opset == "ios18"
    assert main.inputs == (Binding("x", MilTensorType("fp16", (1, 64, 1, 16))),)
    assert main.outputs == ("y",)
    assert [op.op for op in main.operations] == ["const"] * 6 + ["conv", "relu"]
    w = main.operations[0]
    assert w.name == "w"
    assert w.output == Binding("w", MilTensorType("fp16", (32, 64, 1, 1)))
    assert w.inputs == ()
    assert w.attribute("val") == BlobFile(
        MilTensorType("fp16", (32, 64, 1, 1)), "@model_path/weights/weight.bin", 64
    )
    st = main.operations[2].attribute("val")
    assert isinstance(st, Tensor)
    assert st.data.dtype == np.int32 and st.data.tolist() == [1, 1]
    gr = main.operations[5]
    assert gr.output.type == ScalarType("int32")
    assert gr.attribute("val") == Scalar(ScalarType("int32"), 1)
    conv = main.operations[6]
    assert [k for k, _ in conv.inputs] == [
        "dilations", "groups", "pad", "pad_type", "strides", "weight", "x",
    ]  # fmt: skip
    assert conv.input("weight") == Var("w")
    assert list(conv.variables()) == ["dl", "gr", "pd", "pt", "st", "w", "x"]
    assert conv.attributes == (("name", Scalar(ScalarType("string"), "y0")),)
    assert main.producers["y0"] is conv


def test_compact_spacing_parses_to_the_same_tree():
    assert parse_file(DATA / "compact_spacing.mil") == parse_file(FACTS)


def test_legacy_program_1_0_spelling():
    program = parse_file(DATA / "legacy_ios16.mil")
    assert program.version == "1.0"
    main = program.function()
    assert main.opset == "ios16"
    assert dict(program.build_info)["coremltools-version"] == "7.1"
    scale = main.producers["scale"].attribute("val")
    rank0 = MilTensorType("fp16", ())
    assert scale == Scalar(rank0, 10.0)
    assert main.producers["gr"].output.type == MilTensorType("int32", ())
    blob = main.producers["w_to_fp16"].attribute("val")
    assert blob == BlobFile(
        MilTensorType("fp16", (768, 768, 1, 1)), "@model_path/weights/weight.bin", 64
    )


def test_literal_values_are_exact():
    f = parse_file(DATA / "literals.mil").function()

    def val(name: str):
        return f.producers[name].attribute("val")

    assert val("a").value == 10.0
    assert val("b").value == -10000.0
    assert val("c").value == float(np.float32(0.1))
    assert math.copysign(1.0, val("d").value) == -1.0
    assert val("e").value == math.inf and val("f").value == -math.inf
    assert math.isnan(val("g").value)
    assert val("h").value == math.pi
    assert val("i").value == -(2**31)
    assert val("j").value == 2**63 - 1
    assert val("k").value == 2**64 - 1
    assert val("n").value is False
    assert val("o").value == ""
    assert val("p").value == "unicode \x01 é ✓"
    q = val("q").data
    assert q.dtype == np.float16 and q.shape == (2, 3)
    assert q.ravel().tolist()[:4] == [1.0, -0.5, 65504.0, 2.0**-24]
    assert math.isinf(q[1, 1]) and np.signbit(q[1, 2])
    assert val("r").data.shape == (0,)
    assert val("s").data.tolist() == [True, False, True]
    assert val("t").data.tolist() == ["a", "b,c"]
    assert val("u").data.dtype == np.int8 and val("u").data.tolist() == [-8, -1, 0, 7]
    assert val("v").data.dtype == np.uint8 and val("v").data.tolist() == [0, 63]
    assert val("w").type == MilTensorType("int32", ("?",)) and val("w").data.tolist() == [1, 2, 3]
    assert val("z") == Scalar(MilTensorType("int32", ()), 7)
    assert dict(parse_file(DATA / "literals.mil").build_info)["note"] == (
        'quote " backslash \\ newline \n tab \t'
    )


def test_arguments_tuples_inline_values_and_multiple_outputs():
    program = parse_file(DATA / "literals.mil")
    f = program.function()
    assert f.inputs[0].type == MilTensorType("fp16", (1, 4, 1, "?"))
    assert f.inputs[1].type == MilTensorType("fp32", (1, "S", 8))
    assert f.inputs[2].type == StateType(MilTensorType("fp16", (1, 4, 1, 16)))
    xx = f.producers["xx"]
    assert xx.input("values") == ArgList((Var("x"), Var("x")))
    split = f.producers["x2"]
    assert split is f.producers["x3"]
    assert [b.name for b in split.outputs] == ["x2", "x3"]
    assert split.input("num_splits") == Scalar(ScalarType("int32"), 2)
    assert f.producers["x4"].input("y") == Scalar(ScalarType("fp16"), 1.0)
    x5 = f.producers["x5"].input("values")
    assert x5 == ArgList((Var("x2"), Var("x3"), Var("x4")))
    assert f.outputs == ("x5", "kv_read")


def test_multiple_functions():
    program = parse_file(DATA / "multi_function.mil")
    assert program.build_info == ()
    assert [f.name for f in program.functions] == ["main", "prefill", "empty"]
    assert program.function("prefill").outputs == ("y", "s")
    assert program.function("empty").inputs == ()
    assert program.function("empty").opset == "ios17"
    c = program.function("empty").producers["c"].attribute("val")
    assert c.data.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(FormatError, match="no function 'decode'") as info:
        program.function("decode")
    assert "main, prefill, empty" in str(info.value)


def test_function_attributes_with_tuples_dicts_and_lists():
    f = parse_file(DATA / "flexible_shapes.mil").function()
    ((key, info),) = f.attributes
    assert key == "FlexibleShapeInformation"
    assert isinstance(info, TupleValue)
    defaults, ranges = info.items
    assert defaults.items[0].value == "DefaultShapes"
    ((name, shape),) = defaults.items[1].items
    assert name.value == "input_ids" and shape.data.tolist() == [1, 1]
    ((_, dims),) = ranges.items[1].items
    assert isinstance(dims, ListValue) and dims.type == ListType(MilTensorType("int32", (2,)), "?")
    assert [d.data.tolist() for d in dims.items] == [[1, 1], [1, 512]]
    assert isinstance(ranges.items[1].type, DictType)


def test_whitespace_inside_types_and_values_is_free():
    spaced = GOOD.replace(
        "tensor<int32, [4]>([0, 0, 0, 0])", "tensor < int32 , [ 4 ] > ( [ 0 , 0 , 0 , 0 ] )"
    )
    spaced = spaced.replace("func main<ios18>(", "func main < ios18 > (\n")
    assert spaced != GOOD
    assert parse(spaced) == parse(GOOD)


def test_nested_tensor_literal_matches_the_flat_one():
    head = "program(1.3)\n{\n    func main<ios18>() {\n"
    tail = "    } -> (c);\n}\n"
    nested = parse(
        head
        + "        tensor<int32, [2, 2]> c = const()[val = tensor<int32, [2, 2]>([[1, 2], [3, 4]])];\n"
        + tail
    )
    flat = parse(
        head
        + "        tensor<int32, [2, 2]> c = const()[val = tensor<int32, [2, 2]>([1, 2, 3, 4])];\n"
        + tail
    )
    assert nested == flat


def test_decimal_literal_file_means_the_same_as_hex():
    f = parse_file(DATA / "decimal_literals.mil").function()
    expected = {
        "half": "0x1p-1",
        "eps": "0x1.5p-17",  # 1e-05 rounded to fp16
        "big": "-0x1.388p+13",
        "tenth": "0x1.99999ap-4",  # 0.1 rounded to fp32
        "ten": "0x1.4p+3",
        "plus": "0x1.f4p+7",
    }
    for name, hex_text in expected.items():
        assert f.producers[name].attribute("val").value == float.fromhex(hex_text)
    scale = f.producers["scale"].attribute("val").data
    assert scale.ravel().tolist() == [float(np.float16(0.1)), -2.5, 3.0]


def test_decimal_literals_round_to_the_dtype():
    text = (
        "program(1.3)\n{\n    func main<ios18>() {\n"
        "        fp16 c = const()[val = fp16(0.1)];\n"
        "        tensor<fp16, [3]> d = const()[val = tensor<fp16, [3]>([0.1, -2.5e-3, 1e5])];\n"
        "    } -> (c, d);\n}\n"
    )
    f = parse(text).function()
    assert f.producers["c"].attribute("val").value == float(np.float16(0.1))
    d = f.producers["d"].attribute("val").data
    np.testing.assert_array_equal(d, np.array([0.1, -2.5e-3, np.inf], dtype=np.float16))


# --- errors -----------------------------------------------------------------------------------

GOOD = FACTS.read_text()


def error_for(text: str, source: str | None = None) -> MilSyntaxError:
    with pytest.raises(MilSyntaxError) as info:
        parse(text, source=source)
    assert isinstance(info.value, FormatError)
    return info.value


def test_error_carries_line_column_and_a_caret():
    bad = GOOD.replace('relu(x = y0)[name = string("y")];', 'relu(x = y0)[name = string("y")]')
    err = error_for(bad, source="model.mil")
    assert (err.line, err.column) == (13, 5)  # the '}' that came instead of ';'
    text = str(err)
    assert text.startswith("model.mil (line 13, column 5): expected ';', found '}'")
    excerpt, caret = text.splitlines()[1:3]
    assert excerpt.strip() == "} -> (y);"
    assert caret.index("^") == excerpt.index("}")


# (old, new, message, anchor): the error must point at ``anchor``, the first occurrence of it
# inside ``new`` once ``old`` is replaced; line and column are computed from the text.
@pytest.mark.parametrize(
    ("old", "new", "message", "anchor"),
    [
        ("x = x)[name", "x = q)[name", "variable 'q' is not defined", "q"),
        ("} -> (y);", "} -> (z);", "function output 'z' is not defined", "z"),
        ("int32 gr =", "int32 st =", "'st' is already defined", "st"),
        (
            "groups = gr, pad = pd",
            "groups = gr, groups = pd",
            "'groups' is given twice",
            "groups = pd",
        ),
        ("int32(1)", "int32(2147483648)", "outside the int32 range", "2147483648"),
        ("int32(1)", "int32(1.5)", "expected a int32 literal, found '1.5'", "1.5"),
        (
            "tensor<int32, [2]>([1, 1])",
            "tensor<int33, [2]>([1, 1])",
            "unknown element type 'int33'",
            "tensor<int33",
        ),
        (
            "tensor<int32, [4]>([0",
            "tensor<int32, [-4]>([0",
            "bad dimension '-4'",
            "tensor<int32, [-4]>",
        ),
        ('string("valid")', 'string("valid)', "unterminated string", '"valid)'),
        ('string("valid")', 'string("va\\qlid")', "unknown escape \\q", '"va'),
        (
            "tensor<int32, [2]>([1, 1])",
            "tensor<int32, [2]>([1, 1, 1])",
            "needs 2 elements, got 3",
            "tensor",
        ),
        ("program(1.3)", "program(one)", "program version", "one"),
        ("uint64(64)", "uint64(-64)", "outside the uint64 range", "-64"),
        ("offset = uint64(64)", 'offset = string("64")', "offset is a uint64", 'string("64")'),
        ("<ios18>(", "<ios18(", "expected '>', found '('", "("),
        ("relu(", "relu $(", "expected '(', found '$'", "$"),
        ("relu(x = y0)", "relu(x = y0, x = y0)", "'x' is given twice", "x = y0)"),
        (
            '[name = string("y0")]',
            '[name = string("y0"), name = string("z")]',
            "'name' is given twice",
            'name = string("z',
        ),
        ("int32(1)]", "int32(1]", "expected ')', found ']'", "]"),
    ],
)
def test_specific_errors(old: str, new: str, message: str, anchor: str):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    offset = text.index(new) + new.index(anchor)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    err = error_for(text)
    assert message in err.message
    assert (err.line, err.column) == (line, column)


def test_end_of_text_errors_point_past_the_last_line():
    err = error_for(GOOD[: GOOD.index("} -> (y);")])
    assert "is not closed" in err.message
    assert err.line == 13


def test_trailing_garbage_is_an_error():
    err = error_for(GOOD + "program(1.3)\n")
    assert "end of the program" in err.message and err.line == 15


def test_nested_blocks_are_reported_as_unsupported():
    text = GOOD.replace(
        'relu(x = y0)[name = string("y")];',
        'cond(pred = gr)[name = string("y")] {\n    } -> (y0);',
    )
    err = error_for(text)
    assert "nested block" in err.message and "not supported" in err.message


@pytest.mark.parametrize(
    "payload",
    [
        "tensor<int32, [1]>(" + "[" * 100_000 + "]" * 100_000 + ")",
        "list<" * 50_000 + "int32" + ", 1>" * 50_000 + "([1])",
        "tuple<" * 5_000 + "int32" + ">" * 5_000 + "(" * 5_000 + "1" + ")" * 5_000,
    ],
)
def test_deep_nesting_is_bounded(payload):
    text = GOOD.replace("val = int32(1)", f"val = {payload}")
    err = error_for(text)
    assert f"deeper than {MAX_DEPTH}" in err.message


def test_parse_file_errors(tmp_path: Path):
    with pytest.raises(MilSyntaxError, match="does not exist"):
        parse_file(tmp_path / "absent.mil")
    bad = tmp_path / "latin1.mil"
    bad.write_bytes(GOOD.replace("valid", "val\xe9d").encode("latin-1"))
    with pytest.raises(MilSyntaxError, match="not valid UTF-8") as info:
        parse_file(bad)
    assert info.value.offset == GOOD.index("valid") + 3


def test_error_excerpt_of_a_very_long_line_is_bounded():
    text = "program(1.3)\n{\n" + " " * 5000 + "@"
    err = error_for(text)
    assert err.column == 5001
    assert max(len(line) for line in str(err).splitlines()) < 200


@pytest.mark.parametrize(
    ("literal", "message", "anchor"),
    [
        ("tensor<int32, [3]>([1, 2.5, 3])", "expected a int32 literal, found '2.5'", "2.5"),
        ("tensor<int8, [3]>([1, 2, 300])", "300 is outside the int8 range", "300"),
        ("tensor<fp16, [2]>([1, 0x1p+99999])", "bad fp16 literal", "0x1p+99999"),
        ('tensor<string, [2]>(["a", "\\q"])', "unknown escape", '"\\q"'),
        ("tensor<int32, [3]>([1, [2], 3])", "mixes elements and lists", "[2]"),
        ("tensor<int32, [2, 2]>([[1, 2], [3]])", "different lengths", "[3]"),
        ("tensor<int32, [2, 2]>([[1, 2], 3])", "mixes elements and lists", "3])"),
    ],
)
def test_errors_inside_tensor_literals_point_at_the_element(literal, message, anchor):
    text = GOOD.replace("val = int32(1)", f"val = {literal}")
    offset = text.index(literal) + literal.index(anchor)
    err = error_for(text)
    assert message in err.message
    assert err.column == offset - (text.rfind("\n", 0, offset) + 1) + 1
