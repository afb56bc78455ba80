"""The netplist document: plist bytes -> checked, frozen networks, ports and units (no semantics yet)."""

from __future__ import annotations

import plistlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.errors import FormatError
from anekit.formats.netplist.vocab import (
    DATA_TYPES,
    INPUT_LAYOUT_KEYS,
    INPUT_SHAPE_KEYS,
    MAX_DIM,
    MAX_ELEMENTS,
    NETWORK_KEYS,
    OUTPUT_LAYOUT_KEYS,
    UNIT_KEYS,
)

_REQUIRED: Any = object()


@dataclass(frozen=True)
class Dims:
    """A port's shape five-tuple (BatchSize, InputChannels, InputDepth, InputHeight, InputWidth)."""

    batch: int
    channels: int
    depth: int
    height: int
    width: int

    def ir_shape(self, rank: int) -> tuple[int, ...]:
        if rank == 5:
            return (self.batch, self.channels, self.depth, self.height, self.width)
        return (self.batch, self.channels, self.height, self.width)


@dataclass(frozen=True)
class InputPort:
    name: str
    dims: Dims
    type: str  # a DATA_TYPES name
    layout: Mapping[str, int]  # InputInterleave and the byte strides, as written


@dataclass(frozen=True)
class OutputPort:
    name: str
    bottom: str
    type: str | None
    layout: Mapping[str, int]


@dataclass(frozen=True)
class Unit:
    """One layer: its key, Type, Bottom names and raw (frozen) Params."""

    name: str
    type: str
    bottoms: tuple[str, ...]
    params: Mapping[str, Any]
    output_channels: int | None
    output_type: str | None
    label: str  # UnescapedName when given (the name the IR value gets), else the key


@dataclass(frozen=True)
class Network:
    name: str
    inputs: tuple[InputPort, ...]
    outputs: tuple[OutputPort, ...]
    units: tuple[Unit, ...]  # in execution order (OperationList, else Units)
    weights: tuple[str, ...]  # weight file names exactly as written
    ignored: tuple[str, ...]  # dictionary entries nothing refers to


@dataclass(frozen=True)
class Netplist:
    version: str
    networks: tuple[Network, ...]
    procedures: tuple[Any, ...]

    def network(self, name: str | None, where: str) -> Network:
        if name is None:
            if len(self.networks) == 1:
                return self.networks[0]
            raise FormatError(
                f"the netplist has {len(self.networks)} networks "
                f"({', '.join(n.name for n in self.networks)}); choose one",
                where=where,
                hint="pass network=NAME",
            )
        for network in self.networks:
            if network.name == name:
                return network
        raise FormatError(f"the netplist has no network '{name}'", where=where)


# ---- typed access to plist values ------------------------------------------------------------


