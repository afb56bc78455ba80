"""One convention for every command: --json, a description and examples in --help, one feeds
syntax, its own usage on a bad option, errors in the command line's terms, one table of exit
statuses; output piped to a file is the same plain text whether or not rich is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anekit.cli import EXIT_STATUSES, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits_cnn.onnx"
DIGIT = ROOT / "examples" / "digit.npy"


def _commands() -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(sub.choices)


COMMANDS = sorted(_commands())


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_json_description_and_example(name: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--json" in text
    description = _commands()[name].description
    assert description and description.split()[0] in text
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert examples and all(line.startswith(f"  anekit {name}") for line in examples if line)


def test_every_feeds_option_comes_in_both_forms() -> None:
    for name, parser in _commands().items():
        options = {o for a in parser._actions for o in a.option_strings}
        assert ("--input" in options) == ("--inputs" in options), name
    assert {"run", "check", "report"} <= {
        n for n, p in _commands().items() if any("--inputs" in a.option_strings for a in p._actions)
    }


def test_run_takes_input_and_inputs_alike(tmp_path, capsys) -> None:
    np.savez(tmp_path / "feeds.npz", image=np.load(DIGIT))
    assert main(["run", str(DIGITS), "--input", f"image={DIGIT}", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["run", str(DIGITS), "--inputs", str(tmp_path / "feeds.npz"), "--json"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert one == other and one["outputs"]["probs"]["shape"] == [1, 10]
    code = main(["run", str(DIGITS), "--input", f"image={DIGIT}",
                 "--inputs", str(tmp_path / "feeds.npz")])  # fmt: skip
    assert code == 2 and "given twice" in capsys.readouterr().err


def _cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), base.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "anekit", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=cwd, timeout=300)  # fmt: skip


def test_bad_option_prints_the_commands_usage() -> None:
    proc = _cli("check", str(DIGITS), "--no-such-option")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: anekit check") and "--no-such-option" in proc.stderr


def test_exit_statuses_in_one_table() -> None:
    epilog = build_parser().epilog
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (\d+) \| (.+) \|$", readme, re.M))
    for code, _meaning in EXIT_STATUSES:
        assert re.search(rf"^  {code}\s", epilog, re.M), code
        assert str(code) in table, code
    assert sorted(map(int, table)) == sorted(code for code, _ in EXIT_STATUSES)


def test_errors_use_option_names(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph), tmp_path / "dyn.onnx")
    proc = _cli("check", str(tmp_path / "dyn.onnx"))
    assert proc.returncode == 2 and "--shape x=1x4" in proc.stderr
    assert "input_shapes" not in proc.stderr
    proc = _cli("check", str(tmp_path / "dyn.onnx"), "--shape", "x=2x4x1")
    assert proc.returncode == 2 and "--shape gives 'x' rank 3" in proc.stderr


def test_no_a_series_targets() -> None:
    proc = _cli("check", str(DIGITS), "-t", "a17")
    assert proc.returncode == 2 and "no A-series" in proc.stderr and "h17" not in proc.stderr


# --- output into a pipe or a file --------------------------------------------------------

BLOCK_RICH = """
import importlib.abc, sys
class _NoRich(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rich" or name.startswith("rich."):
            raise ImportError(f"{name} is blocked for this test")
        return None
sys.meta_path.insert(0, _NoRich())
"""


@pytest.fixture(scope="module")
def no_rich(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("norich")
    (folder / "sitecustomize.py").write_text(BLOCK_RICH)
    env = {"PYTHONPATH": os.pathsep.join([str(folder), str(ROOT / "src")])}
    probe = _cli("--version", env=env)
    assert probe.returncode == 0
    blocked = subprocess.run([sys.executable, "-c", "import rich"], env={**os.environ, **env},
                             capture_output=True)  # fmt: skip
    assert blocked.returncode != 0  # the blocker works in the child
    return env


@pytest.mark.parametrize("args", [
    ("check", str(DIGITS), "-t", "m1"),
    ("estimate", str(DIGITS), "-t", "all"),
    ("targets",),
    ("inspect", str(ROOT / "tests/data/apple/hwx/h13_relu.hwx")),
], ids=["check", "estimate", "targets", "inspect"])  # fmt: skip
def test_piped_output_is_plain_and_the_same_without_rich(args, no_rich, tmp_path) -> None:
    pytest.importorskip("rich")  # the comparison needs rich installed on one side
    texts = []
    for env in (None, no_rich):
        out = tmp_path / "out.txt"
        with out.open("w") as f:
            base = dict(os.environ)
            base["PYTHONPATH"] = str(ROOT / "src")
            proc = subprocess.run([sys.executable, "-m", "anekit", *args], stdout=f,
                                  stderr=subprocess.PIPE, text=True, env={**base, **(env or {})},
                                  timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        texts.append(out.read_text())
    with_rich, without_rich = texts
    assert with_rich == without_rich
    assert not re.search("[\u2500-\u257f]", with_rich)  # no box drawing
    if args[0] == "check":  # every node's name whole on its row, as grep finds it
        report = json.loads(_cli(*args, "--json").stdout)
        lines = with_rich.splitlines()
        for row in report["ops"]:
            assert any(line.split()[:2] == [row["node"], row["op"]] for line in lines), row


def test_format_table_draws_a_table_without_wrapping_names() -> None:
    pytest.importorskip("rich")
    proc = _cli("check", str(DIGITS), "-t", "m1", "--format", "table", env={"COLUMNS": "60"})
    assert proc.returncode == 0 and "┃" in proc.stdout
    report = json.loads(_cli("check", str(DIGITS), "-t", "m1", "--json").stdout)
    for row in report["ops"]:
        assert row["node"] in proc.stdout, row["node"]


def test_loading_an_onnx_file_says_compile_it_first() -> None:
    import anekit
    from anekit.errors import AnekitError

    with pytest.raises(AnekitError) as caught:
        anekit.load(DIGITS)
    text = str(caught.value)
    assert "not a compiled program" in text and "load_or_compile" in text
    assert "NUL byte" not in text
