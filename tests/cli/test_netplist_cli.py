"""`anekit inspect FILE.plist` and `anekit run FILE.plist` through the CLI entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest

from anekit.cli import main
from anekit.formats import netplist
from tests.fixtures import FIXTURES

NETPLIST_DIR = FIXTURES / "netplist"
PLISTS = sorted(NETPLIST_DIR.glob("**/*.plist"))
PLIST_IDS = [str(p.relative_to(NETPLIST_DIR)) for p in PLISTS]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("path", PLISTS, ids=PLIST_IDS)
def test_inspect_json_of_every_fixture(capsys, path):
    code, out, err = cli(capsys, "inspect", str(path), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["kind"] == "netplist" and doc["version"] == "1.0.9"
    (net,) = doc["networks"]
    assert {"inputs", "outputs", "units", "weights", "graph"} <= set(net)
    assert all({"name", "type", "bottoms", "params", "weights"} <= set(u) for u in net["units"])


def test_inspect_tree(capsys):
    code, out, err = cli(capsys, "inspect", str(NETPLIST_DIR / "net.plist"))
    assert code == 0 and err == ""
    assert "net.plist: netplist 1.0.9, 1 network(s)" in out
    assert "image: Float16 [N 1 C 3 H 1 W 1]" in out
    assert "probs_tmp_0: Conv ← image → conv → fp16[1x2x1x1]" in out
    assert "kernel: 6 × fp32 (24 bytes) at offset 192 of [0] model.espresso.weights" in out
    assert "reads into a graph that runs on the reference backend" in out


def test_inspect_tree_names_missing_weight_files(capsys):
    code, out, _ = cli(capsys, "inspect", str(NETPLIST_DIR / "simple" / "gemm.plist"))
    assert code == 0
    assert "[0] /tmp/zero: does not exist here" in out
    assert "does not read into a runnable graph" in out


def test_inspect_a_broken_netplist_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.plist"
    bad.write_bytes((NETPLIST_DIR / "net.plist").read_bytes()[:700])
    code, out, err = cli(capsys, "inspect", str(bad), "--json")
    assert code == 2 and out == ""
    assert "not a readable property list" in err and "line" in err


def test_run_a_netplist(capsys, tmp_path):
    x = np.array([1.0, 2.0, 3.0], np.float32).reshape(1, 3, 1, 1)
    np.save(tmp_path / "image.npy", x)
    out_file = tmp_path / "out.npz"
    code, out, err = cli(
        capsys,
        "run",
        str(NETPLIST_DIR / "net.plist"),
        "--input",
        f"image={tmp_path / 'image.npy'}",
        "-o",
        str(out_file),
    )
    assert code == 0 and err == ""
    assert "probs  float16[1x2x1x1] = [19., 19.]" in out  # 3 * (1 + 2 + 3) + 1 per channel
    saved = np.load(out_file)
    expected = netplist.read(NETPLIST_DIR / "net.plist").run({"image": x})
    np.testing.assert_array_equal(saved["probs"], expected["probs"])


def test_run_a_netplist_with_several_inputs_and_outputs(capsys, tmp_path):
    data = np.arange(36, dtype=np.float32).reshape(1, 9, 2, 2)
    np.save(tmp_path / "data.npy", data)
    code, out, _ = cli(
        capsys,
        "run",
        str(NETPLIST_DIR / "plists" / "inputview.plist"),
        "-i",
        f"data={tmp_path / 'data.npy'}",
    )
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["out_2", "out_1", "out_0"]
    assert "out_0  float16[1x3x2x2]  min 0  mean 5.5  max 11" in out


@pytest.mark.parametrize(
    ("plist", "extra", "message"),
    [
        ("simple/gemm.plist", [], "weight file '/tmp/zero'"),
        ("net.plist", ["--backend", "sim"], "backend 'sim' runs compiled programs; a netplist is a graph"),
        ("net.plist", ["--shape", "image=1x3x1x1"], "input shapes are fixed by the file"),
        ("net.plist", [], "missing input(s) ['image']"),
        (
            "net.plist",
            ["-i", "image=WRONG"],
            "has shape [1, 3, 2, 1], but the model expects [1, 3, 1, 1]",
        ),
    ],
)
def test_run_errors_exit_2_with_one_message(capsys, tmp_path, plist, extra, message):
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 2, 1), np.float32))
    extra = [e.replace("WRONG", str(tmp_path / "wrong.npy")) for e in extra]
    code, out, err = cli(capsys, "run", str(NETPLIST_DIR / plist), *extra)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert err.count("anekit run: error:") == 1
