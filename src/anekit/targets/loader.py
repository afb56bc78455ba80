"""Reads chips.json, resolves inheritance, validates every figure and its source, builds Targets."""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from types import MappingProxyType
from typing import Any

from anekit.errors import InternalError
from anekit.targets.model import (
    GROUPS,
    KINDS,
    TOP_FIELDS,
    Alternative,
    Provenance,
    Target,
    figure_paths,
)

_TOP_KEYS = {"format", "about", "rules", "kinds", "references", "fields", "defaults", "chips"}
_CHIP_KEYS = {"name", "inherits", "aliases", "notes", "set"}
_ENTRY_KEYS = {"value", "kind", "source", "alternatives"}
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_ENGINE_RE = re.compile(r"^H\d{2}$")
_REF_RE = re.compile(r"\[([a-z][a-z0-9]*)\]")
_FORMAT = 1


@dataclass(frozen=True)
class Database:
    """All targets in generation order, and an index from lower-case names and aliases to them."""

    targets: tuple[Target, ...]
    index: Mapping[str, Target] = field(repr=False, compare=False, hash=False)


class _Bad(Exception):
    """A problem in the data file; turned into an InternalError naming the file."""


def _field_types() -> dict[str, Any]:
    """The declared Python type of every figure path."""
    types_by_path = {name: typing.get_type_hints(Target)[name] for name in TOP_FIELDS}
    for group, cls in GROUPS.items():
        hints = typing.get_type_hints(cls)
        types_by_path.update({f"{group}.{f.name}": hints[f.name] for f in fields(cls)})
    return types_by_path


def _is_optional(declared: Any) -> bool:
    origin = typing.get_origin(declared)
    return origin in (types.UnionType, typing.Union) and type(None) in typing.get_args(declared)


