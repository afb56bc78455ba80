"""The netplist readers under fuzz: the XML plists (byte and value mutations), their weight files."""

from __future__ import annotations

import json
import random
from typing import Any

from anekit.errors import FormatError
from format_fuzzer import FIXTURES
from format_fuzzer.engine import Field, FuzzTarget, Prepared

# ---- the netplist targets: the XML plists, and the weight files they read ------------------

NETPLIST_DIR = FIXTURES / "netplist"
RUN_LIMIT = 1 << 20  # run a decoded graph on zeros when all its values hold fewer elements


def _netplist_weight_files() -> dict[str, bytes]:
    """Every weight file the fixtures name by a relative path, keyed by that name."""
    files = {}
    for path in sorted(NETPLIST_DIR.glob("*.weights")):
        files[path.name] = files[f"../{path.name}"] = path.read_bytes()
    return files


def _netplist_plists() -> list[tuple[str, bytes]]:
    return [
        (str(path.relative_to(NETPLIST_DIR).with_suffix("")), path.read_bytes())
        for path in sorted(NETPLIST_DIR.glob("**/*.plist"))
    ]


def _netplist_use(data: bytes, files: dict[str, bytes]) -> Any:
    """What `anekit inspect` and `anekit run` do with a netplist: describe, read, run."""
    import numpy as np

    from anekit.formats import netplist
    from anekit.formats.netplist.describe import describe_bytes

    json.dumps(describe_bytes(data, files=files))
    graph = netplist.parse(data, files=files)
    if sum(v.numel for v in graph.values.values()) <= RUN_LIMIT:
        graph.run({v.name: np.zeros(v.shape, v.dtype.numpy) for v in graph.inputs})
    return graph


def _xml_fields(data: bytes) -> list[Field]:
    """The digits of every <integer> (bit flips there change sizes, offsets and indices)."""
    import re

    return [
        Field(m.start(1), min(8, m.end(1) - m.start(1)), "integer")
        for m in re.finditer(rb"<integer>(-?\d+)</integer>", data)
    ]


def _xml_boundaries(data: bytes) -> list[int]:
    import re

    return sorted(
        {0, len(data) - 1} | {m.start() for m in re.finditer(rb"<(?:key|dict|array)>", data)}
    )


PLIST_INTS = (-1, 0, 1, 2, 3, 7, 64, 0xFFFF, 1 << 16, 1 << 24, (1 << 31) - 1, 1 << 31)
PLIST_INTS += (1 << 32, 1 << 48, (1 << 63) - 1, -(1 << 63))
PLIST_STRINGS = ("", "Depth", "Channel", "Width", "Float32", "UInt8", "Int8", "Bogus")
PLIST_STRINGS += ("/etc/passwd", "../../x.weights", "Units", "image", "probs@output")


def _plist_slots(value: Any, slots: list[tuple[Any, Any]]) -> None:
    """Every (container, key or index) in a plist tree, depth first."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        slots.append((value, key))
        if isinstance(item, dict | list):
            _plist_slots(item, slots)


def mutate_plist_value(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """Change one value of the parsed plist (extreme number, other name, other type, gone)."""
    import plistlib

    doc = plistlib.loads(fixture.data)
    slots: list[tuple[Any, Any]] = []
    _plist_slots(doc, slots)
    container, key = rng.choice(slots)
    old = container[key]
    action = rng.choice(["extreme", "string", "retype", "delete", "duplicate"])
    if action == "extreme":
        container[key] = rng.choice(PLIST_INTS)
    elif action == "string":
        names = [k for _, k in slots if isinstance(k, str)]
        container[key] = rng.choice([*PLIST_STRINGS, *names])
    elif action == "retype":
        container[key] = rng.choice([str(old), [old], {"x": old}, True, 1.5, b"\0", 0])
    elif action == "delete":
        del container[key]
    elif isinstance(container, list):
        container.insert(key, old)
    else:
        container[rng.choice([k for k in container if k != key] or [key])] = old
    data = plistlib.dumps(doc, sort_keys=False)
    return data, f"plist {action} {key!r} (was {str(old)[:40]!r})"


def netplist_target() -> FuzzTarget:
    files = _netplist_weight_files()
    return FuzzTarget(
        "netplist",
        _netplist_plists,
        lambda data: _netplist_use(data, files),
        _xml_fields,
        _xml_boundaries,
        # listed twice: value-level changes are the ones that reach the unit readers' checks
        {"plist_value": mutate_plist_value, "plist_value_b": mutate_plist_value},
    )


def _weight_users() -> list[Any]:
    """The parsed networks of every fixture that reads weights it finds beside it on disk."""
    from anekit.formats import netplist
    from anekit.formats.netplist.reader import build_graph
    from anekit.formats.netplist.weights import WeightFiles

    users = []
    for path in sorted(NETPLIST_DIR.glob("**/*.plist")):
        for net in netplist.parse_document(path.read_bytes(), str(path)).networks:
            source = WeightFiles(net.weights, path.parent)
            try:
                build_graph(net, source, str(path))
            except FormatError:
                continue
            if source.refs:
                users.append((net, source.refs))
    return users


def _weights_decode(users: list[Any], blob: bytes) -> int:
    """Every weight-reading fixture network, with all its weight files replaced by `blob`.

    Each must read (and run) or raise FormatError; the case counts as rejected
    (FormatError) only when every network rejects the bytes.
    """
    import numpy as np

    from anekit.formats.netplist.reader import build_graph
    from anekit.formats.netplist.weights import WeightFiles

    read = 0
    last: FormatError | None = None
    for net, _ in users:
        source = WeightFiles(net.weights, None, dict.fromkeys(net.weights, blob))
        try:
            graph = build_graph(net, source, "fuzz")
        except FormatError as exc:
            last = exc
            continue
        graph.run({v.name: np.zeros(v.shape, v.dtype.numpy) for v in graph.inputs})
        read += 1
    if not read and last is not None:
        raise last
    return read


def _weights_boundaries(users: list[Any], name: str, blob: bytes) -> list[int]:
    """Where units start and stop reading this file (truncation there is interesting)."""
    points = {0, len(blob) - 1}
    for net, refs in users:
        for ref in refs:
            if net.weights[ref.index].removeprefix("../") == name:
                points.update((ref.offset, ref.offset + ref.nbytes - 1, ref.offset + ref.nbytes))
    return sorted(p for p in points if 0 <= p < len(blob))


def netplist_weights_target() -> FuzzTarget:
    users = _weight_users()
    fixtures = [(p.name, p.read_bytes()) for p in sorted(NETPLIST_DIR.glob("*.weights"))]
    by_bytes = {data: name for name, data in fixtures}
    return FuzzTarget(
        "netplist.weights",
        lambda: fixtures,
        lambda blob: _weights_decode(users, blob),
        lambda blob: [],
        lambda blob: _weights_boundaries(users, by_bytes.get(blob, ""), blob),
    )
