"""`anekit inspect` of weight.bin files (blob storage v2): detection, the record list, its tree."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited


def is_weight_bin(path: Path, head: bytes) -> bool:
    # blob storage v2: u32 count, u32 version 2, 56 zero bytes, then a 0xDEADBEEF record
    if len(head) < 64 or head[4:8] != b"\x02\x00\x00\x00" or any(head[8:64]):
        return False
    return head[:4] == b"\0\0\0\0" or head[64:68] == b"\xef\xbe\xad\xde"


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


def render_weight_bin(doc: dict[str, Any]) -> Node:
    dtypes = ", ".join(f"{n} {name}" for name, n in doc["dtypes"].items())
    root = Node(
        f"weight.bin (blob storage v2), {doc['size']} bytes, {doc['count']} blobs ({dtypes or 'none'})"
    )
    add_limited(
        root,
        doc["blobs"],
        lambda b: (
            f"record {b['offset']}: {b['dtype']} × {b['count']} ({b['size']} bytes at {b['data_offset']})"
        ),
    )
    return root


KIND = Kind("weight.bin", is_weight_bin, describe_weight_bin, render_weight_bin, (".bin",))
