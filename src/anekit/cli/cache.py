"""`anekit cache info|clear [--json]`: the program cache (`anekit.runtime.cache`)."""

from __future__ import annotations

import argparse

from anekit.cli.common import add_command, print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "cache",
        help="show or clear the program cache (ANEKIT_CACHE_DIR)",
        description="The cache of compiled programs (anekit.load_or_compile), keyed by "
        "content and shared by processes: its folder (ANEKIT_CACHE_DIR), size and bound "
        "(ANEKIT_CACHE_MAX_BYTES), or clear it.",
        examples=["anekit cache info", "anekit cache clear --json"],
        json_help="print JSON on stdout",
    )
    parser.add_argument(
        "action",
        choices=("info", "clear"),
        help="info: size and entries; clear: remove every entry",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit.runtime.cache import ProgramCache

    cache = ProgramCache()
    if args.action == "clear":
        removed = cache.clear()
        if args.json:
            print_json({"directory": str(cache.directory), "removed": removed})
        else:
            print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache.directory}")
        return 0
    info = cache.info()
    data = {"directory": str(info.directory), "entries": info.entries, "bytes": info.bytes,
            "max_bytes": info.max_bytes}  # fmt: skip
    if args.json:
        print_json(data)
    else:
        print(f"directory  {info.directory}")
        print(f"entries    {info.entries}")
        print(f"size       {info.bytes / 2**20:.1f} MiB of {info.max_bytes / 2**20:.0f} MiB")
    return 0
