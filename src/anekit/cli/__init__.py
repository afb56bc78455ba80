"""The `anekit` command line: one module per subcommand, registered here."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from anekit import __version__
from anekit.errors import AnekitError, os_error

# Each module defines `register(subparsers)`, which adds its parser and sets
# `func(args) -> int` as the handler. Order here is the order in `--help`.
COMMAND_MODULES = (
    "anekit.cli.info",
    "anekit.cli.run",
    "anekit.cli.check",
    "anekit.cli.compile",
    "anekit.cli.estimate",
    "anekit.cli.report",
    "anekit.cli.inspect",
    "anekit.cli.targets",
    "anekit.cli.cache",
    "anekit.cli.doctor",
    "anekit.cli.generate",
    "anekit.cli.export",
    "anekit.cli.train",
)

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anekit",
        description="Compile, explain, estimate and simulate neural networks for the Apple Neural Engine.",
    )
    parser.add_argument("--version", action="version", version=f"anekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:  # a missing module is a broken install: let it raise
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER
    try:
        return int(args.func(args) or 0)
    except AnekitError as exc:
        print(f"anekit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except MemoryError:  # the machine's limit, not a bug: the input asked for too much
        print(
            f"anekit {args.command}: error: out of memory: the model or its inputs need more "
            "memory than this machine could give\n"
            "  hint: use smaller input shapes, or run on a machine with more memory",
            file=sys.stderr,
        )
        return EXIT_USER
    except OSError as exc:  # the file system refused: a path the user gave, not a bug
        print(f"anekit {args.command}: error: {os_error(exc, 'access a file')}", file=sys.stderr)
        return EXIT_USER
    except Exception as exc:  # noqa: BLE001 - the boundary between anekit and the shell
        if os.environ.get("ANEKIT_DEBUG"):
            traceback.print_exc()
        print(
            f"anekit {args.command}: internal error: {type(exc).__name__}: {exc}\n"
            "  this is a bug in anekit; rerun with ANEKIT_DEBUG=1 for a traceback and report it",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
