"""Reading a Core ML ``.mlpackage`` (an mlprogram) into the MIL program tree, so the
simulator runs exactly the program a package holds.

A package is a folder: ``Manifest.json`` names the root model item (``model.mlmodel``, a
``CoreML.Specification.Model`` protobuf) under ``Data/``; its weights live beside it in
``weights/weight.bin``, which the program's BLOBFILE values name as ``@model_path/...``.
Everything is untrusted input: the manifest's paths must stay inside the package and the
model file is bounded in size. The protobuf classes are coremltools' (extra ``coreml``).

On disk, coremltools writes ``coreml_update_state(state, value)`` as ``write_state(input,
data)`` (no outputs), followed by ``read_state(input)`` of the same state when the updated
value is used; the reader gives back the one ``coreml_update_state`` operation (as
coremltools' own milproto loader does), since every operation of the tree has an output: a
``write_state`` whose value nobody reads gets an output named after the op, unused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import FormatError, MissingDependencyError
from anekit.files import read_file

from .mil import (
    ArgList,
    Binding,
    BlobFile,
    Function,
    ListType,
    MilProgram,
    MilTensorType,
    Operation,
    Scalar,
    ScalarType,
    StateType,
    Tensor,
    TupleType,
    Var,
)

MAX_MANIFEST_BYTES = 1 << 20
MAX_MODEL_BYTES = 256 << 20  # the program text; weights live in weight.bin
_DTYPES = {"BOOL": "bool", "STRING": "string", "FLOAT16": "fp16", "FLOAT32": "fp32",
           "FLOAT64": "fp64", "INT8": "int8", "INT16": "int16", "INT32": "int32",
           "INT64": "int64", "INT4": "int4", "UINT8": "uint8", "UINT16": "uint16",
           "UINT32": "uint32", "UINT64": "uint64", "UINT4": "uint4", "UINT2": "uint2",
           "UINT1": "uint1", "UINT6": "uint6", "UINT3": "uint3"}  # fmt: skip


@dataclass(frozen=True)
class FunctionInfo:
    """A function's description as the app sees it: input, output and state names."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    states: tuple[str, ...]


@dataclass(frozen=True)
class Package:
    """A read package: its program, the folder ``@model_path`` names, and its functions."""

    program: MilProgram
    model_dir: Path
    functions: dict[str, FunctionInfo]
    default_function: str
    specification_version: int


def read_package(path: str | Path) -> Package:
    root = Path(path)
    where = str(root)
    manifest = _json(root / "Manifest.json", where)
    try:
        item = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
        rel = str(item["path"])
    except (KeyError, TypeError):
        raise FormatError("its Manifest.json names no root model item", where=where) from None
    data = (root / "Data").resolve()
    model_path = (data / rel).resolve()
    if data not in model_path.parents:
        raise FormatError(f"the root model path '{rel}' leads outside the package", where=where)
    raw = read_file(model_path, "the package's model", max_bytes=MAX_MODEL_BYTES, error=FormatError)
    model = _proto_model(raw, str(model_path))
    if model.WhichOneof("Type") != "mlProgram":
        raise FormatError("the package holds no mlprogram", where=str(model_path))
    desc = model.description
    if len(desc.functions):
        functions = {f.name: _info(f.name, f) for f in desc.functions}
        default = desc.defaultFunctionName
    else:
        functions = {"main": _info("main", desc)}
        default = "main"
    program = _program(model.mlProgram, str(model_path))
    return Package(program, model_path.parent, functions, default, model.specificationVersion)


def _json(path: Path, where: str) -> Any:
    raw = read_file(path, "Manifest.json", max_bytes=MAX_MANIFEST_BYTES, error=FormatError)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"Manifest.json is not JSON: {exc}", where=where) from None


def _proto_model(raw: bytes, where: str) -> Any:
    try:
        from coremltools.proto import Model_pb2
    except ImportError as exc:
        raise MissingDependencyError("coremltools", "coreml", "reading an .mlpackage") from exc
    model = Model_pb2.Model()
    try:
        model.ParseFromString(raw)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise FormatError("model.mlmodel is not a Core ML model protobuf", where=where) from None
    return model


def _info(name: str, desc: Any) -> FunctionInfo:
    return FunctionInfo(name, tuple(i.name for i in desc.input), tuple(o.name for o in desc.output),
                        tuple(s.name for s in desc.state))  # fmt: skip


def _program(proto: Any, where: str) -> MilProgram:
    try:
        functions = tuple(_function(name, f) for name, f in proto.functions.items())
        info = tuple((k, _attribute_text(v)) for k, v in proto.attributes.items())
        return MilProgram(str(proto.version), tuple(i for i in info if i[1] is not None), functions)
    except (ValueError, KeyError) as exc:
        raise FormatError(f"the mlprogram cannot be read: {exc}", where=where) from None


def _attribute_text(value: Any) -> str | None:
    strings = value.immediateValue.tensor.strings.values
    return strings[0] if len(strings) == 1 else None


