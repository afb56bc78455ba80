"""`anekit inspect` of .hwx containers: detection by Mach-O magic and the text tree of the decoding."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited
from anekit.cli.inspect_kinds.base import hex_or_dash as _hex

HWX_MAGIC = b"\xce\xfa\xef\xbe"


def is_hwx(path: Path, head: bytes) -> bool:
    return head[:4] == HWX_MAGIC


def describe_hwx(path: Path) -> dict[str, Any]:
    from anekit.formats import hwx

    doc = hwx.read(path).as_dict()
    doc["register_map"] = _register_map(doc["generation"])
    return doc


def _register_map(generation: str | None) -> dict[str, Any] | None:
    """Where the generation's register names come from, and the chip its engine code names."""
    from anekit import targets
    from anekit.formats.hwx.registers import KNOWN_GENERATIONS, generation_layout
    from anekit.formats.hwx.stream_maps import STREAM_GENERATIONS, stream_map

    if generation in KNOWN_GENERATIONS:
        source = generation_layout(generation).source
        names: dict[int, str] = {}
    elif generation in STREAM_GENERATIONS:
        layout = stream_map(generation)
        source = layout.source
        names = {address: register.name for address, register in layout.registers.items()}
    else:
        return None
    chip = targets.aliases().get(generation)  # the chip database owns engine codes
    return {
        "generation": generation,
        "chip": chip.name if chip is not None else None,
        "source": source,
        "register_names": {f"0x{address:05x}": name for address, name in names.items()},
    }


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
    regmap = doc.get("register_map")
    if regmap and regmap["chip"]:
        generation += f" ({regmap['chip']})"
    root = Node(f".hwx container, {doc['size']} bytes, {generation} (cpusubtype {h['cpusubtype']})")
    if regmap:
        root.add(f"register map: {regmap['source']}")
    root.add(
        f"header: magic {_hex(h['magic'])} · cputype {_hex(h['cputype'])} · filetype {h['filetype']} · "
        f"{h['ncmds']} load commands ({h['sizeofcmds']} bytes) · flags {_hex(h['flags'])}"
    )
    _add_build(root, doc["build"])
    _add_segments(root, doc)
    _add_tensors_and_weights(root, doc)
    names = regmap["register_names"] if regmap else {}
    _add_task_descriptors(root, doc["task_descriptors"], names)
    relocations = doc["relocations"]
    node = root.add(f"relocations ({len(relocations)})")
    add_limited(
        node,
        relocations,
        lambda r: (
            f"{r['section']}+{_hex(r['address'])} → {r['target'] or 'absolute'} {_hex(r['target_address'])}"
            + (f" ({_short(r['symbol'])})" if r["symbol"] else "")
            + (f" · descriptor {r['descriptor']} {r['register']}" if r["register"] else "")
        ),
    )
    if doc["notes"]:
        add_limited(root.add("notes"), doc["notes"], str)
    return root


def _add_build(root: Node, build: dict[str, Any]) -> None:
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
    add_limited(node.add(f"flags ({len(build['flags'])})"), build["flags"], str)


def _add_segments(root: Node, doc: dict[str, Any]) -> None:
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
        add_limited(
            root.add(f"unknown load commands ({len(unknown)})"),
            unknown,
            lambda c: f"cmd {_hex(c['cmd'])} at {_hex(c['offset'])}, {c['size']} bytes",
        )


def _add_tensors_and_weights(root: Node, doc: dict[str, Any]) -> None:
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


def _add_task_descriptors(
    root: Node, descriptors: list[dict[str, Any]], register_names: dict[str, str]
) -> None:
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
                add_limited(
                    fields.add(group),
                    list(registers.items()),
                    lambda item: f"{item[0]}: " + " ".join(item[1]),
                )
        if td.get("inferred_fields"):
            add_limited(
                child.add(f"inferred fields ({len(td['inferred_fields'])}, named by anekit)"),
                list(td["inferred_fields"].items()),
                lambda item: f"{item[0]}={item[1]}",
            )
        if td.get("unknown_bits"):
            add_limited(
                child.add(f"unknown bits ({len(td['unknown_bits'])} registers, shown raw)"),
                list(td["unknown_bits"].items()),
                lambda item: (
                    f"register {item[0]}"
                    + (f" {register_names[item[0]]}" if item[0] in register_names else "")
                    + f": bits {item[1]:#010x} (unknown)"
                ),
            )


KIND = Kind("hwx", is_hwx, describe_hwx, render_hwx, (".hwx",))
