"""The MIL tree: value semantics (exact floats, NaN, arrays), validation, helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anekit.errors import FormatError
from anekit.formats.mil import (
    ArgList,
    Binding,
    BlobFile,
    DictType,
    DictValue,
    Function,
    ListType,
    ListValue,
    MilProgram,
    MilTensorType,
    Operation,
    Scalar,
    ScalarType,
    Tensor,
    TupleType,
    TupleValue,
    Var,
    blob_const,
    const,
    is_scalar,
    literal,
    operation,
    parse,
    print_program,
    string,
)

FP16 = ScalarType("fp16")
FP32 = ScalarType("fp32")


def test_float_scalars_hold_the_value_rounded_to_their_dtype():
    assert Scalar(FP16, 0.1).value == float(np.float16(0.1))
    assert Scalar(FP32, 0.1).value == float(np.float32(0.1))
    assert Scalar(ScalarType("fp64"), 0.1).value == 0.1
    assert Scalar(FP16, 70000.0).value == math.inf  # IEEE rounding overflows to inf
    assert Scalar(FP16, np.float16(3)).value == 3.0


def test_scalar_equality_is_bitwise():
    assert Scalar(FP16, math.nan) == Scalar(FP16, float("nan"))
    assert Scalar(FP16, 0.0) != Scalar(FP16, -0.0)
    assert Scalar(FP16, 1.0) != Scalar(FP32, 1.0)
    assert Scalar(FP16, 1.0) != Scalar(MilTensorType("fp16", ()), 1.0)
    assert len({Scalar(FP16, math.nan), Scalar(FP16, math.nan), Scalar(FP16, 1.0)}) == 2


@pytest.mark.parametrize(
    ("t", "value", "match"),
    [
        (ScalarType("int32"), 2**31, "outside the int32 range"),
        (ScalarType("uint1"), 2, "outside the uint1 range"),
        (ScalarType("int4"), -9, "outside the int4 range"),
        (ScalarType("int32"), 1.0, "not an integer"),
        (ScalarType("int32"), True, "is a bool"),
        (ScalarType("bool"), 1, "True or False"),
        (ScalarType("string"), 1, "must be str"),
        (FP16, "1", "not a number"),
        (MilTensorType("fp16", (1,)), 1.0, "cannot have the tensor type"),
    ],
)
def test_scalar_validation(t, value, match):
    with pytest.raises(ValueError, match=match):
        Scalar(t, value)


def test_tensor_holds_a_read_only_array_of_the_storage_dtype():
    t = Tensor(MilTensorType("fp16", (2, 2)), [1.0, 2.0, 3.0, 0.1])
    assert t.data.dtype == np.float16 and t.data.shape == (2, 2)
    assert not t.data.flags.writeable
    assert t == Tensor(MilTensorType("fp16", (2, 2)), np.array([[1, 2], [3, 0.1]], np.float32))
    assert t != Tensor(MilTensorType("fp16", (4,)), [1.0, 2.0, 3.0, 0.1])
    assert Tensor(MilTensorType("int4", (2,)), [-8, 7]).data.dtype == np.int8
    assert Tensor(MilTensorType("uint3", (1,)), [7]).data.dtype == np.uint8


def test_tensor_nan_payloads_are_canonical():
    odd_nan = np.array([0x7E01, 0xFE00], dtype=np.uint16).view(np.float16)
    t = Tensor(MilTensorType("fp16", (2,)), odd_nan)
    assert t == Tensor(MilTensorType("fp16", (2,)), [math.nan, math.nan])
    assert t.data.view(np.uint16).tolist() == [0x7E00, 0x7E00]
    program = MilProgram("1.3", (), (Function("main", "ios18", (), (const("c", t),), ("c",)),))
    assert "tensor<fp16, [2]>([nan, nan])" in print_program(program)
    assert parse(print_program(program)) == program


def test_string_tensor_equality():
    a = Tensor(MilTensorType("string", (2,)), ["a", "b"])
    assert a == Tensor(MilTensorType("string", (2,)), np.array(["a", "b"], dtype=object))
    assert a != Tensor(MilTensorType("string", (2,)), ["a", "c"])
    assert hash(a) == hash(Tensor(MilTensorType("string", (2,)), ["a", "b"]))


@pytest.mark.parametrize(
    ("t", "data", "match"),
    [
        (MilTensorType("fp16", (3,)), [1.0, 2.0], "needs 3 elements"),
        (MilTensorType("int8", (1,)), [128], "outside the int8 range"),
        (MilTensorType("int8", (1,)), [1.5], "integer elements"),
        (MilTensorType("uint64", (1,)), [2**64], "outside the uint64 range"),
        (MilTensorType("bool", (1,)), [1], "bool elements"),
        (MilTensorType("string", (1,)), [1], "str elements"),
        (MilTensorType("fp32", (1,)), ["x"], "needs numbers"),
        (MilTensorType("fp32", ("?", 2)), [1.0, 2.0], "does not fit"),
    ],
)
def test_tensor_validation(t, data, match):
    with pytest.raises(ValueError, match=match):
        Tensor(t, data)


def test_tensor_with_symbolic_shape_keeps_the_data_shape():
    t = Tensor(MilTensorType("int32", ("?", 2)), np.zeros((3, 2), np.int32))
    assert t.data.shape == (3, 2)


def test_types_print_in_mil_spelling_and_check_their_parts():
    assert str(MilTensorType("fp16", (1, "?", "S"))) == "tensor<fp16, [1, ?, S]>"
    assert str(ListType(MilTensorType("int32", (2,)), "?")) == "list<tensor<int32, [2]>, ?>"
    assert str(TupleType((FP16, ScalarType("string")))) == "tuple<fp16, string>"
    assert str(DictType(ScalarType("string"), FP32)) == "dict<string, fp32>"
    assert (
        is_scalar(FP16)
        and is_scalar(MilTensorType("fp16", ()))
        and not is_scalar(MilTensorType("fp16", (1,)))
    )
    assert MilTensorType("fp16", (2, 3)).size == 6 and MilTensorType("fp16", (2, "?")).size is None
    for bad in [lambda: ScalarType("float"), lambda: MilTensorType("fp16", (-1,)),
                lambda: ListType("fp16", 2), lambda: TupleType(("a",)),
                lambda: DictType(ScalarType("string"), 1), lambda: Binding("x", "fp16"),
                lambda: MilTensorType("fp16", ("a b",)), lambda: MilTensorType("fp16", (True,))]:  # fmt: skip
        with pytest.raises(ValueError):
            bad()


def test_composite_values_check_item_types_and_counts():
    s = ScalarType("string")
    with pytest.raises(ValueError, match="needs 2 items"):
        ListValue(ListType(FP16, 2), (Scalar(FP16, 1.0),))
    with pytest.raises(ValueError, match="where fp16 is expected"):
        ListValue(ListType(FP16, "?"), (Scalar(FP32, 1.0),))
    with pytest.raises(ValueError, match="needs 1 items"):
        TupleValue(TupleType((FP16,)), ())
    with pytest.raises(ValueError, match="where string is expected"):
        DictValue(DictType(s, s), ((Scalar(FP16, 1.0), Scalar(s, "x")),))
    with pytest.raises(ValueError, match="uint64"):
        BlobFile(MilTensorType("fp16", (1,)), "w.bin", 2**64)


def test_operation_accessors_and_validation():
    t = MilTensorType("fp16", (1, 4))
    op = Operation(
        "concat",
        (Binding("c", t),),
        {"values": ArgList((Var("a"), Var("b"))), "axis": Var("ax"), "interleave": literal(False)},
        {"name": string("cat")},
    )
    assert op.inputs[0] == ("values", ArgList((Var("a"), Var("b"))))  # a mapping becomes pairs
    assert op.name == "cat"
    assert op.output == Binding("c", t)
    assert op.input("axis") == Var("ax") and op.input("missing") is None
    assert list(op.variables()) == ["a", "b", "ax"]
    assert [k for k, _ in op.sorted().inputs] == ["axis", "interleave", "values"]
    unnamed = Operation("relu", (Binding("y", t),), (("x", Var("c")),))
    assert unnamed.name == "y"
    two = Operation("split", (Binding("p", t), Binding("q", t)), ())
    with pytest.raises(ValueError, match="2 outputs"):
        _ = two.output
    for bad in [
        lambda: Operation("bad op", (Binding("y", t),)),
        lambda: Operation("relu", ()),
        lambda: Operation("relu", (Binding("y", t),), (("x", "c"),)),
        lambda: Operation("relu", (Binding("y", t),), (("x", Var("a")), ("x", Var("b")))),
        lambda: Operation("relu", (Binding("y", t),), (), (("name", Var("a")),)),
        lambda: Binding("1y", t),
        lambda: Var("a-b"),
    ]:
        with pytest.raises(ValueError):
            bad()


def test_function_and_program_helpers():
    program = parse(
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n"
        '        tensor<fp16, [2]> y = add(y = x, x = x)[name = string("y")];\n'
        "    } -> (y);\n}\n"
    )
    main = program.function()
    assert main.producers["y"].op == "add"
    assert main.types() == {"x": MilTensorType("fp16", (2,)), "y": MilTensorType("fp16", (2,))}
    assert [k for k, _ in program.sorted().function().operations[0].inputs] == ["x", "y"]
    with pytest.raises(FormatError, match="no function 'other'"):
        program.function("other")
    with pytest.raises(ValueError, match="version"):
        MilProgram("1.3.1")
    with pytest.raises(ValueError, match="pairs of strings"):
        MilProgram("1.3", (("a", 1),))
    with pytest.raises(ValueError, match="build_info"):
        MilProgram("1.3", (), (), (("buildInfo", string("x")),))


def test_builders():
    assert literal(1) == Scalar(ScalarType("int32"), 1)
    assert literal(1.5) == Scalar(FP32, 1.5)
    assert literal(0.5, "fp16") == Scalar(FP16, 0.5)
    assert literal("x") == string("x")
    assert literal(np.float16(2)) == Scalar(FP16, 2.0)
    assert literal([1, 1]) == Tensor(MilTensorType("int32", (2,)), [1, 1])
    assert literal([0.5, 1]) == Tensor(MilTensorType("fp32", (2,)), [0.5, 1.0])
    assert literal(np.zeros((2, 3), np.int64)).type == MilTensorType("int64", (2, 3))
    assert literal(np.array(["a"])).type == MilTensorType("string", (1,))
    c = const("w", np.ones((2, 2), np.float16))
    assert c.op == "const" and c.name == "w" and c.inputs == ()
    assert c.output == Binding("w", MilTensorType("fp16", (2, 2)))
    assert c.attribute("val") == Tensor(MilTensorType("fp16", (2, 2)), np.ones(4))
    b = blob_const("b", MilTensorType("fp16", (8,)), 128)
    assert b.attribute("val") == BlobFile(
        MilTensorType("fp16", (8,)), "@model_path/weights/weight.bin", 128
    )
    op = operation(
        "conv", ("y", MilTensorType("fp16", (1,))), [("x", "x"), ("w", "b")], name="conv0"
    )
    assert op.inputs == (("x", Var("x")), ("w", Var("b"))) and op.name == "conv0"
    with pytest.raises(ValueError):
        literal(object())


def test_package_docstring_example_runs():
    import anekit.formats.mil as mil

    doc = mil.__doc__
    assert doc is not None
    lines = []
    for line in doc.split("Example::", 1)[1].splitlines()[1:]:
        if line and not line.startswith("    "):
            break  # the end of the indented example block
        lines.append(line[4:])
    code = "\n".join(lines)
    assert "print_program" in code
    namespace: dict[str, object] = {}
    exec(compile(code, "anekit.formats.mil docstring", "exec"), namespace)
    assert "text" in namespace and str(namespace["text"]).startswith("program(1.3)")