def _function(name: str, f: Any) -> Function:
    opset = f.opset
    block = f.block_specializations[opset]
    inputs = tuple(Binding(i.name, _type(i.type)) for i in f.inputs)
    ops: list[Operation] = []
    protos = list(block.operations)
    taken = {i.name for i in f.inputs} | {o.name for op in protos for o in op.outputs}
    types = {i.name: i.type for i in f.inputs}
    i = 0
    while i < len(protos):
        op = protos[i]
        if op.type != "write_state":
            ops.append(_operation(op))
            i += 1
            continue
        after = protos[i + 1] if i + 1 < len(protos) else None
        state = _single_name(op.inputs["input"])
        if (
            after is not None
            and after.type == "read_state"
            and _single_name(after.inputs["input"]) == state
        ):
            (out,) = after.outputs
            ops.append(_update_state(state, op, out.name, _type(out.type), after.attributes))
            i += 2
            continue
        unused = _unused(_value(op.attributes["name"]).value, taken)
        wrapped = _type(types[state]).wrapped
        ops.append(_update_state(state, op, unused, wrapped, op.attributes))
        i += 1
    return Function(name, _opset_name(opset), inputs, tuple(ops), tuple(block.outputs))


def _opset_name(opset: str) -> str:
    """``CoreML8`` (iOS 18's spelling in the protobuf) -> ``ios18``."""
    versions = {"CoreML5": "ios15", "CoreML6": "ios16", "CoreML7": "ios17", "CoreML8": "ios18"}
    if opset not in versions:
        raise ValueError(f"unknown opset '{opset}'")
    return versions[opset]


def _update_state(state: str, write: Any, out: str, out_type: Any, attributes: Any) -> Operation:
    return Operation(
        "coreml_update_state",
        (Binding(out, out_type),),
        (("state", Var(state)), ("value", Var(_single_name(write.inputs["data"])))),
        tuple((k, _value(v)) for k, v in sorted(attributes.items())),
    )


def _unused(hint: str, taken: set[str]) -> str:
    name, n = hint, 0
    while name in taken:
        n += 1
        name = f"{hint}_{n}"
    taken.add(name)
    return name


def _single_name(argument: Any) -> str:
    (binding,) = argument.arguments
    return binding.name


def _operation(op: Any) -> Operation:
    inputs = []
    for key in sorted(op.inputs):
        items = [Var(b.name) if b.WhichOneof("binding") == "name" else _value(b.value)
                 for b in op.inputs[key].arguments]  # fmt: skip
        inputs.append((key, items[0] if len(items) == 1 else ArgList(tuple(items))))
    outputs = tuple(Binding(o.name, _type(o.type)) for o in op.outputs)
    attributes = tuple((k, _value(v)) for k, v in sorted(op.attributes.items()))
    return Operation(op.type, outputs, tuple(inputs), attributes)


def _type(t: Any) -> Any:
    kind = t.WhichOneof("type")
    if kind == "tensorType":
        tt = t.tensorType
        dtype = _dtype(tt.dataType)
        dims = tuple(d.constant.size if d.WhichOneof("dimension") == "constant" else "?"
                     for d in tt.dimensions)  # fmt: skip
        return ScalarType(dtype) if tt.rank == 0 else MilTensorType(dtype, dims)
    if kind == "stateType":
        return StateType(_type(t.stateType.wrappedType))
    if kind == "listType":
        return ListType(_type(t.listType.type), t.listType.length.constant.size)
    if kind == "tupleType":
        return TupleType(tuple(_type(e) for e in t.tupleType.types))
    raise ValueError(f"unsupported value type '{kind}'")


def _dtype(code: int) -> str:
    from coremltools.proto import MIL_pb2

    name = MIL_pb2.DataType.Name(code)
    if name not in _DTYPES:
        raise ValueError(f"unsupported element type {name}")
    return _DTYPES[name]


def _value(v: Any) -> Any:
    t = _type(v.type)
    if v.WhichOneof("value") == "blobFileValue":
        if not isinstance(t, MilTensorType):
            raise ValueError("a weight-file value that is not a tensor")
        return BlobFile(t, v.blobFileValue.fileName, int(v.blobFileValue.offset))
    tensor = v.immediateValue.tensor
    kind = tensor.WhichOneof("value")
    dtype = t.dtype if isinstance(t, (ScalarType, MilTensorType)) else None
    if dtype is None:
        raise ValueError("an immediate value that is not a tensor or scalar")
    if kind == "bytes":
        data = np.frombuffer(tensor.bytes.values, dtype={"fp16": np.float16, "int8": np.int8,
                                                          "uint8": np.uint8}[dtype])  # fmt: skip
    elif kind == "strings":
        data = np.array(list(tensor.strings.values), dtype=object)
    else:
        data = np.array(list(getattr(tensor, kind).values) if kind else [])
    if isinstance(t, ScalarType):
        if data.size != 1:
            raise ValueError(f"a scalar {dtype} holding {data.size} values")
        item = data.reshape(-1)[0]
        return Scalar(t, item if dtype == "string" else item.item())
    shape = tuple(int(d) for d in t.shape)
    return Tensor(t, data.reshape(shape).astype(_storage(dtype)))


def _storage(dtype: str) -> Any:
    from .mil.types import dtype_info

    return np.dtype(dtype_info(dtype).numpy)
