"""`anekit inspect FILE [--json]`: detect what a file is and print its decoded contents as a tree."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from anekit.cli.common import add_command, add_format_option, output_format
from anekit.cli.inspect_kinds import (
    bundle,
    dispatch,
    hwx,
    mil_text,
    netplist,
    onnx_model,
    weight_bin,
)
from anekit.cli.inspect_kinds.base import Kind, Node
from anekit.errors import AnekitError, FormatError
from anekit.files import open_regular

HEAD_BYTES = 4096


# Magic-byte detectors are tried first, in this order; then file extensions.
KINDS: tuple[Kind, ...] = (
    hwx.KIND,
    weight_bin.KIND,
    netplist.KIND,
    mil_text.KIND,
    onnx_model.KIND,
    dispatch.KIND,
)
BUNDLE = bundle.KIND
KNOWN = (
    "a .hwx container, weight.bin, MIL text, a netplist, an anekit bundle, an ONNX model or a "
    "dispatch descriptor (.e5)"
)


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
    fd = open_regular(path, "the file")  # a pipe or a device is refused, never read
    try:
        head = os.pread(fd, HEAD_BYTES, 0)
    except OSError as exc:
        raise AnekitError(f"cannot read the file: {exc.strerror or exc}", where=str(path)) from None
    finally:
        os.close(fd)
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


def print_tree(title: str, root: Node, fancy: bool = False) -> None:
    """An indented tree; with ``fancy`` (a terminal), drawn with rich's guide lines."""
    if not fancy:
        print(f"{title}: {root.label}")
        _print_plain(root.children, "  ")
        return
    from rich.console import Console
    from rich.text import Text
    from rich.tree import Tree

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
    parser = add_command(
        subparsers,
        "inspect",
        help="show what is inside a .hwx, weight.bin, MIL, netplist, bundle or ONNX file",
        description=f"Detect the kind of FILE ({KNOWN}) and print its decoded contents.",
        examples=[
            "anekit inspect tests/data/apple/hwx/h13_relu.hwx",
            "anekit inspect digits.anekit --json",
        ],
        json_help="print the decoded contents as JSON on stdout",
    )
    parser.add_argument("file", type=Path, help="the file (or bundle directory) to inspect")
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.exists():
        raise AnekitError("no such file or directory", where=str(path))
    kind, doc = inspect_path(path)
    if output_format(args) == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif kind.render is not None:
        print_tree(path.name, kind.render(doc), fancy=output_format(args) == "table")
    return 0
