"""`anekit targets`: the table, one chip with sources, --json, and unknown names."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from anekit.cli import main
from anekit.targets import figure_paths

CHIPS = ["m1", "m1-pro", "m1-max", "m2", "m2-pro", "m2-max", "m3", "m3-pro", "m3-max"]
CHIPS += ["m4", "m4-pro", "m4-max", "m5", "m5-pro", "m1-ultra", "m2-ultra", "m3-ultra"]


def test_table_lists_every_chip(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    first_cells = {line.split()[0] for line in out.splitlines()[2:]}  # plain rows under the header
    for name in CHIPS:
        assert name in first_cells
    assert "H16" in out and "32 MiB" in out and "h17s" in out


def test_json_lists_every_chip_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(t["name"] for t in data["targets"]) == sorted(CHIPS)
    for t in data["targets"]:
        assert set(t["sources"]) == set(figure_paths())
        assert all(s["source"] for s in t["sources"].values())
        assert {"limits", "features", "mil", "perf", "process"} <= t.keys()


def test_one_chip_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets", "m4"]) == 0
    out = capsys.readouterr().out
    assert "m4: engine H16 (generation 16)" in out
    for path in ("perf.peak_fp16_tflops", "features.softmax", "mil.opset", "process.max_compiles"):
        assert path in out
    assert "[seed001]" in out  # sources print literally, not as rich markup
    assert "other source: 5.4" in out  # the GEMM figure that disagrees


def test_one_chip_as_json_by_engine_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets", "--json", "H17S"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in data["targets"]] == ["m5-pro"]


def test_unknown_name_exits_2_listing_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["targets", "nosuchchip"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for name in CHIPS:
        assert name in captured.err


def test_plain_text_without_rich(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("rich", "rich.console", "rich.table", "rich.text"):
        monkeypatch.setitem(sys.modules, module, None)  # makes `import rich...` fail
    assert main(["targets"]) == 0
    table = capsys.readouterr().out
    rows = table.splitlines()[2:]
    assert [row.split()[0] for row in rows] == [
        "m1", "m1-pro", "m1-max", "m1-ultra", "m2", "m2-pro", "m2-max", "m2-ultra",
        "m3", "m3-pro", "m3-max", "m3-ultra", "m4", "m4-pro", "m4-max", "m5", "m5-pro",
    ]  # fmt: skip
    assert main(["targets", "m1"]) == 0
    detail = capsys.readouterr().out
    assert "onchip_budget_bytes = 2097152 (2 MiB)  [documented]" in detail
    assert "other source: 4194304" in detail


def test_json_on_stdout_only_in_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "anekit", "targets", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["targets"]) == len(CHIPS)
