"""Loading ONNX models from files, bytes or protos, with bounds-checked external data.

External data is memory-mapped read-only (one map per file, shared by its tensors): the
arrays are views of the page cache, paged in once when something reads them (e.g. the fp16
conversion of code generation), never copied at import. Small tensors and files beyond
``MAX_MAPPED_FILES`` are read into memory instead. As with any mapped file, rewriting or
truncating the data file while its arrays are alive changes or invalidates them.
"""

from __future__ import annotations

import math
import mmap
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from anekit.errors import FormatError, ModelError
from anekit.files import read_file

# ONNX element type -> numpy dtype for the types anekit reads from files.
ONNX_TO_NUMPY: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
}


# 4-bit codes (onnxruntime's block quantizers write them) are widened to one byte per code:
# the values are the same; the importer marks these constants so that no op saturates to the
# byte's range where the model asks for 4 bits.
FOUR_BIT: dict[int, np.dtype] = {
    TensorProto.INT4: np.dtype(np.int8),
    TensorProto.UINT4: np.dtype(np.uint8),
}


def onnx_type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type {elem_type}"


def load_model(
    model: str | os.PathLike | bytes | onnx.ModelProto,
) -> tuple[onnx.ModelProto, Path | None]:
    """Parse a model without its external data; return it with its directory (for external data)."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, bytes | bytearray):
        return _parse(bytes(model), "<bytes>"), None
    if not isinstance(model, str | os.PathLike):
        raise ModelError(
            f"cannot read an ONNX model from a {type(model).__name__}",
            hint="pass a file path, the model's bytes or an onnx.ModelProto",
        )
    path = Path(model)
    data = read_file(
        path, "model file", sniff=sniff_onnx, max_bytes=MAX_PROTO_BYTES, error=ModelError,
        too_large_hint="protobuf caps an .onnx file below 2 GiB; save larger weights as "
        "external data (onnx.save_model(..., save_as_external_data=True))",
    )  # fmt: skip
    return _parse(data, str(path)), path.resolve().parent


# protobuf cannot hold a message of 2 GiB or more: larger weights live in external data files
MAX_PROTO_BYTES = (2 << 30) - 1
# The key bytes a ModelProto may start with: its fields and their wire types (ir_version,
# producer, domain, model_version, doc_string, graph, opset_import, metadata_props, and
# the two-byte keys of training_info, functions and configuration).
_ONNX_FIRST_KEYS = frozenset({0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2})


def sniff_onnx(head: bytes) -> str | None:
    """What is wrong with the first bytes of a would-be ONNX file (None: they may be one)."""
    if not head:
        return "the file is empty, not an ONNX model"
    if head[0] not in _ONNX_FIRST_KEYS:
        return (
            f"not an ONNX model: it starts with the byte 0x{head[0]:02x}, which no ONNX "
            "model starts with"
        )
    return None


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    if not data:
        raise FormatError("the file is empty, not an ONNX model", where=where)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise FormatError(
            "not a valid ONNX model: the protobuf could not be decoded (truncated or not ONNX)",
            where=where,
            hint="check that the file is a complete .onnx export",
        ) from None
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise FormatError(
            "not an ONNX model: no graph found (is this really an .onnx file?)", where=where
        )
    return proto


# Tensors from this size up are views of the file's map; smaller ones are copied out of it
# (so they do not each hold a view). At most this many data files are mapped per import
# (each map holds a file descriptor); tensors of further files are read.
MIN_MAPPED_BYTES = 1 << 16
MAX_MAPPED_FILES = 64


class ExternalData:
    """The external data files of one model, memory-mapped read-only on first use."""

    def __init__(self, base_dir: Path | None):
        self.base_dir = base_dir
        self._maps: dict[Path, memoryview | None] = {}

    def array(self, tensor: TensorProto) -> np.ndarray:
        """The tensor's data (bounds checked), a read-only view of the file's map when large."""
        target, offset, dtype, shape = _locate(tensor, self.base_dir)
        count = math.prod(shape)
        view = self._map(target)
        if view is None:
            return np.fromfile(target, dtype=dtype, count=count, offset=offset).reshape(shape)
        if offset + count * dtype.itemsize > len(view):  # the file shrank after the check
            raise FormatError(
                f"initializer '{tensor.name}': external data ends past the end of its file"
            )
        arr = np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape)
        if arr.nbytes < MIN_MAPPED_BYTES:
            return arr.copy()
        arr.flags.writeable = False
        return arr

    def _map(self, target: Path) -> memoryview | None:
        if target in self._maps:
            return self._maps[target]
        if len(self._maps) >= MAX_MAPPED_FILES:
            return None
        try:
            with open(target, "rb") as f:
                view: memoryview | None = memoryview(
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                )
        except (OSError, ValueError):  # an empty file, or a file system that cannot map
            view = None
        self._maps[target] = view
        return view


def tensor_to_array(
    tensor: TensorProto, base_dir: Path | None, external: ExternalData | None = None
) -> np.ndarray:
    """A TensorProto as a numpy array; external data is read, or mapped through
    ``external`` (one per model), with every bound checked."""
    if tensor.data_location == TensorProto.EXTERNAL:
        if external is not None:
            return external.array(tensor)
        target, offset, dtype, shape = _locate(tensor, base_dir)
        return np.fromfile(target, dtype=dtype, count=math.prod(shape), offset=offset).reshape(
            shape
        )
    if tensor.data_type in FOUR_BIT:
        return _four_bit(tensor)
    if tensor.data_type not in ONNX_TO_NUMPY:
        raise ModelError(
            f"initializer '{tensor.name}' has element type {onnx_type_name(tensor.data_type)}, "
            "which anekit does not support"
        )
    _check_embedded(tensor)
    try:
        return onnx.numpy_helper.to_array(tensor)
    except Exception as exc:  # noqa: BLE001 - malformed tensor payloads
        raise FormatError(f"initializer '{tensor.name}' is malformed: {exc}") from None


def _four_bit(tensor: TensorProto) -> np.ndarray:
    """An embedded int4/uint4 tensor (two codes a byte, low nibble first) widened to bytes."""
    name = tensor.name or "a tensor"
    dims = [int(d) for d in tensor.dims]
    count = math.prod(dims)
    if any(d < 0 for d in dims):
        raise FormatError(f"'{name}' has dims {dims}; a dimension is a size, never negative")
    # raw_data and int32_data both hold one byte of two codes per entry
    have = len(tensor.raw_data) if tensor.HasField("raw_data") else len(tensor.int32_data)
    if have != (count + 1) // 2:
        raise FormatError(
            f"'{name}' has {have} bytes of 4-bit codes, but its dims {dims} need {(count + 1) // 2}",
            hint="the tensor is truncated or its dims are wrong; re-export the model",
        )
    try:
        return onnx.numpy_helper.to_array(tensor).astype(FOUR_BIT[tensor.data_type])
    except Exception as exc:  # noqa: BLE001 - malformed tensor payloads
        raise FormatError(f"initializer '{name}' is malformed: {exc}") from None


# TensorProto's typed field for each element type (onnx.helper's table), for the count check
_TYPED_FIELDS = {
    TensorProto.FLOAT: "float_data", TensorProto.DOUBLE: "double_data",
    TensorProto.INT64: "int64_data", TensorProto.UINT32: "uint64_data",
    TensorProto.UINT64: "uint64_data",
}  # fmt: skip


def _check_embedded(tensor: TensorProto) -> None:
    """The tensor's dims are sizes and its data holds exactly that many elements (the rule
    onnxruntime applies: a short raw_data or a dim of -1 is refused, not reinterpreted)."""
    name = tensor.name or "a tensor"
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise FormatError(
            f"'{name}' has dims {dims}; a dimension is a size, never negative",
            hint="fix the exporter that wrote the model",
        )
    count = math.prod(dims)
    dtype = ONNX_TO_NUMPY[tensor.data_type]
    if tensor.HasField("raw_data"):
        have, want = len(tensor.raw_data), count * dtype.itemsize
        unit = "bytes"
    else:
        field = _TYPED_FIELDS.get(tensor.data_type, "int32_data")
        have, want, unit = len(getattr(tensor, field)), count, "values"
    if have != want:
        raise FormatError(
            f"'{name}' has {have} {unit} of data, but its dims {dims} of "
            f"{onnx_type_name(tensor.data_type)} need {want}",
            hint="the tensor is truncated or its dims are wrong; re-export the model",
        )


def _locate(
    tensor: TensorProto, base_dir: Path | None
) -> tuple[Path, int, np.dtype, tuple[int, ...]]:
    """Where an external tensor's bytes are: file, offset, dtype and shape, all checked."""
    info = {e.key: e.value for e in tensor.external_data}
    name = tensor.name
    if base_dir is None:
        raise ModelError(
            f"initializer '{name}' stores its data in an external file, but the model was given "
            "without a directory",
            hint="pass the model's file path instead of a ModelProto, or load it with onnx.load()",
        )
    location = info.get("location")
    if not location:
        raise FormatError(f"initializer '{name}': external data has no location")
    target = (base_dir / location).resolve()
    if base_dir not in target.parents:
        raise FormatError(
            f"initializer '{name}': external data path '{location}' leaves the model's directory"
        )
    if not target.is_file():
        raise ModelError(
            f"initializer '{name}': external data file '{location}' is missing next to the model"
        )
    dtype = ONNX_TO_NUMPY.get(tensor.data_type)
    if dtype is None:
        raise ModelError(
            f"initializer '{name}' has unsupported type {onnx_type_name(tensor.data_type)}"
        )
    shape = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in shape):
        raise FormatError(f"initializer '{name}' has a negative dimension {list(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize  # exact: hostile dims cannot wrap around
    try:
        offset = int(info.get("offset", 0))
        length = int(info.get("length", nbytes))
    except ValueError:
        raise FormatError(
            f"initializer '{name}': external data offset/length are not integers"
        ) from None
    size = target.stat().st_size
    if offset < 0 or length != nbytes or offset + length > size:
        raise FormatError(
            f"initializer '{name}': external data [{offset}, {offset + length}) does not fit "
            f"'{location}' ({size} bytes) or does not hold {list(shape)} x {dtype}"
        )
    return target, offset, dtype, shape
