"""`anekit inspect` of anekit bundles: the checked manifest, each segment's program, its tree."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited
from anekit.errors import FormatError


def is_bundle(path: Path, head: bytes) -> bool:
    return False  # bundles are directories: `detect` recognises them by their manifest


def _io(port: Any) -> dict[str, Any]:
    return {
        "value": port.value,
        "mil_name": port.mil_name,
        "dtype": port.dtype,
        "mil_dtype": port.mil_dtype,
        "shape": list(port.shape),
        "mil_shape": list(port.mil_shape),
        "padded": port.padded,
    }


def _report(data: bytes, path: Path) -> dict[str, Any] | None:
    """The compile report's summary and estimate (its verified bytes)."""
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FormatError(f"report.json is not valid JSON ({exc})", where=str(path)) from None
    if not isinstance(report, dict):
        raise FormatError("report.json is not a JSON object", where=str(path))
    estimate = report.get("estimate") if isinstance(report.get("estimate"), dict) else {}
    return {
        "summary": report.get("summary"),
        "estimate": {k: estimate.get(k) for k in ("total_ms", "bottleneck") if k in estimate},
    }


def describe_bundle(path: Path) -> dict[str, Any]:
    from anekit.formats import mil
    from anekit.formats.bundle import REPORT, read_bundle

    bundle = read_bundle(path)  # schema, paths, sizes and sha256 of every file
    m = bundle.manifest
    segments = []
    for seg in m.segments:
        program = mil.parse_bytes(bundle.read(seg.program), f"{path}/{seg.program}")
        function = program.function(seg.function)
        segments.append(
            {
                "index": seg.index,
                "device": seg.device,
                "program": seg.program,
                "program_version": program.version,
                "opset": function.opset,
                "weights": seg.weights,
                "weight_bytes": len(bundle.read(seg.weights)) if seg.weights else 0,
                "nodes": seg.nodes,
                "operations": len(function.operations),
                "ops": dict(collections.Counter(op.op for op in function.operations).most_common()),
                "inputs": [_io(p) for p in seg.inputs],
                "outputs": [_io(p) for p in seg.outputs],
                "input_alloc_bytes": seg.input_alloc_bytes,
                "output_alloc_bytes": seg.output_alloc_bytes,
            }
        )
    return {
        "kind": "anekit bundle",
        "model": m.model,
        "generator": m.generator,
        "schema_version": m.to_json()["schema_version"],
        "target": m.to_json()["target"],
        "inputs": [p.to_json() for p in m.inputs],
        "outputs": [p.to_json() for p in m.outputs],
        "segments": segments,
        "files": {rel: {"size": f.size, "sha256": f.sha256} for rel, f in sorted(m.files.items())},
        "report": _report(bundle.read(REPORT), path / REPORT) if REPORT in m.files else None,
    }


def _shape(shape: list[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def render_bundle(doc: dict[str, Any]) -> Node:
    t = doc["target"]
    root = Node(
        f"anekit bundle of '{doc['model']}' for {t['name']} ({t['engine']}, "
        f"program({t['program_version']}) {t['opset']}), {len(doc['segments'])} segment(s)"
    )
    report = doc.get("report") or {}
    if report.get("summary"):
        s = report["summary"]
        line = (
            f"{s.get('nodes')} nodes -> {s.get('engine_layers')} engine layers, "
            f"{s.get('ane_segments')} ANE / {s.get('cpu_segments')} CPU segment(s), "
            f"{s.get('dispatches')} dispatch(es)"
        )
        if report.get("estimate", {}).get("total_ms") is not None:
            e = report["estimate"]
            line += f"; estimated {e['total_ms']:.3f} ms ({e.get('bottleneck')}-bound)"
        root.add(line)
    ports = root.add("inputs")
    for p in doc["inputs"]:
        ports.add(f"{p['name']}: {p['dtype']}[{_shape(p['shape'])}]")
    ports = root.add("outputs")
    for p in doc["outputs"]:
        src = p.get("source") or {}
        ports.add(
            f"{p['name']}: {p['dtype']}[{_shape(p['shape'])}] from segment {src.get('segment')}"
        )
    for seg in doc["segments"]:
        node = root.add(
            f"segment {seg['index']} on {seg['device']}: {seg['program']} "
            f"({seg['operations']} MIL ops, {seg['weight_bytes']} weight bytes)"
        )
        for kind in ("inputs", "outputs"):
            sub = node.add(kind)
            for p in seg[kind]:
                pad = f" padded to {_shape(p['mil_shape'])}" if p["padded"] else ""
                sub.add(f"{p['mil_name']}: {p['mil_dtype']}[{_shape(p['shape'])}]{pad}")
        ops = node.add("ops")
        add_limited(ops, list(seg["ops"].items()), lambda kv: f"{kv[0]} x{kv[1]}")
    files = root.add("files (sha256 verified)")
    add_limited(files, list(doc["files"].items()), lambda kv: f"{kv[0]}: {kv[1]['size']} bytes")
    return root


KIND = Kind("anekit bundle", is_bundle, describe_bundle, render_bundle, (".anekit",))
