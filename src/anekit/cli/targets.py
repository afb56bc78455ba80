"""`anekit targets [--json] [NAME]`: list the chip database, or one chip in full with its sources."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from anekit import targets
from anekit.cli.common import add_command, add_format_option, aligned_lines, output_format
from anekit.targets import Target

_SUMMARY_COLUMNS = (
    "name",
    "aliases",
    "engine",
    "cores",
    "TOPS",
    "fp16 TFLOP/s conv/gemm",
    "GB/s",
    "on-chip",
    "MIL",
    "texture",
    "topk",
    "dropout",
    "sin/cos",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "targets",
        help="list the Apple Neural Engine chips anekit knows, with sourced figures",
        description="List every chip (or one chip in full, with the source of every figure). "
        "Targets are Mac chips (M1 to M5 and their Pro, Max and Ultra variants) and their "
        "engine codes (h13 to h17s); A-series (iPhone) chips are not in the database.",
        examples=["anekit targets", "anekit targets m4 --json", "anekit targets h13"],
        json_help="print JSON on stdout",
    )
    parser.add_argument("name", nargs="?", help="a chip name or engine code (m4, m1-max, h17s)")
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chosen = [targets.get(args.name)] if args.name else targets.all_targets()
    fmt = output_format(args)
    if fmt == "json":
        json.dump({"targets": [t.to_dict() for t in chosen]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.name:
        _print_detail(chosen[0], fmt)
    else:
        rows = [_summary_row(t) for t in chosen]
        _print_table("Apple Neural Engine targets", _SUMMARY_COLUMNS, rows, fmt)
    return 0


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _value(path: str, value: Any) -> str:
    if value is None:
        return "n/a (unknown)"
    if isinstance(value, tuple):
        return ", ".join(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if path.endswith("_bytes"):
        return f"{value} ({_bytes(value)})"
    return str(value)


def _summary_row(t: Target) -> list[str]:
    tops = "n/a" if t.perf.marketing_tops is None else f"{t.perf.marketing_tops:g}"
    mark = {True: "yes", False: "-"}
    return [
        t.name,
        " ".join(t.aliases),
        t.engine,
        str(t.ane_cores),
        tops,
        f"{t.perf.peak_fp16_tflops:g} / {t.perf.gemm_fp16_tflops:g}",
        f"{t.perf.bandwidth_gbps:g}",
        _bytes(t.onchip_budget_bytes),
        f"{t.mil.program_version} {t.mil.opset}",
        mark[t.features.resize],
        mark[t.features.topk],
        mark[t.features.dropout],
        mark[t.features.sin_cos],
    ]


def _detail_rows(t: Target) -> list[list[str]]:
    rows = []
    for path in targets.figure_paths():
        prov = t.provenance_of(path)
        origin = "" if prov.defined_in == t.name else f" (from {prov.defined_in})"
        source = prov.source + origin
        for alt in prov.alternatives:
            source += f"\n  other source: {alt.value!r}: {alt.source}"
        rows.append([path, _value(path, t.figure(path)), prov.kind, source])
    return rows


def _print_detail(t: Target, fmt: str) -> None:
    aliases = ", ".join(t.aliases) or "none"
    title = f"{t.name}: engine {t.engine} (generation {t.generation}), aliases: {aliases}"
    if t.notes:
        title += f"\n{t.notes}"
    _print_table(title, ("figure", "value", "kind", "source"), _detail_rows(t), fmt)


def _print_table(title: str, columns: tuple[str, ...], rows: list[list[str]], fmt: str) -> None:
    if fmt != "table":
        _print_plain(title, columns, rows)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    # Text() keeps "[seed000]" literal instead of reading it as rich markup.
    table = Table(title=Text(title), title_justify="left", show_lines=len(columns) == 4)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)


def _print_plain(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    print(title)
    if len(columns) == 4:  # detail view: one figure per block, its source below
        for path, value, kind, source in rows:
            print(f"  {path} = {value}  [{kind}]")
            for line in source.splitlines():
                print(f"      {line}")
        return
    for line in aligned_lines(columns, rows):
        print(line)
