"""`anekit inspect FILE [--json]`: detect what a file is and print its decoded contents as a tree."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anekit.errors import AnekitError, FormatError

HEAD_BYTES = 4096
LIST_LIMIT = 24  # longest list printed in the text tree; --json always has everything
HWX_MAGIC = b"\xce\xfa\xef\xbe"


@dataclass
class Node:
    """One line of the text tree and its children."""

    label: str
    children: list[Node] = field(default_factory=list)

    def add(self, label: str) -> Node:
        child = Node(label)
        self.children.append(child)
        return child


@dataclass(frozen=True)
class Kind:
    """One inspectable kind of file: how to recognise it, decode it, and draw it.

    `describe` is None while anekit has no reader for the kind: the kind is still named.
    """

    name: str
    detect: Callable[[Path, bytes], bool]
    describe: Callable[[Path], dict[str, Any]] | None
    render: Callable[[dict[str, Any]], Node] | None
    by_extension: tuple[str, ...] = ()


# ---- detection ---------------------------------------------------------------------------


def _is_hwx(path: Path, head: bytes) -> bool:
    return head[:4] == HWX_MAGIC


def _is_weight_bin(path: Path, head: bytes) -> bool:
    # blob storage v2: u32 count, u32 version 2, 56 zero bytes, then a 0xDEADBEEF record
    if len(head) < 64 or head[4:8] != b"\x02\x00\x00\x00" or any(head[8:64]):
        return False
    return head[:4] == b"\0\0\0\0" or head[64:68] == b"\xef\xbe\xad\xde"


def _is_plist(path: Path, head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return (
        head.startswith(b"bplist00")
        or (text.startswith(b"<?xml") and b"<plist" in head)
        or text.startswith(b"<plist")
    )


def _is_mil(path: Path, head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"program(")


def _is_onnx(path: Path, head: bytes) -> bool:
    # ModelProto starts with ir_version (field 1, varint), then a string or opset_import field.
    return (
        len(head) > 3
        and head[0] == 0x08
        and 1 <= head[1] <= 20
        and head[2] in (0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42)
    )


def _never(path: Path, head: bytes) -> bool:
    return False


# ---- describers --------------------------------------------------------------------------


def describe_hwx(path: Path) -> dict[str, Any]:
    from anekit.formats import hwx

    return hwx.read(path).as_dict()


def describe_weight_bin(path: Path) -> dict[str, Any]:
    from anekit.formats.blob import BlobReader

    with BlobReader(path) as reader:
        records = reader.records()
        return {
            "kind": "weight.bin",
            "size": reader.size,
            "count": len(records),
            "dtypes": dict(collections.Counter(r.dtype.name for r in records)),
            "data_bytes": sum(r.size for r in records),
            "blobs": [
                {
                    "offset": r.offset,
                    "dtype": r.dtype.name,
                    "data_offset": r.data_offset,
                    "size": r.size,
                    "count": r.count,
                }
                for r in records
            ],
        }


def describe_mil(path: Path) -> dict[str, Any]:
    from anekit.formats import mil

    program = mil.parse_file(path)
    functions = []
    for function in program.functions:
        blobs = [
            {"path": value.path, "offset": value.offset, "type": str(value.type)}
            for op in function.operations
            for _, value in op.attributes
            if isinstance(value, mil.BlobFile)
        ]
        functions.append(
            {
                "name": function.name,
                "opset": function.opset,
                "inputs": [{"name": b.name, "type": str(b.type)} for b in function.inputs],
                "outputs": list(function.outputs),
                "operations": len(function.operations),
                "ops": dict(collections.Counter(op.op for op in function.operations).most_common()),
                "blobs": blobs,
            }
        )
    return {
        "kind": "mil",
        "version": program.version,
        "build_info": dict(program.build_info),
        "functions": functions,
    }


def describe_onnx(path: Path) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several unrelated types
        raise FormatError(
            f"not a readable ONNX model: {type(exc).__name__}: {exc}", where=str(path)
        ) from None

    def value_info(info: Any) -> dict[str, Any]:
        tensor = info.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
        dtype = (
            onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
            if tensor.elem_type
            else None
        )
        return {"name": info.name, "dtype": dtype, "shape": dims}

    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    parameters = 0
    for tensor in graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= dim
        parameters += count
    return {
        "kind": "onnx",
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip() or None,
        "opsets": {entry.domain or "ai.onnx": entry.version for entry in model.opset_import},
        "inputs": [value_info(i) for i in graph.input if i.name not in initializers],
        "outputs": [value_info(o) for o in graph.output],
        "initializers": len(initializers),
        "parameters": parameters,
        "nodes": len(graph.node),
        "ops": dict(collections.Counter(node.op_type for node in graph.node).most_common()),
    }


def describe_netplist(path: Path) -> dict[str, Any]:
    from anekit.formats.netplist.describe import describe

    return describe(path)


# ---- renderers ---------------------------------------------------------------------------


def _hex(value: int | None) -> str:
    return "—" if value is None else f"0x{value:x}"


def _limited(parent: Node, items: list[Any], draw: Callable[[Any], str]) -> None:
    for item in items[:LIST_LIMIT]:
        parent.add(draw(item))
    if len(items) > LIST_LIMIT:
        parent.add(f"… and {len(items) - LIST_LIMIT} more (see --json)")


def _short(name: str) -> str:
    """`K<64 hex digits>_ne_3` -> `K7B0DFADD…C07F25FD_ne_3` (weights are named by their sha256)."""
    weight, sep, lane = name.partition("_ne_")
    if len(weight) > 20:
        weight = f"{weight[:9]}…{weight[-8:]}"
    return weight + sep + lane


def _prot(value: int) -> str:
    return "".join(letter if value & bit else "-" for letter, bit in (("r", 1), ("w", 2), ("x", 4)))


def render_hwx(doc: dict[str, Any]) -> Node:
    h = doc["header"]
    generation = doc["generation"].upper() if doc["generation"] else "unknown generation"
    root = Node(f".hwx container, {doc['size']} bytes, {generation} (cpusubtype {h['cpusubtype']})")
    root.add(
        f"header: magic {_hex(h['magic'])} · cputype {_hex(h['cputype'])} · filetype {h['filetype']} · "
        f"{h['ncmds']} load commands ({h['sizeofcmds']} bytes) · flags {_hex(h['flags'])}"
    )
    build = doc["build"]
    node = root.add(
        f"build: {build['compiler'] or '?'} {build['version'] or '?'} · target {build['target'] or '?'}"
    )
    if build["input"] or build["output"]:
        node.add(f"input {build['input']} · output {build['output']}")
    for module in build["modules"]:
        node.add(
            f"module {module['name']}: "
            + " · ".join(f"{k} {v}" for k, v in module["properties"].items() if v)
        )
    _limited(node.add(f"flags ({len(build['flags'])})"), build["flags"], str)

    node = root.add(f"segments ({len(doc['segments'])})")
    for seg in doc["segments"]:
        child = node.add(
            f"{seg['name']}: vm {_hex(seg['vmaddr'])}+{_hex(seg['vmsize'])} · file {_hex(seg['fileoff'])}+{_hex(seg['filesize'])} "
            f"· {_prot(seg['initprot'])}"
        )
        for sect in seg["sections"]:
            where = f"file {_hex(sect['offset'])}" if sect["has_file_data"] else "no file bytes"
            relocs = f" · {sect['nreloc']} relocations" if sect["nreloc"] else ""
            child.add(
                f"{sect['segment']},{sect['name']}: {_hex(sect['addr'])} size {_hex(sect['size'])} · {where}{relocs}"
            )
    unknown = [c for c in doc["load_commands"] if c["kind"] == "unknown"]
    if unknown:
        _limited(
            root.add(f"unknown load commands ({len(unknown)})"),
            unknown,
            lambda c: f"cmd {_hex(c['cmd'])} at {_hex(c['offset'])}, {c['size']} bytes",
        )

    node = root.add(f"tensors ({len(doc['tensors'])})")
    for t in doc["tensors"]:
        strides = ", ".join("—" if s is None else str(s) for s in t["strides"])
        node.add(
            f"{t['role']} {t['name']}: {t['dtype']} {t['shape']} (n, c, h, w) · byte strides [{strides}] · at {_hex(t['address'])}"
        )

    weights: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for tile in doc["weights"]:
        weights[tile["weight"]].append(tile)
    node = root.add(f"weights ({len(weights)}, {len(doc['weights'])} tiles)")
    for name, tiles in weights.items():
        live = [t for t in tiles if t["live"]]
        node.add(
            f"{_short(name)}: {len(live)} live tiles, {sum(t['size'] for t in tiles)} bytes in {tiles[0]['section']}"
        )

    descriptors = doc["task_descriptors"]
    node = root.add(f"task descriptors ({len(descriptors)})")
    for td in descriptors:
        child = node.add(
            f"#{td['index']} at {_hex(td['offset'])}, {_hex(td['size'])} bytes, next {_hex(td['next_offset'])}"
        )
        if td["note"]:
            child.add(f"note: {td['note']}")
        streams = child.add(f"streams ({len(td['streams'])})")
        for s in td["streams"]:
            streams.add(
                f"{s['name'] or 'unknown'}: header {s['header']:#010x} · {len(s['words'])} words from register {_hex(s['address'])}"
            )
        if td["fields"]:
            nonzero = {k: v for k, v in td["fields"].items() if v}
            fields = child.add(f"fields ({len(nonzero)} nonzero of {len(td['fields'])})")
            groups: dict[str, dict[str, list[str]]] = collections.defaultdict(
                lambda: collections.defaultdict(list)
            )
            for name, value in nonzero.items():
                group, register, leaf = name.split(".", 2)
                groups[group][register].append(f"{leaf}={value}")
            for group, registers in groups.items():
                _limited(
                    fields.add(group),
                    list(registers.items()),
                    lambda item: f"{item[0]}: " + " ".join(item[1]),
                )

    relocations = doc["relocations"]
    node = root.add(f"relocations ({len(relocations)})")
    _limited(
        node,
        relocations,
        lambda r: (
            f"{r['section']}+{_hex(r['address'])} → {r['target'] or 'absolute'} {_hex(r['target_address'])}"
            + (f" ({_short(r['symbol'])})" if r["symbol"] else "")
            + (f" · descriptor {r['descriptor']} {r['register']}" if r["register"] else "")
        ),
    )
    if doc["notes"]:
        _limited(root.add("notes"), doc["notes"], str)
    return root


def render_weight_bin(doc: dict[str, Any]) -> Node:
    dtypes = ", ".join(f"{n} {name}" for name, n in doc["dtypes"].items())
    root = Node(
        f"weight.bin (blob storage v2), {doc['size']} bytes, {doc['count']} blobs ({dtypes or 'none'})"
    )
    _limited(
        root,
        doc["blobs"],
        lambda b: (
            f"record {b['offset']}: {b['dtype']} × {b['count']} ({b['size']} bytes at {b['data_offset']})"
        ),
    )
    return root


def render_mil(doc: dict[str, Any]) -> Node:
    root = Node(f"MIL program {doc['version']}")
    if doc["build_info"]:
        root.add("buildInfo: " + " · ".join(f"{k} {v}" for k, v in doc["build_info"].items()))
    for f in doc["functions"]:
        node = root.add(
            f"func {f['name']}"
            + (f"<{f['opset']}>" if f["opset"] else "")
            + f": {f['operations']} operations"
        )
        _limited(node.add("inputs"), f["inputs"], lambda b: f"{b['name']}: {b['type']}")
        node.add("outputs: " + ", ".join(f["outputs"]))
        node.add("ops: " + ", ".join(f"{op} ×{n}" for op, n in f["ops"].items()))
        if f["blobs"]:
            _limited(
                node.add(f"weights ({len(f['blobs'])} BLOBFILE)"),
                f["blobs"],
                lambda b: f"{b['path']} @ {b['offset']}: {b['type']}",
            )
    return root


def render_onnx(doc: dict[str, Any]) -> Node:
    opsets = ", ".join(f"{d} {v}" for d, v in doc["opsets"].items())
    root = Node(
        f"ONNX model, IR version {doc['ir_version']}, opsets {opsets}"
        + (f", from {doc['producer']}" if doc["producer"] else "")
    )
    for role in ("inputs", "outputs"):
        _limited(root.add(role), doc[role], lambda v: f"{v['name']}: {v['dtype']} {v['shape']}")
    root.add(
        f"{doc['nodes']} nodes · {doc['initializers']} initializers · {doc['parameters']} parameters"
    )
    _limited(root.add("ops"), list(doc["ops"].items()), lambda item: f"{item[0]} ×{item[1]}")
    return root


def _params(params: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    return " · ".join(f"{k}={value(v)}" for k, v in params.items()) or "none"


def render_netplist(doc: dict[str, Any]) -> Node:
    root = Node(
        f"netplist {doc['version']}, {len(doc['networks'])} network(s), {doc['size']} bytes"
    )
    for net in doc["networks"]:
        node = root.add(f"network {net['name']} ({net['layout']})")
        inputs = node.add(f"inputs ({len(net['inputs'])})")
        for port in net["inputs"]:
            s = port["shape"]
            depth = f" D {s['depth']}" if net["rank"] == 5 else ""
            inputs.add(
                f"{port['name']}: {port['type']} [N {s['batch']} C {s['channels']}{depth} "
                f"H {s['height']} W {s['width']}]"
            )
        outputs = node.add(f"outputs ({len(net['outputs'])})")
        for port in net["outputs"]:
            outputs.add(f"{port['name']} ← {port['bottom']} ({port['type'] or 'as computed'})")
        files = node.add(f"weight files ({len(net['weights'])})")
        for w in net["weights"]:
            state = f"{w['size']} bytes" if w["problem"] is None else w["problem"]
            files.add(f"[{w['index']}] {w['name']}: {state}")
        units = node.add(f"units ({len(net['units'])})")
        for unit in net["units"]:
            shape = "x".join(map(str, unit["shape"])) if unit["shape"] else "?"
            child = units.add(
                f"{unit['name']}: {unit['type']} ← {', '.join(unit['bottoms'])}"
                + (f" → {unit['layer']} → {unit['dtype']}[{shape}]" if unit["layer"] else "")
                + ("" if unit["certainty"] == "attested" else f" ({unit['certainty']} parameters)")
            )
            child.add(f"params: {_params(unit['params'])}")
            for w in unit["weights"]:
                child.add(
                    f"{w['role']}: {w['count']} × {w['dtype']} ({w['bytes']} bytes) at offset "
                    f"{w['offset']} of [{w['index']}] {w['file']}"
                )
        graph = net["graph"]
        if graph["runs"]:
            node.add("reads into a graph that runs on the reference backend")
        else:
            problems = node.add("does not read into a runnable graph")
            _limited(
                problems,
                [graph["error"], *graph["weight_problems"]]
                if graph["error"]
                else graph["weight_problems"],
                str,
            )
        if net["ignored_keys"]:
            node.add("unused entries: " + ", ".join(net["ignored_keys"]))
    return root


# ---- dispatch ----------------------------------------------------------------------------

# Magic-byte detectors are tried first, in this order; then file extensions.
KINDS: tuple[Kind, ...] = (
    Kind("hwx", _is_hwx, describe_hwx, render_hwx, (".hwx",)),
    Kind("weight.bin", _is_weight_bin, describe_weight_bin, render_weight_bin, (".bin",)),
    Kind("netplist", _is_plist, describe_netplist, render_netplist, (".plist",)),
    Kind("MIL text", _is_mil, describe_mil, render_mil, (".mil",)),
    Kind("ONNX", _is_onnx, describe_onnx, render_onnx, (".onnx",)),
)
BUNDLE = Kind("anekit bundle", _never, None, None)
KNOWN = "a .hwx container, weight.bin, MIL text, a netplist, an anekit bundle or an ONNX model"


def detect(path: Path) -> Kind:
    """The kind of `path`, by magic bytes first, then by extension; AnekitError if unknown."""
    if path.is_dir():
        if (path / "manifest.json").is_file():
            return BUNDLE
        raise AnekitError(
            "is a directory but not an anekit bundle (it has no manifest.json)",
            where=str(path),
            hint=f"inspect takes {KNOWN}",
        )
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError as exc:
        raise AnekitError(f"cannot read the file: {exc.strerror or exc}", where=str(path)) from None
    if not head:
        raise FormatError("the file is empty", where=str(path))
    for kind in KINDS:
        if kind.detect(path, head):
            return kind
    suffix = path.suffix.lower()
    for kind in KINDS:
        if suffix in kind.by_extension:
            return kind
    raise AnekitError(
        "cannot tell what kind of file this is", where=str(path), hint=f"inspect takes {KNOWN}"
    )


def inspect_path(path: Path) -> tuple[Kind, dict[str, Any]]:
    kind = detect(path)
    if kind.describe is None:
        raise AnekitError(f"inspecting {kind.name} files is not supported yet", where=str(path))
    return kind, kind.describe(path)


def print_tree(title: str, root: Node) -> None:
    try:
        from rich.console import Console
        from rich.text import Text
        from rich.tree import Tree
    except ImportError:
        print(f"{title}: {root.label}")
        _print_plain(root.children, "  ")
        return

    def build(tree: Tree, node: Node) -> None:
        for child in node.children:
            build(tree.add(Text(child.label)), child)

    tree = Tree(Text(f"{title}: {root.label}", style="bold"))
    build(tree, root)
    console = Console(file=sys.stdout, highlight=False, width=max(120, Console().width))
    console.print(tree)


def _print_plain(nodes: list[Node], indent: str) -> None:
    for node in nodes:
        print(f"{indent}{node.label}")
        _print_plain(node.children, indent + "  ")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="show what is inside a .hwx, weight.bin, MIL, netplist, bundle or ONNX file",
        description=f"Detect the kind of FILE ({KNOWN}) and print its decoded contents.",
    )
    parser.add_argument("file", type=Path, help="the file (or bundle directory) to inspect")
    parser.add_argument(
        "--json", action="store_true", help="print the decoded contents as JSON on stdout"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.exists():
        raise AnekitError("no such file or directory", where=str(path))
    kind, doc = inspect_path(path)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif kind.render is not None:
        print_tree(path.name, kind.render(doc))
    return 0
