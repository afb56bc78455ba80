"""The netplist vocabulary shared by the reader and the writer: type names, dimensions, unit kinds.

Every name here is either *attested* (it appears in Apple's own netplists under
`fixtures/netplist/` or in ane-compiler table 22.6) or *assumed* (our best guess, named after
the attested pattern; a file from Apple's compiler may spell it differently). The
`ATTESTED`/`ASSUMED` notes travel into `anekit inspect` so nobody mistakes a guess for
a fact.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from anekit.ir.dtypes import DType

# Versions: the fixtures are 1.0.9 (Inputs/Outputs); ane-compiler names 1.0.10
# (InputList/OutputList/OperationList/ProcedureList). The writer emits 1.0.10.
WRITE_VERSION: Final = "1.0.10"
OUTPUT_SUFFIX: Final = "@output"

# Element types (attested: Float16, Float32, UInt8; assumed: Int8).
DATA_TYPES: Final = MappingProxyType(
    {"Float16": DType.FP16, "Float32": DType.FP32, "UInt8": DType.UINT8, "Int8": DType.INT8}
)
TYPE_NAMES: Final = MappingProxyType({v: k for k, v in DATA_TYPES.items()})

# Dimension names (all attested: Broadcast, Concat and InputView units use them).
BATCH, CHANNEL, DEPTH, HEIGHT, WIDTH = "Batch", "Channel", "Depth", "Height", "Width"
DIMENSIONS: Final = (BATCH, CHANNEL, DEPTH, HEIGHT, WIDTH)


def dimension_axis(name: str, rank: int) -> int:
    """IR axis of a dimension name in an NCHW (rank 4) or NCDHW (rank 5) tensor."""
    if rank == 5:
        return DIMENSIONS.index(name)
    return {BATCH: 0, CHANNEL: 1, HEIGHT: 2, WIDTH: 3}[name]


def axis_dimension(axis: int, rank: int) -> str:
    names = DIMENSIONS if rank == 5 else (BATCH, CHANNEL, HEIGHT, WIDTH)
    return names[axis]


# Neuron (activation) types -> IR op. Attested: Sigmoid, Sign, Exp2 (fixtures), ReLU
# (h13_relu.hwx was compiled from a neuron netplist; the exact spelling is assumed).
# Exp2 has no IR op of its own: it reads as pow(2, x).
NEURON_TYPES: Final = MappingProxyType(
    {"ReLU": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Sign": "sign", "Exp2": "pow"}
)
NEURON_NAMES: Final = MappingProxyType({v: k for k, v in NEURON_TYPES.items()})

# (Scaled)ElementWise Type -> IR binary op. Attested: Add, Min; assumed: Sub, Mul, Max.
ELEMENTWISE_TYPES: Final = MappingProxyType(
    {"Add": "add", "Sub": "sub", "Mul": "mul", "Min": "minimum", "Max": "maximum"}
)
ELEMENTWISE_NAMES: Final = MappingProxyType({v: k for k, v in ELEMENTWISE_TYPES.items()})

# Pooling Type -> IR op (assumed; Pooling's parameters reuse Conv's attested kernel keys).
POOL_TYPES: Final = MappingProxyType({"Max": "max_pool", "Avg": "avg_pool"})
POOL_NAMES: Final = MappingProxyType({v: k for k, v in POOL_TYPES.items()})

# Unit types and how sure we are of their parameters.
ATTESTED: Final = frozenset(
    {"Conv", "Neuron", "GOC", "ScaledElementWise", "Concat", "Reshape", "InputView", "Broadcast"}
)
ASSUMED: Final = frozenset(
    {"ElementWise", "Pooling", "Softmax", "Transpose", "MatrixMultiplication"}
)
# Named by ane-compiler/ane-container but not read: their parameters are not described anywhere we have.
UNSUPPORTED: Final = MappingProxyType(
    {
        "SDPA": "its inputs are described (query, key, value, scale, optional mask) "
        "but not its parameter names",
    }
)

# Keys of a unit's own dictionary (all attested).
UNIT_KEYS: Final = frozenset(
    {"Bottom", "Name", "Type", "OutputChannels", "OutputType", "Params"}
    | {"UnescapedBottom", "UnescapedName"}
)
INPUT_SHAPE_KEYS: Final = MappingProxyType(
    {
        "BatchSize": "batch",
        "InputChannels": "channels",
        "InputDepth": "depth",
        "InputHeight": "height",
        "InputWidth": "width",
    }
)
INPUT_LAYOUT_KEYS: Final = (
    "InputInterleave",
    "InputPlaneStride",
    "InputRowStride",
    "InputBatchStride",
    "InputDepthStride",
)
OUTPUT_LAYOUT_KEYS: Final = (
    "OutputInterleave",
    "OutputPlaneStride",
    "OutputRowStride",
    "OutputBatchStride",
    "OutputDepthStride",
)
# Reserved keys of a network dictionary: a unit or port may not be called this.
NETWORK_KEYS: Final = frozenset(
    {"Inputs", "Outputs", "InputList", "OutputList", "Units", "OperationList", "Weights"}
)
TOP_KEYS: Final = frozenset({"Networks", "Version", "ProcedureList"})

# The engine works in 64-byte rows (the row strides of every fixture are multiples of 64).
ROW_ALIGN: Final = 64
# Weight blobs written by anekit start on this boundary (the .hwx tile granule).
BLOB_ALIGN: Final = 64

# Reader limits: far above any real engine tensor, low enough that nothing absurd is built.
MAX_DIM: Final = 1 << 24
MAX_ELEMENTS: Final = 1 << 31
