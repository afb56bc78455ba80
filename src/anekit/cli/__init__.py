"""The `anekit` command line: one module per subcommand, registered here."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback

from anekit.errors import AnekitError, os_error
from anekit.version import __version__

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

# The one table of exit statuses (README.md repeats it).
EXIT_STATUSES = (
    (0, "success"),
    (1, "a bug in anekit (ANEKIT_DEBUG=1 prints the traceback)"),
    (2, "a user error: a missing or malformed file, an unsupported op, a bad option or feed"),
    (3, "check --strict: something would run on the CPU"),
    (4, "check --numerics: an fp16 hazard (overflow, underflow, lost precision) was found"),
    (130, "interrupted"),
)

# API argument names in error messages, as the command line spells them.
_CLI_TERMS = (
    (re.compile(r"input_shapes=\{'(\w+)': \(1, 64\)\}"), r"--shape \1=1x64"),
    (re.compile(r"(pass |fix it with )?input_shapes=\{[^}]*\}(?: or | / )"), r"\1"),
    (re.compile(r"\binput_shapes= / "), ""),
    (re.compile(r"\binput_shapes\b"), "--shape"),
    (re.compile(r"\bmax_context\b"), "--max-context"),
    (re.compile(r"\bmax_new_tokens\b"), "--max-new-tokens"),
)


def cli_terms(text: str) -> str:
    """An API error message in the command line's terms (option names, not argument names)."""
    for pattern, repl in _CLI_TERMS:
        text = pattern.sub(repl, text)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="anekit",
        description="Compile, explain, estimate and simulate neural networks for the Apple Neural Engine.",
        epilog="exit status:\n"
        + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_STATUSES)
        + "\n\nevery command takes --json; `anekit COMMAND --help` shows its options and examples",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"anekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:  # a missing module is a broken install: let it raise
        importlib.import_module(module_name).register(sub)
    for command_parser in sub.choices.values():  # a bad option prints its command's usage
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER
    try:
        return int(args.func(args) or 0)
    except AnekitError as exc:
        print(f"anekit {args.command}: error: {cli_terms(str(exc))}", file=sys.stderr)
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