def _coerce(path: str, value: Any, declared: Any) -> Any:
    """Check a JSON value against the field's declared type; returns the typed value."""
    if _is_optional(declared):  # "float | None": None is handled by the caller
        declared = next(a for a in typing.get_args(declared) if a is not type(None))
    if typing.get_origin(declared) is tuple:
        if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
            raise _Bad(f"{path}: expected a non-empty list of strings, got {value!r}")
        return tuple(value)
    if declared is bool:
        if not isinstance(value, bool):
            raise _Bad(f"{path}: expected true or false, got {value!r}")
        return value
    if declared is str:
        if not (isinstance(value, str) and value):
            raise _Bad(f"{path}: expected a non-empty string, got {value!r}")
        return value
    if declared in (int, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or (declared is int and not isinstance(value, int)):
            raise _Bad(f"{path}: expected {declared.__name__}, got {value!r}")
        if value <= 0:
            raise _Bad(f"{path}: expected a positive number, got {value!r}")
        name = path.rpartition(".")[2]
        if (name.startswith("util_") or name.endswith("_factor")) and value > 1:
            raise _Bad(f"{path}: a fraction must be at most 1, got {value!r}")
        return declared(value)
    raise _Bad(f"{path}: unsupported declared type {declared!r}")  # a model.py change


def _check_refs(text: str, references: Mapping[str, str], what: str) -> None:
    for ref in _REF_RE.findall(text):
        if ref not in references:
            raise _Bad(f"{what}: unknown reference [{ref}] (known: {', '.join(references)})")


def _entry(
    path: str,
    raw: Any,
    defined_in: str,
    declared: Any,
    references: Mapping[str, str],
) -> tuple[Any, Provenance]:
    """Validate one {value, kind, source, alternatives} entry; returns (value, provenance)."""
    if not isinstance(raw, dict):
        raise _Bad(f"{path}: expected an object with value, kind and source, got {raw!r}")
    missing = {"value", "kind", "source"} - raw.keys()
    extra = raw.keys() - _ENTRY_KEYS
    if missing or extra:
        raise _Bad(f"{path}: missing keys {sorted(missing)}, unknown keys {sorted(extra)}")
    kind, source, value = raw["kind"], raw["source"], raw["value"]
    if kind not in KINDS:
        raise _Bad(f"{path}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not (isinstance(source, str) and source.strip()):
        raise _Bad(f"{path}: every figure needs a non-empty source")
    _check_refs(source, references, path)
    if kind == "assumption" and "assum" not in source.lower():
        raise _Bad(f"{path}: an assumption's source must say what is assumed ('assumed = ...')")
    if value is None:
        if kind != "unknown" or not _is_optional(declared):
            raise _Bad(f"{path}: null is only allowed for an optional figure of kind 'unknown'")
    elif kind == "unknown":
        raise _Bad(f"{path}: kind 'unknown' must have a null value")
    else:
        value = _coerce(path, value, declared)
    alternatives = []
    for alt in raw.get("alternatives", []):
        if not (isinstance(alt, dict) and alt.keys() == {"value", "source"}):
            raise _Bad(f"{path}: an alternative is {{value, source}}, got {alt!r}")
        if not (isinstance(alt["source"], str) and alt["source"].strip()):
            raise _Bad(f"{path}: an alternative needs a non-empty source")
        _check_refs(alt["source"], references, path)
        alternatives.append(Alternative(alt["value"], alt["source"]))
    return value, Provenance(kind, source, defined_in, tuple(alternatives))


def _build_target(
    chip: Mapping[str, Any],
    family: str,
    aliases: tuple[str, ...],
    figures: Mapping[str, tuple[Any, Provenance]],
) -> Target:
    values = {path: value for path, (value, _) in figures.items()}
    groups = {
        group: cls(**{f.name: values[f"{group}.{f.name}"] for f in fields(cls)})
        for group, cls in GROUPS.items()
    }
    return Target(
        name=chip["name"],
        aliases=aliases,
        family=family,
        **{name: values[name] for name in TOP_FIELDS},
        **groups,
        notes=chip.get("notes", ""),
        provenance=MappingProxyType({path: prov for path, (_, prov) in figures.items()}),
    )


def _parse(data: Any) -> Database:
    if not isinstance(data, dict) or data.keys() != _TOP_KEYS:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise _Bad(f"top level: expected keys {sorted(_TOP_KEYS)}, got {got}")
    if data["format"] != _FORMAT:
        raise _Bad(f"format {data['format']!r} is not {_FORMAT}")
    if set(data["kinds"]) != set(KINDS):
        raise _Bad(f"kinds: expected exactly {', '.join(KINDS)}")
    paths = figure_paths()
    if set(data["fields"]) != set(paths) or not all(data["fields"].values()):
        missing = sorted(set(paths) - set(data["fields"]))
        extra = sorted(set(data["fields"]) - set(paths))
        raise _Bad(f"fields: every figure needs a description (missing {missing}, unknown {extra})")
    references: dict[str, str] = data["references"]
    if not all(isinstance(v, str) and v.strip() for v in references.values()):
        raise _Bad("references: every reference needs a citation")
    declared = _field_types()

    def entries(raw: Any, defined_in: str) -> dict[str, tuple[Any, Provenance]]:
        if not isinstance(raw, dict):
            raise _Bad(f"{defined_in}: expected an object of figures")
        unknown = sorted(set(raw) - set(paths))
        if unknown:
            raise _Bad(f"{defined_in}: unknown figures {unknown}")
        return {p: _entry(p, e, defined_in, declared[p], references) for p, e in raw.items()}

    defaults = entries(data["defaults"], "defaults")
    resolved: dict[str, dict[str, tuple[Any, Provenance]]] = {}
    families: dict[str, str] = {}
    index: dict[str, Target] = {}
    targets: list[Target] = []
    for chip in data["chips"]:
        if not isinstance(chip, dict) or not isinstance(chip.get("name"), str):
            raise _Bad(f"chips: every chip needs a name, got {chip!r}")
        name = chip["name"]
        try:
            if chip.keys() - _CHIP_KEYS:
                raise _Bad(f"unknown keys {sorted(chip.keys() - _CHIP_KEYS)}")
            if not _NAME_RE.match(name) or name in resolved:
                raise _Bad("the name must be lower-case words joined by '-' and unique")
            parent = chip.get("inherits")
            if parent is not None and parent not in resolved:
                raise _Bad(f"inherits {parent!r}, which is not an earlier chip")
            own = entries(chip.get("set", {}), name)
            if parent is not None and "engine" in own:
                raise _Bad("a chip that inherits shares its parent's engine; do not set 'engine'")
            figures = {**(resolved[parent] if parent else defaults), **own}
            missing = [p for p in paths if p not in figures]
            if missing:
                raise _Bad(f"no value (set here, inherited or default) for {missing}")
            if not _ENGINE_RE.match(figures["engine"][0]):
                raise _Bad(f"engine {figures['engine'][0]!r} is not like 'H13'")
            aliases = chip.get("aliases", {})
            if not isinstance(aliases, dict):
                raise _Bad("aliases must map each engine code to its source")
            for alias, why in aliases.items():
                if not (isinstance(alias, str) and _NAME_RE.match(alias)):
                    raise _Bad(f"alias {alias!r} must be a lower-case code")
                if not (isinstance(why, str) and why.strip()):
                    raise _Bad(f"alias {alias!r} needs a source")
                _check_refs(why, references, f"alias {alias!r}")
        except _Bad as exc:
            raise _Bad(f"chip {name!r}: {exc}") from None
        resolved[name] = figures
        families[name] = families[parent] if parent else name
        target = _build_target(chip, families[name], tuple(aliases), figures)
        if targets and target.generation < targets[-1].generation:
            raise _Bad(f"chip {name!r}: listed after a newer generation ({targets[-1].name})")
        for key in (name, *aliases):
            if key in index:
                raise _Bad(f"chip {name!r}: name or alias {key!r} is already taken")
            index[key] = target
        targets.append(target)
    if not targets:
        raise _Bad("chips: the database is empty")
    return Database(tuple(targets), MappingProxyType(index))


def parse_database(text: str, where: str = "chips.json") -> Database:
    """Parse and validate a chip database; a bad file raises InternalError naming the problem."""
    try:
        return _parse(json.loads(text))
    except json.JSONDecodeError as exc:
        raise InternalError(f"{where}: not valid JSON: {exc}") from None
    except _Bad as exc:
        raise InternalError(f"{where}: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:  # a shape the checks above missed
        raise InternalError(f"{where}: malformed chip database: {exc!r}") from None


@functools.cache
def default_database() -> Database:
    """The packaged chips.json, loaded and validated once per process."""
    text = resources.files("anekit.targets").joinpath("chips.json").read_text(encoding="utf-8")
    return parse_database(text)
