"""The loader rejects every kind of bad edit to chips.json with a message naming the problem."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from anekit.errors import InternalError
from anekit.targets.loader import default_database, parse_database

PACKAGED = json.loads(
    resources.files("anekit.targets").joinpath("chips.json").read_text(encoding="utf-8")
)


def chip(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in data["chips"] if c["name"] == name)


def broken(edit: Callable[[dict[str, Any]], None]) -> str:
    data = copy.deepcopy(PACKAGED)
    edit(data)
    return json.dumps(data)


def test_the_packaged_file_parses_and_is_loaded_once() -> None:
    db = parse_database(json.dumps(PACKAGED))
    assert [t.name for t in db.targets] == [c["name"] for c in PACKAGED["chips"]]
    assert default_database() is default_database()


def _set(name: str, path: str, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        entry = chip(data, name)["set"][path]
        entry.update(changes)
        for key in [k for k, v in changes.items() if v is ...]:
            del entry[key]

    return edit


def _move_m5_first(data: dict[str, Any]) -> None:
    data["chips"].insert(0, data["chips"].pop([c["name"] for c in data["chips"]].index("m5")))


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no source", _set("m4", "perf.bandwidth_gbps", source=...), "missing keys ['source']"),
    ("empty source", _set("m4", "perf.bandwidth_gbps", source="  "), "non-empty source"),
    (
        "unknown reference",
        _set("m4", "perf.bandwidth_gbps", source="[nosuch] 120 GB/s"),
        "unknown reference [nosuch]",
    ),
    ("unknown kind", _set("m4", "perf.bandwidth_gbps", kind="rumour"), "kind 'rumour'"),
    (
        "silent assumption",
        _set("m3", "perf.gemm_fp16_tflops", source="[facts] 7: 3.4"),
        "must say what is assumed",
    ),
    ("string for a number", _set("m4", "ane_cores", value="16"), "expected int"),
    ("bool for a number", _set("m4", "ane_cores", value=True), "expected int"),
    ("float for an int", _set("m4", "ane_cores", value=16.5), "expected int"),
    ("negative number", _set("m4", "perf.bandwidth_gbps", value=-1), "positive number"),
    ("fraction above one", _set("m4", "perf.util_deep_graph", value=1.5), "at most 1"),
    ("number for a gate", _set("m1", "features.resize", value=0), "expected true or false"),
    ("null for a required figure", _set("m4", "perf.bandwidth_gbps", value=None), "null is only"),
    (
        "unknown kind with a value",
        _set("m5", "perf.marketing_tops", value=10.0),
        "kind 'unknown' must have a null value",
    ),
    (
        "bad alternative",
        _set("m4", "perf.peak_fp16_tflops", alternatives=[{"value": 5.4}]),
        "alternative is {value, source}",
    ),
    (
        "unknown figure",
        lambda d: chip(d, "m4")["set"].update({"perf.warp_speed": {"value": 1}}),
        "unknown figures ['perf.warp_speed']",
    ),
    (
        "missing figure",
        lambda d: d["defaults"].pop("process.max_inflight"),
        "no value (set here, inherited or default) for ['process.max_inflight']",
    ),
    (
        "duplicate alias",
        lambda d: chip(d, "m2")["aliases"].update({"h13": "[facts] 7"}),
        "alias 'h13' is already taken",
    ),
    (
        "alias that is a chip name",
        lambda d: chip(d, "m5")["aliases"].update({"m4": "[facts] 7"}),
        "'m4' is already taken",
    ),
    (
        "alias without source",
        lambda d: chip(d, "m2")["aliases"].update({"h14": ""}),
        "needs a source",
    ),
    ("duplicate chip", lambda d: d["chips"].append(copy.deepcopy(chip(d, "m4"))), "unique"),
    (
        "inherits a later chip",
        lambda d: chip(d, "m1-pro").update({"inherits": "m4"}),
        "inherits 'm4', which is not an earlier chip",
    ),
    (
        "variant changes engine",
        lambda d: chip(d, "m4-max")["set"].update(
            {"engine": {"value": "H17", "kind": "documented", "source": "[facts] 7"}}
        ),
        "shares its parent's engine",
    ),
    (
        "bad engine code",
        _set("m4", "engine", value="M4"),
        "engine 'M4' is not like 'H13'",
    ),
    ("generation order", _move_m5_first, "listed after a newer generation"),
    ("undocumented field", lambda d: d["fields"].pop("perf.compile_ms"), "needs a description"),
    ("wrong format", lambda d: d.update({"format": 2}), "format 2"),
    ("extra top-level key", lambda d: d.update({"chip": []}), "top level"),
    ("empty chip list", lambda d: d.update({"chips": []}), "database is empty"),
]


@pytest.mark.parametrize(("what", "edit", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_edits_fail_loudly(
    what: str, edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    with pytest.raises(InternalError) as info:
        parse_database(broken(edit), where="edited.json")
    assert message in str(info.value)
    assert str(info.value).startswith("edited.json: ")


def test_the_message_names_the_chip() -> None:
    with pytest.raises(InternalError, match="chip 'm2': .*alias 'h13' is already taken"):
        parse_database(broken(lambda d: chip(d, "m2")["aliases"].update({"h13": "[facts] 7"})))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": 1}', "null"])
def test_not_a_database(text: str) -> None:
    with pytest.raises(InternalError, match="chips.json: "):
        parse_database(text)
