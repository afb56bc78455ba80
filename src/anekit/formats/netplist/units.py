"""One reader per netplist unit type: Params -> the IR op of an engine layer (`LayerSpec`).

Each reader refuses parameters it does not know (a misread layer is worse than an error).
Conventions (see vocab.py for which names are attested and which assumed):

- Step is [x, y] (width stride first); pads are PadTop/PadBot/PadLeft/PadRight;
- kernels are [OutputChannels, InputChannels/groups, (KernelDepth,) KernelHeight,
  KernelWidth], row-major, little-endian, at KernelOffset bytes into Weights[KernelIndex];
- integer kernels (UInt8/Int8) are their raw integer values (no scale key is attested);
- fp16 scalars (Scale, ScaleScalar, BiasScalar) are written as their 16-bit patterns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from anekit.formats.netplist.context import LayerSpec, Step, UnitContext
from anekit.formats.netplist.document import Fields
from anekit.formats.netplist.vocab import (
    CHANNEL,
    DATA_TYPES,
    DEPTH,
    DIMENSIONS,
    ELEMENTWISE_TYPES,
    NEURON_TYPES,
    POOL_TYPES,
    dimension_axis,
)
from anekit.ir.engine import Slot

WINDOW_KEYS = frozenset({"KernelWidth", "KernelHeight", "Step"})
PAD_KEYS = ("PadTop", "PadBot", "PadLeft", "PadRight")


def _lookup(cx: UnitContext, table: Mapping[str, str], key: str = "Type") -> str:
    """A Params name looked up exactly, then ignoring case; unknown names name the choices."""
    name = cx.params.str(key)
    if name in table:
        return table[name]
    folded = {k.lower(): v for k, v in table.items()}
    if name.lower() in folded:
        return folded[name.lower()]
    known = ", ".join(table)
    raise cx.fail(f"unsupported {cx.unit.type} type '{name}' (anekit reads {known})")


def _dimension(cx: UnitContext, name: str) -> int:
    if name == DEPTH and cx.rank == 4:
        raise cx.fail("a Depth dimension needs a 5-d network")
    return dimension_axis(name, cx.rank)


def _window(cx: UnitContext, with_depth: bool) -> tuple[tuple[int, ...], ...]:
    """(kernel, strides, pads) over the spatial axes from the Conv-style keys."""
    p = cx.params
    kh, kw = p.int("KernelHeight", low=1), p.int("KernelWidth", low=1)
    kd = p.int("KernelDepth", 1, low=1) if with_depth else 1
    sx, sy = p.ints("Step", (1, 1))
    top, bot, left, right = (p.int(k, 0) for k in PAD_KEYS)
    if cx.rank == 5:
        return (kd, kh, kw), (1, sy, sx), (0, top, left, 0, bot, right)
    if kd != 1:
        raise cx.fail(f"KernelDepth {kd} needs a 5-d network")
    return (kh, kw), (sy, sx), (top, left, bot, right)


def conv(cx: UnitContext) -> LayerSpec:
    p = cx.params
    p.only(
        WINDOW_KEYS
        | set(PAD_KEYS)
        | {"Type", "KernelDepth", "KernelIndex", "KernelOffset", "KernelType", "KernelMode"}
        | {"KernelGroupReuse", "NumGroups"},
        "Conv parameter(s)",
    )
    p.str("Type", "Conv", choices=("Conv",))
    p.str("KernelMode", "Dense", choices=("Dense",))
    p.bool("KernelGroupReuse", False)
    (x,) = cx.inputs(1)
    kernel, strides, pads = _window(cx, with_depth=True)
    groups = p.int("NumGroups", 1, low=1)
    cout = cx.unit.output_channels
    if cout is None:
        raise cx.fail("OutputChannels is missing (a Conv unit must give it)")
    cin = cx.type(x).shape[1]
    if cin % groups or cout % groups:
        raise cx.fail(
            f"input/output channels should be divisible by num group: {cin}, {cout}, {groups}"
        )
    dtype = DATA_TYPES[p.dtype("KernelType", "Float16")]
    shape = (cout, cin // groups, *kernel)
    count = int(np.prod(shape, dtype=np.int64))
    index, offset = p.int("KernelIndex", 0), p.int("KernelOffset", 0, high=1 << 48)
    weight = cx.weights("kernel", index, offset, dtype, count).reshape(shape)
    if not dtype.is_float:  # the engine widens integer kernels; keep their exact values
        weight = weight.astype(np.float16)
    name = cx.constant(weight, "kernel")
    attrs = {"strides": strides, "pads": pads, "group": groups}
    return LayerSpec("conv", (x, name), attrs, "conv")


def neuron(cx: UnitContext) -> LayerSpec:
    cx.params.only({"Type"}, "Neuron parameter(s)")
    op = _lookup(cx, NEURON_TYPES)
    (x,) = cx.inputs(1)
    if op == "pow":  # Exp2: 2 ** x
        two = cx.constant(np.array(2.0, dtype=cx.type(x).dtype.numpy), "base")
        return LayerSpec("pow", (two, x), {}, "neuron")
    return LayerSpec(op, (x,), {}, "neuron")


def _goc_vector(cx: UnitContext, group: Fields, prefix: str, x: str) -> str | None:
    keys = [f"{prefix}{k}" for k in ("Count", "Index", "Offset", "Type")]
    if not any(group.has(k) for k in keys):
        return None
    t = cx.type(x)
    count = group.int(f"{prefix}Count", low=1)
    if count != t.shape[1]:
        raise cx.fail(f"{prefix}Count is {count} but the input has {t.shape[1]} channels")
    dtype = DATA_TYPES[group.dtype(f"{prefix}Type", "Float16")]
    index, offset = group.int(f"{prefix}Index", 0), group.int(f"{prefix}Offset", 0, high=1 << 48)
    values = cx.weights(prefix.lower(), index, offset, dtype, count)
    per_channel = values.astype(t.dtype.numpy).reshape((count,) + (1,) * (t.rank - 2))
    return cx.constant(per_channel, prefix.lower())


def goc(cx: UnitContext) -> LayerSpec:
    p = cx.params
    p.only({"ScaleScalar", "BiasScalar", "BiasScaleGroupData"}, "GOC parameter(s)")
    (x,) = cx.inputs(1)
    dtype = cx.type(x).dtype.numpy
    group = p.table_of("BiasScaleGroupData")
    if group is not None:
        group.only(
            {f"{r}{k}" for r in ("Bias", "Scale") for k in ("Count", "Index", "Offset", "Type")},
            "BiasScaleGroupData key(s)",
        )
    operands: dict[str, str] = {}
    for prefix, scalar in (("Scale", "ScaleScalar"), ("Bias", "BiasScalar")):
        vector = _goc_vector(cx, group, prefix, x) if group is not None else None
        if p.has(scalar):
            if vector is not None:
                raise cx.fail(f"gives both {scalar} and a {prefix} vector")
            vector = cx.constant(np.array(p.half(scalar), dtype=dtype), prefix.lower())
        operands[prefix] = vector or ""
    # A GOC unit is an engine layer with only its gain/offset slot filled.
    step = Step(Slot.GOC, "goc", {}, (operands["Scale"], operands["Bias"]))
    return LayerSpec("identity", (x,), {}, "goc", (step,))


def elementwise(cx: UnitContext) -> LayerSpec:
    scaled = cx.unit.type == "ScaledElementWise"
    cx.params.only({"Type", "Scale"} if scaled else {"Type"}, f"{cx.unit.type} parameter(s)")
    op = _lookup(cx, ELEMENTWISE_TYPES)
    a, b = cx.inputs(2)
    if cx.type(a).shape != cx.type(b).shape:
        raise cx.fail(
            f"operands have shapes {list(cx.type(a).shape)} and {list(cx.type(b).shape)} "
            "(a netplist broadcasts with Broadcast units)"
        )
    scale = cx.params.half("Scale", 1.0) if scaled else 1.0
    epilogue: tuple[Step, ...] = ()
    if scale != 1.0:  # Scale multiplies the result (an fp16 gain in the GOC slot)
        gain = cx.constant(np.array(scale, dtype=cx.type(a).dtype.numpy), "scale")
        epilogue = (Step(Slot.GOC, "goc", {}, (gain, "")),)
    return LayerSpec(op, (a, b), {}, "elementwise", epilogue)


def concat(cx: UnitContext) -> LayerSpec:
    cx.params.only({"Dimension"}, "Concat parameter(s)")
    axis = _dimension(cx, cx.params.str("Dimension", CHANNEL, choices=DIMENSIONS))
    values = cx.inputs(numeric=False)
    return LayerSpec("concat", values, {"axis": axis}, "concat")


def reshape(cx: UnitContext) -> LayerSpec:
    names = ("Batch", "Channel", "Depth", "Height", "Width")
    cx.params.only({f"Reshaped{n}" for n in names}, "Reshape parameter(s)")
    dims = {
        n: cx.params.int(f"Reshaped{n}", 1 if n in ("Batch", "Depth") else None, low=1)
        for n in names
    }
    missing = [f"Reshaped{n}" for n, v in dims.items() if v is None]
    if missing:
        raise cx.fail(f"{', '.join(missing)} missing")
    if cx.rank == 4 and dims["Depth"] != 1:
        raise cx.fail("ReshapedDepth needs a 5-d network")
    shape = [dims[n] for n in names if cx.rank == 5 or n != "Depth"]
    (x,) = cx.inputs(1, numeric=False)
    return LayerSpec("reshape", (x,), {"shape": shape}, "reshape")


def input_view(cx: UnitContext) -> LayerSpec:
    p = cx.params
    p.only({"Dimension", "Offset", "Size"}, "InputView parameter(s)")
    axis = _dimension(cx, p.str("Dimension", choices=DIMENSIONS))
    offset, size = p.int("Offset", 0), p.int("Size", low=1)
    (x,) = cx.inputs(1, numeric=False)
    dim = cx.type(x).shape[axis]
    if offset + size > dim:
        raise cx.fail(f"the view [{offset}, {offset + size}) does not fit the dimension ({dim})")
    attrs = {"starts": (offset,), "ends": (offset + size,), "axes": (axis,)}
    return LayerSpec("slice", (x,), attrs, "texture")


def broadcast(cx: UnitContext) -> LayerSpec:
    cx.params.only({"BroadcastInfo"}, "Broadcast parameter(s)")
    info = cx.params.table.get("BroadcastInfo")
    if not isinstance(info, tuple) or not info:
        raise cx.fail("BroadcastInfo must be a non-empty array of {Dimension, Size}")
    (x,) = cx.inputs(1, numeric=False)
    shape = list(cx.type(x).shape)
    seen = set()
    for i, entry in enumerate(info):
        item = Fields(entry, f"{cx.where}.Params.BroadcastInfo[{i}]", "a BroadcastInfo entry")
        item.only({"Dimension", "Size"}, "BroadcastInfo key(s)")
        name, size = item.str("Dimension", choices=DIMENSIONS), item.int("Size", low=1)
        if name in seen:
            raise cx.fail(f"BroadcastInfo names {name} twice")
        seen.add(name)
        if name == DEPTH and cx.rank == 4:
            continue  # depth 1 to 1 (a 5-d network is read when any size differs)
        axis = dimension_axis(name, cx.rank)
        if shape[axis] not in (1, size):
            raise cx.fail(f"cannot broadcast {name} of size {shape[axis]} to {size}")
        shape[axis] = size
    return LayerSpec("expand", (x,), {"shape": shape}, "texture")


def pooling(cx: UnitContext) -> LayerSpec:
    cx.params.only(WINDOW_KEYS | set(PAD_KEYS) | {"Type"}, "Pooling parameter(s)")
    op = _lookup(cx, POOL_TYPES)
    kernel, strides, pads = _window(cx, with_depth=False)
    (x,) = cx.inputs(1)
    return LayerSpec(op, (x,), {"kernel": kernel, "strides": strides, "pads": pads}, "pool")


def softmax(cx: UnitContext) -> LayerSpec:
    cx.params.only({"Dimension"}, "Softmax parameter(s)")
    axis = _dimension(cx, cx.params.str("Dimension", CHANNEL, choices=DIMENSIONS))
    (x,) = cx.inputs(1)
    return LayerSpec("softmax", (x,), {"axis": axis}, "softmax")


def transpose(cx: UnitContext) -> LayerSpec:
    cx.params.only({"Permutation"}, "Transpose parameter(s)")
    names = cx.params.names("Permutation")
    axes = [_dimension(cx, n) if n in DIMENSIONS else -1 for n in names]
    if sorted(axes) != list(range(cx.rank)):
        raise cx.fail(f"Permutation {list(names)} is not a permutation of the {cx.rank} dimensions")
    (x,) = cx.inputs(1, numeric=False)
    return LayerSpec("transpose", (x,), {"perm": axes}, "transpose")


def matrix_multiplication(cx: UnitContext) -> LayerSpec:
    cx.params.only(set(), "MatrixMultiplication parameter(s)")
    if cx.rank != 4:
        raise cx.fail("depth > 1 is not supported for MatMult")
    a, b = cx.inputs(2)
    return LayerSpec("matmul", (a, b), {}, "matmul")


UNIT_READERS: Mapping[str, Callable[[UnitContext], LayerSpec]] = MappingProxyType(
    {
        "Conv": conv,
        "Neuron": neuron,
        "GOC": goc,
        "ElementWise": elementwise,
        "ScaledElementWise": elementwise,
        "Concat": concat,
        "Reshape": reshape,
        "InputView": input_view,
        "Broadcast": broadcast,
        "Pooling": pooling,
        "Softmax": softmax,
        "Transpose": transpose,
        "MatrixMultiplication": matrix_multiplication,
    }
)
