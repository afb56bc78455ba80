"""Hypothesis strategies that build random, valid MIL program trees."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from anekit.formats.mil import (
    DTYPES,
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
    StateType,
    Tensor,
    TupleType,
    TupleValue,
    Var,
)

_FIRST = "abcxyzABZ_"
NAMES = st.builds(
    str.__add__, st.sampled_from(_FIRST), st.text(alphabet=_FIRST + "09.", max_size=5)
)
DTYPE_NAMES = st.sampled_from(sorted(DTYPES))
DIMS = st.one_of(st.integers(0, 4), st.just("?"), NAMES)


def element(dtype: str) -> st.SearchStrategy:
    info = DTYPES[dtype]
    if info.kind == "bool":
        return st.booleans()
    if info.kind == "string":
        return st.text(max_size=8)
    if info.kind == "int":
        return st.integers(info.low, info.high)
    width = {"fp16": 16, "fp32": 32, "fp64": 64}[dtype]
    return st.floats(width=width)


@st.composite
def scalar_values(draw: st.DrawFn, dtype: str | None = None) -> Scalar:
    dtype = dtype or draw(DTYPE_NAMES)
    legacy = draw(st.booleans())
    t = MilTensorType(dtype, ()) if legacy else ScalarType(dtype)
    return Scalar(t, draw(element(dtype)))


@st.composite
def tensor_values(draw: st.DrawFn) -> Tensor:
    dtype = draw(DTYPE_NAMES)
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
    count = math.prod(shape)
    items = draw(st.lists(element(dtype), min_size=count, max_size=count))
    if DTYPES[dtype].kind == "string":
        data = np.empty(count, dtype=object)
        data[:] = items
    else:
        data = np.array(items, dtype=DTYPES[dtype].numpy_dtype if count else None)
    if draw(st.booleans()) and len(shape) == 1:
        return Tensor(MilTensorType(dtype, ("?",)), data.astype(DTYPES[dtype].numpy_dtype))
    return Tensor(MilTensorType(dtype, shape), data.reshape(shape))


@st.composite
def blob_values(draw: st.DrawFn) -> BlobFile:
    dtype = draw(st.sampled_from(["fp16", "fp32", "int8", "uint8", "int4"]))
    shape = tuple(draw(st.lists(st.integers(0, 2048), min_size=1, max_size=4)))
    return BlobFile(
        MilTensorType(dtype, shape), draw(st.text(max_size=30)), draw(st.integers(0, 2**64 - 1))
    )


LEAF_VALUES = st.one_of(scalar_values(), tensor_values(), blob_values())


@st.composite
def composite_values(draw: st.DrawFn) -> ListValue | TupleValue | DictValue:
    kind = draw(st.sampled_from(["list", "tuple", "dict"]))
    if kind == "list":
        dtype = draw(DTYPE_NAMES)
        items = draw(
            st.lists(
                scalar_values(dtype).map(lambda s: Scalar(ScalarType(dtype), s.value)), max_size=3
            )
        )
        length = draw(st.sampled_from([len(items), "?"]))
        return ListValue(ListType(ScalarType(dtype), length), tuple(items))
    if kind == "tuple":
        items = draw(st.lists(LEAF_VALUES, max_size=3))
        return TupleValue(TupleType(tuple(v.type for v in items)), tuple(items))
    string = ScalarType("string")
    keys = draw(st.lists(st.text(max_size=5), max_size=3))
    value_dtype = draw(DTYPE_NAMES)
    entries = tuple(
        (Scalar(string, k), Scalar(ScalarType(value_dtype), draw(element(value_dtype))))
        for k in keys
    )
    return DictValue(DictType(string, ScalarType(value_dtype)), entries)


VALUES = st.one_of(LEAF_VALUES, composite_values())

TYPES = st.one_of(
    DTYPE_NAMES.map(ScalarType),
    st.builds(MilTensorType, DTYPE_NAMES, st.lists(DIMS, max_size=4).map(tuple)),
)
INPUT_TYPES = st.one_of(
    TYPES,
    TYPES.map(StateType),
    st.builds(ListType, TYPES, st.one_of(st.integers(0, 5), st.just("?"))),
    st.builds(DictType, TYPES, TYPES),
    st.lists(TYPES, max_size=3).map(lambda ts: TupleType(tuple(ts))),
)


def unique_pairs(keys: list[str], values: list) -> tuple:
    return tuple(zip(dict.fromkeys(keys), values, strict=False))


@st.composite
def functions(draw: st.DrawFn, name: str) -> Function:
    taken: list[str] = []

    def fresh() -> str:
        n = f"{draw(NAMES)}_{len(taken)}"  # the suffix keeps names unique
        taken.append(n)
        return n

    inputs = tuple(Binding(fresh(), draw(INPUT_TYPES)) for _ in range(draw(st.integers(0, 3))))
    operations = []
    for _ in range(draw(st.integers(0, 6))):
        defined = list(taken)
        refs = st.sampled_from(defined).map(Var) if defined else st.nothing()
        item = st.one_of(refs, VALUES) if defined else VALUES
        args = st.one_of(item, st.lists(item, max_size=3).map(lambda xs: ArgList(tuple(xs))))
        keys = draw(st.lists(NAMES, max_size=4))
        inputs_ = unique_pairs(keys, [draw(args) for _ in keys])
        attr_keys = draw(st.lists(NAMES, max_size=3))
        attributes = unique_pairs(attr_keys, [draw(VALUES) for _ in attr_keys])
        outputs = tuple(Binding(fresh(), draw(TYPES)) for _ in range(draw(st.integers(1, 3))))
        operations.append(Operation(draw(NAMES), outputs, inputs_, attributes))
    outputs = tuple(draw(st.lists(st.sampled_from(taken), max_size=3))) if taken else ()
    attributes = draw(st.sampled_from([(), (("Info", draw(VALUES)),)]))
    opset = draw(st.one_of(st.none(), NAMES))
    return Function(name, opset, inputs, tuple(operations), outputs, attributes)


@st.composite
def programs(draw: st.DrawFn) -> MilProgram:
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    version = draw(st.sampled_from(["1.0", "1.3", "2", "1.10"]))
    build_info = tuple(
        draw(st.lists(st.tuples(st.text(max_size=10), st.text(max_size=10)), max_size=3))
    )
    extra = draw(st.sampled_from([(), (("docString", draw(scalar_values("string"))),)]))
    return MilProgram(version, build_info, tuple(draw(functions(n)) for n in names), extra)