def freeze(value: Any) -> Any:
    """Plist values as immutable ones: dicts -> read-only mappings, lists -> tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, Mapping):
        return "a dictionary"
    if isinstance(value, list | tuple):
        return "an array"
    return {str: "a string", float: "a real", bytes: "data"}.get(type(value), type(value).__name__)


class Fields:
    """Checked reads from one plist dictionary; errors say where the key is."""

    def __init__(self, table: Any, where: str, what: str):
        if not isinstance(table, Mapping):
            raise FormatError(f"{what} must be a dictionary, not {_kind(table)}", where=where)
        self.table = table
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, key: str) -> bool:
        return key in self.table

    def fail(self, key: str, message: str, hint: str | None = None) -> FormatError:
        return FormatError(message, where=self.at(key), hint=hint)

    def int(self, key: str, default: Any = _REQUIRED, *, low: int = 0, high: int = MAX_DIM) -> Any:
        value = self.table.get(key, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise self.fail(key, "is missing (an integer is expected)")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer, not {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(key, f"is {value}; expected an integer in [{low}, {high}]")
        return value

    def str(self, key: str, default: Any = _REQUIRED, *, choices: Iterable[str] = ()) -> Any:
        value = self.table.get(key, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise self.fail(key, "is missing (a string is expected)")
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, not {_kind(value)}")
        allowed = tuple(choices)
        if allowed and value not in allowed:
            raise self.fail(key, f"is '{value}'; expected one of {', '.join(allowed)}")
        return value

    def names(self, key: str, default: Any = _REQUIRED) -> Any:
        """A string or an array of strings (Bottom takes both forms)."""
        value = self.table.get(key, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise self.fail(key, "is missing (a name or an array of names is expected)")
            return default
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(v, str) and v for v in items):
            raise self.fail(key, f"must be a name or an array of names, not {_kind(value)}")
        return tuple(items)

    def ints(self, key: str, default: Any = _REQUIRED, *, sizes: Iterable[int] = (2,)) -> Any:
        value = self.table.get(key, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise self.fail(key, "is missing (an array of integers is expected)")
            return default
        allowed = tuple(sizes)
        if (
            not isinstance(value, list | tuple)
            or len(value) not in allowed
            or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
        ):
            raise self.fail(key, f"must be an array of {' or '.join(map(str, allowed))} integers")
        if any(not 1 <= v <= MAX_DIM for v in value):
            raise self.fail(key, f"is {list(value)}; every entry must be in [1, {MAX_DIM}]")
        return tuple(value)

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.table.get(key, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise self.fail(key, "is missing (a boolean is expected)")
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be a boolean, not {_kind(value)}")
        return value

    def half(self, key: str, default: Any = _REQUIRED) -> Any:
        """A float16 given as its 16-bit pattern (Scale 15360 is 1.0, as in the fixtures)."""
        if key not in self.table and default is not _REQUIRED:
            return default
        bits = self.int(key, low=0, high=0xFFFF)
        return float(np.array(bits, dtype=np.uint16).view(np.float16))

    def table_of(self, key: str) -> Fields | None:
        if key not in self.table:
            return None
        return Fields(self.table[key], self.at(key), key)

    def dtype(self, key: str, default: Any = _REQUIRED) -> Any:
        return self.str(key, default, choices=DATA_TYPES)

    def only(self, known: Iterable[str], what: str) -> None:
        """Refuse keys we do not understand rather than silently misread the layer."""
        unknown = sorted(str(k) for k in self.table if k not in set(known))
        if unknown:
            raise FormatError(
                f"unsupported {what} {', '.join(repr(k) for k in unknown)}",
                where=self.where,
                hint=f"anekit reads {', '.join(sorted(known)) or 'no keys'} here",
            )


# ---- the document --------------------------------------------------------------------------


def load_plist(data: bytes, where: str) -> Mapping[str, Any]:
    try:
        top = plistlib.loads(data)
    except Exception as exc:  # noqa: BLE001 - expat and plistlib raise an open-ended set
        line = getattr(exc, "lineno", None)
        column = getattr(exc, "offset", None) if line is not None else None
        raise FormatError(
            f"not a readable property list: {type(exc).__name__}: {exc}",
            where=where,
            line=line,
            column=column,
        ) from None
    if not isinstance(top, dict):
        raise FormatError(f"the top level must be a dictionary, not {_kind(top)}", where=where)
    return top


def parse_document(data: bytes, where: str) -> Netplist:
    top = load_plist(data, where)
    fields = Fields(top, where, "the netplist")
    version = fields.str("Version")
    if not version.startswith("1."):
        raise fields.fail("Version", f"is '{version}'; anekit reads netplist versions 1.x")
    names = fields.names("Networks")
    if len(set(names)) != len(names):
        raise fields.fail("Networks", "names a network twice")
    procedures = top.get("ProcedureList", [])
    if not isinstance(procedures, list):
        raise fields.fail("ProcedureList", f"must be an array, not {_kind(procedures)}")
    networks = tuple(_network(name, fields) for name in names)
    return Netplist(version, networks, tuple(freeze(p) for p in procedures))


def _port_list(net: Fields, old: str, new: str) -> tuple[str, ...]:
    """Inputs (1.0.9) or InputList (1.0.10); both present must agree."""
    lists = [net.names(k) for k in (old, new) if net.has(k)]
    if not lists:
        raise net.fail(old, f"is missing (neither {old} nor {new} is given)")
    if len(lists) == 2 and lists[0] != lists[1]:
        raise net.fail(new, f"disagrees with {old}")
    if len(set(lists[0])) != len(lists[0]):
        raise net.fail(old, "names a port twice")
    return lists[0]


def _network(name: str, top: Fields) -> Network:
    if name in ("Networks", "Version", "ProcedureList"):
        raise top.fail("Networks", f"names a network '{name}', which is a reserved key")
    net = top.table_of(name)
    if net is None:
        raise top.fail(name, f"is missing: network '{name}' is listed in Networks")
    inputs = _port_list(net, "Inputs", "InputList")
    outputs = _port_list(net, "Outputs", "OutputList")
    unit_names = net.names("Units", ())
    order = net.names("OperationList", unit_names)
    if sorted(order) != sorted(unit_names) or len(set(order)) != len(order):
        raise net.fail("OperationList", "must list every unit of Units exactly once")
    weights = net.names("Weights", ())
    taken: dict[str, str] = {}
    for kind, group in (("input", inputs), ("output", outputs), ("unit", unit_names)):
        for entry in group:
            if entry in NETWORK_KEYS:
                raise net.fail(entry, f"an {kind} may not be named after a network key")
            if entry in taken:
                raise net.fail(entry, f"names both an {taken[entry]} and an {kind}")
            taken[entry] = kind
    ports_in = tuple(_input_port(net, n) for n in inputs)
    ports_out = tuple(_output_port(net, n) for n in outputs)
    units = tuple(_unit(net, n) for n in order)
    ignored = tuple(sorted(str(k) for k in net.table if k not in taken and k not in NETWORK_KEYS))
    return Network(name, ports_in, ports_out, units, weights, ignored)


def _input_port(net: Fields, name: str) -> InputPort:
    port = net.table_of(name)
    if port is None:
        raise net.fail(name, f"is missing: input '{name}' has no dictionary")
    port.only({*INPUT_SHAPE_KEYS, *INPUT_LAYOUT_KEYS, "InputType"}, "input key(s)")
    sizes = {
        field: port.int(key, 1 if field in ("batch", "depth") else _REQUIRED, low=1)
        for key, field in INPUT_SHAPE_KEYS.items()
    }
    dims = Dims(**sizes)
    total = dims.batch * dims.channels * dims.depth * dims.height * dims.width
    if total > MAX_ELEMENTS:
        raise FormatError(f"input '{name}' has {total} elements, too many", where=port.where)
    layout = {k: port.int(k, low=0, high=1 << 40) for k in INPUT_LAYOUT_KEYS if port.has(k)}
    return InputPort(name, dims, port.dtype("InputType", "Float16"), MappingProxyType(layout))


def _output_port(net: Fields, name: str) -> OutputPort:
    port = net.table_of(name)
    if port is None:
        raise net.fail(name, f"is missing: output '{name}' has no dictionary")
    port.only({"Bottom", "OutputType", *OUTPUT_LAYOUT_KEYS}, "output key(s)")
    (bottom,) = _single(port, "Bottom")
    layout = {k: port.int(k, low=0, high=1 << 40) for k in OUTPUT_LAYOUT_KEYS if port.has(k)}
    return OutputPort(name, bottom, port.dtype("OutputType", None), MappingProxyType(layout))


def _single(port: Fields, key: str) -> tuple[str]:
    names = port.names(key)
    if len(names) != 1:
        raise port.fail(key, f"must name one tensor, not {len(names)}")
    return (names[0],)


def _unit(net: Fields, name: str) -> Unit:
    unit = net.table_of(name)
    if unit is None:
        raise net.fail(name, f"is missing: unit '{name}' is listed in Units")
    unit.only(UNIT_KEYS, "unit key(s)")
    declared = unit.str("Name", name)
    if declared != name:
        raise unit.fail("Name", f"is '{declared}' but the unit is listed as '{name}'")
    params = unit.table.get("Params", {})
    if not isinstance(params, dict):
        raise unit.fail("Params", f"must be a dictionary, not {_kind(params)}")
    bottoms = unit.names("Bottom")
    if unit.has("UnescapedBottom") and len(unit.names("UnescapedBottom")) != len(bottoms):
        raise unit.fail("UnescapedBottom", "must name as many tensors as Bottom")
    return Unit(
        name=name,
        type=unit.str("Type"),
        bottoms=bottoms,
        params=freeze(params),
        output_channels=unit.int("OutputChannels", None, low=1),
        output_type=unit.dtype("OutputType", None),
        label=unit.str("UnescapedName", name),
    )
