"""Argument parsing and printing shared by the CLI commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError, InputError, ModelError, PathError, os_error
from anekit.files import regular_file
from anekit.targets import DEFAULT_TARGET


def add_target_option(parser: Any) -> None:
    """``--target/-t``: the chip to compile for (the package default when omitted)."""
    parser.add_argument(
        "--target",
        "-t",
        default=DEFAULT_TARGET,
        help=f"chip name or engine code (default: {DEFAULT_TARGET})",
    )


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped as usual; the examples epilog kept line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_command(
    sub: Any,
    name: str,
    *,
    help: str,
    description: str,
    examples: Sequence[str],
    json_help: str = "print the result as JSON on stdout",
) -> argparse.ArgumentParser:
    """A subcommand as every command is: a description, examples in ``--help`` and ``--json``."""
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help=json_help)
    return parser


FORMATS = ("table", "plain", "json")


def add_format_option(parser: Any) -> None:
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table: boxed columns (the default on a terminal, with rich installed); plain: "
        "aligned columns, names never wrapped (the default otherwise); json: as --json",
    )


def output_format(args: Any, stream: Any = None) -> str:
    """What to print: json (``--json``), the ``--format`` asked for, else a table only when
    ``stream`` is a terminal and rich is installed, plain text otherwise."""
    if getattr(args, "json", False):
        return "json"
    chosen = getattr(args, "format", None)
    if chosen:
        return chosen
    stream = stream or sys.stdout
    return "table" if _isatty(stream) and _has_rich() else "plain"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _has_rich() -> bool:
    try:
        import rich.table  # noqa: F401
    except ImportError:
        return False
    return True


def add_shape_option(parser: Any) -> None:
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="fix an input's shape, e.g. --shape input_ids=1x64 (repeatable)",
    )


def parse_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """'name=1x3x224x224' -> {'name': (1, 3, 224, 224)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        parts = dims.replace(",", "x").split("x") if dims else []
        if not sep or not name or not parts or not all(p.strip().isdigit() for p in parts):
            raise AnekitError(
                f"--shape '{spec}' is not NAME=DIMS",
                hint="write dimensions separated by x, e.g. --shape input_ids=1x64",
            )
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


def add_feeds_options(parser: Any, what: str = "inputs") -> None:
    """The one feeds syntax: ``--input NAME=FILE.npy`` (repeatable) and ``--inputs FILE.npz``."""
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help=f"one of the {what}: an input's name and an .npy file (repeatable)")  # fmt: skip
    parser.add_argument("--inputs", metavar="FILE.npz",
                        help=f"the {what} from an .npz file, one array per input name")  # fmt: skip


def parse_feeds(args: Any) -> dict[str, np.ndarray]:
    """The feeds of ``--input`` and ``--inputs`` together (an input given twice is an error)."""
    feeds: dict[str, np.ndarray] = {}
    if getattr(args, "inputs", None):
        from anekit.formats.npy import read_arrays

        feeds.update(read_arrays(args.inputs, "--inputs file"))
    for name, arr in parse_inputs(getattr(args, "input", None) or []).items():
        if name in feeds:
            raise InputError(f"input '{name}' is given twice (--input and --inputs {args.inputs})",
                             hint="give each input once")  # fmt: skip
        feeds[name] = arr
    return feeds


def parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """'name=file.npy' -> {'name': array}, with clear errors for missing or bad files."""
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--input '{spec}' is not NAME=FILE.npy", hint="e.g. --input x=x.npy")
        if name in feeds:
            raise InputError(f"--input '{name}' is given twice", hint="give each input once")
        feeds[name] = load_array(Path(path), name)
    return feeds


def load_array(path: Path, name: str) -> np.ndarray:
    from anekit.formats.npy import read_array

    return read_array(path, f"input file for '{name}'")


