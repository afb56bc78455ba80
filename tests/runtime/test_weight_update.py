"""Weight updates without recompiling: names, equality with a fresh compile, identity, checks,
live sessions, and atomicity (a journal, and SIGKILL at random moments)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.codegen.weight_map import WEIGHT_MAP
from anekit.errors import FormatError, InputError, ModelError
from anekit.formats.bundle import sha256_file
from anekit.runtime import load, weight_update


def _mlp_onnx(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """x[1,64] -> MatMul fc1 -> +bias -> Relu -> MatMul fc2 -> y; conv+BN on a second path."""
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["y"]),
        helper.make_node("Conv", ["img", "conv.weight"], ["c0"]),
        helper.make_node(
            "BatchNormalization", ["c0", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["z"]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 8, 4, 4]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 4, 4]),
        ],
        [numpy_helper.from_array(a, name) for name, a in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = np.float32
    return {
        "fc1.weight": (rng.standard_normal((64, 128)) * 0.2).astype(f),
        "fc1.bias": (rng.standard_normal(128) * 0.1).astype(f),
        "fc2.weight": (rng.standard_normal((128, 32)) * 0.2).astype(f),
        "conv.weight": (rng.standard_normal((16, 8, 1, 1)) * 0.3).astype(f),
        "bn.scale": rng.uniform(0.5, 1.5, 16).astype(f),
        "bn.bias": rng.standard_normal(16).astype(f),
        "bn.mean": rng.standard_normal(16).astype(f),
        "bn.var": rng.uniform(0.5, 2, 16).astype(f),
    }


FEEDS = {
    "x": np.random.default_rng(7).standard_normal((1, 64)).astype(np.float32),
    "img": np.random.default_rng(8).standard_normal((1, 8, 4, 4)).astype(np.float32),
}


def _compile(weights: dict[str, np.ndarray]) -> anekit.CompiledModel:
    return anekit.compile(_mlp_onnx(weights), "m4")


def test_weight_names_are_the_onnx_initializers_that_can_change_in_place() -> None:
    program = _compile(_weights(0)).program
    assert sorted(program.weight_names()) == ["fc1.bias", "fc1.weight", "fc2.weight"]
    fixed = program.weight_map().fixed
    assert "folded" in fixed["conv.weight"]  # the batch norm was folded into the conv
    assert all("folded" in fixed[f"bn.{k}"] for k in ("scale", "bias", "mean", "var"))
    with pytest.raises(ModelError, match="'conv.weight' cannot be updated in place.*folded"):
        program.update_weights({"conv.weight": np.zeros((16, 8, 1, 1))})


@pytest.mark.parametrize("on_disk", [False, True])
def test_update_then_run_equals_a_fresh_compile(tmp_path: Path, on_disk: bool) -> None:
    old, new = _weights(0), _weights(1)
    compiled = _compile(old)
    program = load(compiled.save(tmp_path / "m.anekit")) if on_disk else compiled.program
    mil_before = (
        [(tmp_path / "m.anekit" / s.program).read_bytes() for s in program.segments]
        if on_disk
        else None
    )
    identity = program.identity
    before = program.run(FEEDS)
    changed = {k: new[k] for k in program.weight_names()}
    report = program.update_weights(changed)
    assert report.names == tuple(changed) and report.took_effect == {"sim": True}
    fresh_weights = {**old, **changed}
    fresh = _compile(fresh_weights).program.run(FEEDS)
    after = program.run(FEEDS)
    assert not np.array_equal(after["y"], before["y"])
    for name in fresh:
        np.testing.assert_array_equal(after[name], fresh[name])  # the same bits
    assert program.identity == identity
    if on_disk:
        root = tmp_path / "m.anekit"
        assert [(root / s.program).read_bytes() for s in program.segments] == mil_before
        reloaded = load(root)  # digests verified: the manifest was updated
        assert reloaded.identity == identity
        for name in fresh:
            np.testing.assert_array_equal(reloaded.run(FEEDS)[name], fresh[name])
        assert not any(p.name.endswith(".anekit-new") for p in root.rglob("*"))


def test_a_live_session_picks_the_update_up(tmp_path: Path) -> None:
    old, new = _weights(0), _weights(1)
    program = load(_compile(old).save(tmp_path / "m.anekit"))
    sess = program.session("sim")
    first = sess.run(FEEDS)
    program.update_weights({"fc2.weight": new["fc2.weight"]})
    second = sess.run(FEEDS)
    fresh = _compile({**old, "fc2.weight": new["fc2.weight"]}).program.run(FEEDS)
    np.testing.assert_array_equal(second["y"], fresh["y"])
    assert not np.array_equal(first["y"], second["y"])
    np.testing.assert_array_equal(second["z"], first["z"])


def test_bad_updates_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = _compile(_weights(0)).save(tmp_path / "m.anekit")
    program = load(path)
    stamp = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    with pytest.raises(
        InputError, match=r"'fc1.weight' has shape \[128, 64\], the weight is \[64, 128\]"
    ):
        program.update_weights({"fc1.weight": np.zeros((128, 64))})
    with pytest.raises(InputError, match="(?s)no weight 'nope'.*weight_names"):
        program.update_weights({"nope": np.zeros(3)})
    with pytest.raises(InputError, match="dtype <U1"):
        program.update_weights({"fc1.bias": np.array(["a"] * 128)})
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == stamp


def test_a_tampered_weight_map_is_refused(tmp_path: Path) -> None:
    path = _compile(_weights(0)).save(tmp_path / "m.anekit")
    data = json.loads((path / WEIGHT_MAP).read_text())
    data["weights"]["fc1.weight"]["placements"][0]["start"] = 64 * 128  # past the end
    (path / WEIGHT_MAP).write_text(json.dumps(data))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][WEIGHT_MAP] = {"sha256": sha256_file(path / WEIGHT_MAP),
                                     "size": (path / WEIGHT_MAP).stat().st_size}  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))
    program = load(path)  # a consistent bundle: the map itself must be checked
    with pytest.raises(FormatError, match="does not lie inside"):
        program.weight_names()


# --- atomicity ----------------------------------------------------------------------------


def _outputs_of(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return _compile(weights).program.run(FEEDS)


def _state_of(path: Path, old: dict, new: dict) -> str:
    got = load(path).run(FEEDS)  # recovers, then verifies every digest
    for label, outputs in (("old", old), ("new", new)):
        if all(np.array_equal(got[k], outputs[k]) for k in outputs):
            return label
    raise AssertionError("the bundle holds neither the old nor the new weights")


def test_a_crash_after_the_commit_point_is_rolled_forward(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    old, new = _weights(0), _weights(1)
    path = _compile(old).save(tmp_path / "m.anekit")
    changed = {k: new[k] for k in ("fc1.weight", "fc2.weight")}

    def killed(*args):  # noqa: ANN002
        raise KeyboardInterrupt  # as if killed right after the journal was put in place

    monkeypatch.setattr(weight_update, "_finish", killed)
    with pytest.raises(KeyboardInterrupt):
        load(path).update_weights(changed)
    monkeypatch.undo()
    assert (path / weight_update.JOURNAL).exists()
    assert _state_of(path, _outputs_of(old), _outputs_of({**old, **changed})) == "new"
    assert not (path / weight_update.JOURNAL).exists()


def test_a_crash_before_the_commit_point_leaves_the_old_bundle(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    old, new = _weights(0), _weights(1)
    path = _compile(old).save(tmp_path / "m.anekit")
    real = os.replace

    def replace(src, dst):  # noqa: ANN001
        if str(dst).endswith(weight_update.JOURNAL):
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(weight_update.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        load(path).update_weights({"fc1.weight": new["fc1.weight"]})
    monkeypatch.undo()
    assert any(p.name.endswith(".anekit-new") for p in path.rglob(".*"))
    assert _state_of(path, _outputs_of(old), _outputs_of(new)) == "old"
    assert not any(p.name.endswith(".anekit-new") for p in path.rglob(".*"))  # cleared


_WRITER = """
import sys, numpy as np
from anekit.runtime import load
program = load(sys.argv[1])
a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
print("ready", flush=True)
i = 0
while True:
    program.update_weights({"w": a if i % 2 else b}, verify=False)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_old_or_new(tmp_path: Path) -> None:
    """A process updating a 4 MiB weight in a loop is killed at random moments; every time
    the bundle loads (digests verified) holding one of the two values, never a mixture."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1024, 2048)).astype(np.float32)
    b = rng.standard_normal((1024, 2048)).astype(np.float32)
    x = anekit.input("x", (1, 1024))
    build = lambda w: anekit.graph([anekit.ops.matmul(x, anekit.constant(w, name="w"), name="y")])  # noqa: E731
    feeds = {"x": rng.standard_normal((1, 1024)).astype(np.float32)}
    expect = {
        k: anekit.compile(build(w), "m4").program.run(feeds)["y"] for k, w in (("a", a), ("b", b))
    }
    path = anekit.compile(build(a), "m4").save(tmp_path / "m.anekit")
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    seen = set()
    for delay in rng.uniform(0.05, 0.6, 6):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(tmp_path / "a.npy"), str(tmp_path / "b.npy")],
            stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(float(delay))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = load(path).run(feeds)["y"]
        matches = [k for k, v in expect.items() if np.array_equal(got, v)]
        assert len(matches) == 1, "a mixture of old and new weights"
        seen.add(matches[0])
    assert not any(p.name.endswith(".anekit-new") for p in path.rglob(".*"))
