"""The identification banner (LC 0x8): compiler, version, target, flags and build modules."""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMPILER_LINE = re.compile(r"([A-Za-z_][\w.-]*) v(\d[\w.-]*)")
_MODULE_LINE = re.compile(r"Module (.*?):")
_PROPERTY_LINE = re.compile(r"([A-Za-z][\w ]*?):\s?(.*)")


@dataclass(frozen=True)
class BuildModule:
    """A ` Module <name>:` block of newer banners, its `Key: Value` lines in order."""

    name: str
    properties: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        return next((value for k, value in self.properties if k == key), None)


@dataclass(frozen=True)
class Banner:
    """The compiler invocation that produced the file, as recorded verbatim in the banner."""

    text: str
    format: str | None  # first line, e.g. "ANEC v1"
    compiler: str | None  # e.g. "zin_ane_compiler"
    version: str | None  # e.g. "4.2.1"
    target: str | None  # the `-t` selector, e.g. "h13"
    flags: tuple[str, ...]  # every option line (`--x=v`, zin 9's `-g`) but -t/-i/-o, in order
    input: str | None  # `-i`
    output: str | None  # `-o`
    modules: tuple[BuildModule, ...]


def parse_banner(text: str) -> Banner:
    """Split the banner into its parts; lines it does not recognise are only kept in `text`."""
    lines = text.split("\n")
    banner_format = lines[0].strip() or None
    compiler = version = target = source = output = None
    flags: list[str] = []
    modules: list[BuildModule] = []
    module_name: str | None = None
    properties: list[tuple[str, str]] = []

    def close_module() -> None:
        if module_name is not None:
            modules.append(BuildModule(module_name, tuple(properties)))

    for line in lines[1:]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("--"):
            flags.append(stripped)
        elif stripped.startswith("-"):
            option, _, value = stripped.partition(" ")
            value = value.strip()
            if option == "-t":
                target = value
            elif option == "-i":
                source = value
            elif option == "-o":
                output = value
            else:
                flags.append(stripped)
        elif (match := _MODULE_LINE.fullmatch(stripped)) is not None:
            close_module()
            module_name, properties = match.group(1), []
        elif compiler is None and (match := _COMPILER_LINE.fullmatch(stripped)) is not None:
            compiler, version = match.group(1), match.group(2)
        elif module_name is not None and (match := _PROPERTY_LINE.fullmatch(stripped)) is not None:
            properties.append((match.group(1), match.group(2).strip()))
    close_module()
    return Banner(
        text, banner_format, compiler, version, target, tuple(flags), source, output, tuple(modules)
    )