def describe_array(arr: np.ndarray) -> str:
    """A one-line summary: shape, dtype, and min/mean/max (or the values when tiny)."""
    shape = "x".join(map(str, arr.shape)) or "scalar"
    if arr.size == 0:
        return f"{arr.dtype}[{shape}] (empty)"
    if arr.size <= 6:
        return f"{arr.dtype}[{shape}] = {np.array2string(arr.reshape(-1), precision=5, separator=', ')}"
    if arr.dtype.kind in "fc":
        finite = arr[np.isfinite(arr)]
        stats = (
            f"min {finite.min():.6g}  mean {finite.mean():.6g}  max {finite.max():.6g}"
            if finite.size
            else "no finite values"
        )
        bad = arr.size - finite.size
        return f"{arr.dtype}[{shape}]  {stats}" + (f"  ({bad} non-finite)" if bad else "")
    if arr.dtype == np.bool_:
        return f"{arr.dtype}[{shape}]  {int(arr.sum())} true of {arr.size}"
    return f"{arr.dtype}[{shape}]  min {arr.min()}  max {arr.max()}"


def check_npz_target(path: Path) -> Path:
    """An output path for an .npz: in an existing, writable folder, and not something else
    already (only a regular file that is an .npz archive is replaced)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise AnekitError(f"output '{path}' must end in .npz")
    if not path.parent.is_dir():
        raise PathError(f"output directory '{path.parent}' does not exist",
                          hint=f"create it first (mkdir -p '{path.parent}')")  # fmt: skip
    if os.path.lexists(path):
        try:
            with open(regular_file(path, "output file"), "rb") as existing:
                is_npz = existing.read(4) == b"PK\x03\x04"
        except OSError:
            is_npz = False
        if not is_npz:
            raise AnekitError(f"'{path}' exists and is not an .npz archive; refusing to replace it",
                              hint="choose another output path")  # fmt: skip
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise PathError(f"cannot write '{path}': the folder '{path.parent}' is not writable")
    return path


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an .npz atomically (temp file in the same directory, then rename)."""
    path = check_npz_target(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=path.parent)
    except OSError as exc:
        raise os_error(exc, f"write '{path}'") from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **dict(arrays))
        os.replace(tmp, path)
    except OSError as exc:
        raise os_error(exc, f"write '{path}'") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=_json_default)
    sys.stdout.write("\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def existing_model_file(spec: str) -> Path:
    """The model file a command was given, checked to exist before anything slow happens."""
    return regular_file(spec, "model file", error=ModelError)


def aligned_lines(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain-text table (header, then rows): columns padded to their widest cell."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (columns, *rows)
    ]


def load_model_graph(path: str, shapes: Mapping[str, tuple[int, ...]]):
    """An ONNX model file as a Graph (the error names the file when it is not ONNX)."""
    from anekit.frontend.onnx import from_onnx

    return from_onnx(regular_file(path, "model file", error=ModelError), shapes or None)


def compression_summary(report: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A CompiledModel's compression report without its per-weight rows (None: uncompressed)."""
    return None if report is None else {k: v for k, v in report.items() if k != "per_weight"}


def compression_line(summary: Mapping[str, Any]) -> str:
    return (
        f"weights {summary['scheme']}: {summary['fp16_bytes'] / 2**20:.2f} MiB fp16 -> "
        f"{summary['stored_bytes'] / 2**20:.2f} MiB ({summary['weights']} weights, worst "
        f"relative error {summary['worst_relative_error']:.4f})"
    )


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    out: Any,
    *,
    fmt: str = "plain",
    right: Sequence[str] = (),
    styles: Sequence[str | None] | None = None,
) -> None:
    """Rows under a title: a rich table for ``fmt == "table"`` (``right``: right-aligned
    columns; ``styles``: one per row), else plain aligned lines. Neither wraps a cell of any
    column but the last: names stay whole, for people and for grep."""
    if fmt != "table" or not _has_rich():
        print(title, file=out)
        for line in aligned_lines(columns, rows):
            print(line, file=out)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title), title_justify="left")
    last = len(columns) - 1
    for i, col in enumerate(columns):
        table.add_column(col, justify="right" if col in right else "left",
                         no_wrap=i != last, overflow="fold")  # fmt: skip
    for i, row in enumerate(rows):
        table.add_row(*(Text(cell) for cell in row), style=None if styles is None else styles[i])
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    needed = sum(widths[:last]) + 3 * len(columns) + 30  # whole names, and room for the last
    console = Console(file=out)
    Console(file=out, width=max(needed, console.width)).print(table)
