"""A netplist as plain JSON data (what `anekit inspect --json` prints), weight files and all.

Describing never fails on absent weights: units are read with zeros in their place and
the problems are listed, so a netplist whose weight files stayed on another machine can
still be inspected.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anekit.errors import FormatError
from anekit.formats.netplist.document import Network, parse_document
from anekit.formats.netplist.reader import GraphBuilder, read_file_bytes
from anekit.formats.netplist.vocab import ASSUMED, ATTESTED
from anekit.formats.netplist.weights import WeightFiles
from anekit.ir.engine import LayerView


def plain(value: Any) -> Any:
    """Plist values as JSON values (data as hex, dates as ISO 8601)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return {"data": value.hex()}
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _certainty(unit_type: str) -> str:
    """Whether the unit type's parameters are seen in Apple's files or our assumption."""
    if unit_type in ATTESTED:
        return "attested"
    return "assumed" if unit_type in ASSUMED else "unknown"


def _network(net: Network, directory: Path | None, files: Mapping[str, bytes], where: str) -> dict:
    source = WeightFiles(net.weights, directory, dict(files), strict=False, where=where)
    builder = GraphBuilder(net, source, where)
    error = None
    built = 0
    for unit in net.units:
        try:
            builder.add_unit(unit)
        except FormatError as exc:
            error = str(exc)
            break
        built += 1
    graph = None
    if error is None:
        try:
            graph = builder.finish()
        except FormatError as exc:
            error = str(exc)
    values = builder.editor.values
    units = []
    for i, unit in enumerate(net.units):
        entry: dict[str, Any] = {
            "name": unit.name,
            "type": unit.type,
            "certainty": _certainty(unit.type),
            "bottoms": list(unit.bottoms),
            "output_channels": unit.output_channels,
            "output_type": unit.output_type,
            "params": plain(unit.params),
            "weights": [
                {
                    "role": r.role,
                    "index": r.index,
                    "file": net.weights[r.index] if 0 <= r.index < len(net.weights) else None,
                    "offset": r.offset,
                    "dtype": str(r.dtype),
                    "count": r.count,
                    "bytes": r.nbytes,
                }
                for r in source.refs
                if r.unit == unit.name
            ],
            "layer": None,
            "shape": None,
            "dtype": None,
        }
        if i < built:
            node = builder.editor.producer(unit.label)
            entry["layer"] = LayerView(node).describe()
            entry["shape"] = list(values[unit.label].shape)
            entry["dtype"] = str(values[unit.label].dtype)
        units.append(entry)
    statuses = [source.status(i) for i in range(len(net.weights))]
    return {
        "name": net.name,
        "rank": builder.rank,
        "layout": "NCDHW" if builder.rank == 5 else "NCHW",
        "inputs": [
            {
                "name": p.name,
                "shape": {
                    "batch": p.dims.batch,
                    "channels": p.dims.channels,
                    "depth": p.dims.depth,
                    "height": p.dims.height,
                    "width": p.dims.width,
                },
                "type": p.type,
                "layout": dict(p.layout),
            }
            for p in net.inputs
        ],
        "outputs": [
            {"name": p.name, "bottom": p.bottom, "type": p.type, "layout": dict(p.layout)}
            for p in net.outputs
        ],
        "weights": [
            {"index": i, "name": s.name, "path": s.path, "size": s.size, "problem": s.problem}
            for i, s in enumerate(statuses)
        ],
        "units": units,
        "ignored_keys": list(net.ignored),
        "graph": {
            "runs": error is None and not source.problems,
            "error": error,
            "weight_problems": list(source.problems),
            "inputs": [
                {"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)}
                for v in graph.inputs
            ]
            if graph
            else [],
            "outputs": [
                {"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)}
                for v in graph.outputs
            ]
            if graph
            else [],
        },
    }


def describe_bytes(
    data: bytes,
    *,
    directory: str | Path | None = None,
    files: Mapping[str, bytes] | None = None,
    where: str = "netplist",
) -> dict[str, Any]:
    doc = parse_document(data, where)
    folder = Path(directory) if directory is not None else None
    return {
        "kind": "netplist",
        "size": len(data),
        "version": doc.version,
        "networks": [_network(n, folder, files or {}, where) for n in doc.networks],
        "procedures": plain(doc.procedures),
    }


def describe(path: str | Path) -> dict[str, Any]:
    """The JSON description of the netplist at `path` (weights resolved beside it)."""
    path = Path(path)
    data = read_file_bytes(path)
    return describe_bytes(data, directory=path.parent, where=str(path))
