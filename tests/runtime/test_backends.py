"""The backend seam: one registry, and every backend name means the same thing everywhere."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.errors import AnekitError
from anekit.runtime import backends
from anekit.runtime.backends import Backend, SegmentSource
from anekit.runtime.backends.sim import SimRunner


def _model() -> anekit.Graph:
    x = anekit.input("x", (1, 8, 1, 16))
    w = np.random.default_rng(0).normal(size=(8, 8, 1, 1)).astype(np.float32)
    return anekit.graph([anekit.ops.relu(anekit.ops.conv2d(x, w), name="y")])


def test_registry_lists_each_backend_once_with_what_it_runs() -> None:
    names = backends.names()
    assert {"reference", "sim", "sim-fp32"} <= set(names)
    assert list(names) == sorted(names)
    assert "reference" in backends.graph_backends()
    assert "reference" not in backends.segment_backends()
    assert {"sim", "sim-fp32"} <= set(backends.segment_backends())
    for name in names:
        backend = backends.get(name)
        assert isinstance(backend, Backend) and backend.name == name and backend.summary
        assert backend.runs_graphs or backend.runs_segments or backend.runs_hwx, name


def test_unknown_backend_names_the_choices() -> None:
    with pytest.raises(AnekitError) as err:
        backends.get("gpu")
    assert "unknown backend 'gpu'" in str(err.value)
    for name in backends.names():
        assert name in err.value.hint


def test_one_name_one_meaning_on_compiled_models_and_programs() -> None:
    """reference = the fp32 graph; sim = fp16 MIL; sim-fp32 = the same MIL in fp32."""
    g = _model()
    feeds = {"x": np.random.default_rng(1).normal(size=(1, 8, 1, 16)).astype(np.float32)}
    cm = anekit.compile(g, "m4")
    exact = g.run(feeds)["y"]
    np.testing.assert_array_equal(cm.run(feeds, "reference")["y"], cm.graph.run(feeds)["y"])
    np.testing.assert_allclose(cm.run(feeds, "reference")["y"], exact, rtol=1e-5, atol=1e-5)
    for name in ("sim", "sim-fp32"):
        via_model = cm.run(feeds, name)["y"]
        np.testing.assert_array_equal(via_model, cm.program.run(feeds, name)["y"])
    sim, wide = cm.run(feeds, "sim")["y"], cm.run(feeds, "sim-fp32")["y"]
    # fp16 storage rounds every value to fp16; the widened program does not
    assert np.array_equal(sim, sim.astype(np.float16).astype(np.float32))
    assert not np.array_equal(wide, wide.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(sim, exact, rtol=2e-2, atol=2e-2)
    with pytest.raises(AnekitError, match="runs graphs, not compiled programs"):
        cm.program.run(feeds, "reference")


def test_a_new_backend_is_one_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment backend gets a SegmentSource per segment and runs through the protocol."""
    seen: list[SegmentSource] = []

    class Doubling(Backend):
        name = "doubling"
        summary = "sim, then every output doubled"
        runs_segments = True

        def prepare(self, segment: SegmentSource) -> SimRunner:
            seen.append(segment)
            inner = backends.get("sim").prepare(segment)

            class Runner:
                def run(self, args):  # noqa: ANN001, ANN202
                    return {k: v * 2 for k, v in inner.run(args).items()}

            return Runner()

    registry = dict(backends._registry())
    registry["doubling"] = Doubling()
    monkeypatch.setattr(backends, "_registry", lambda: registry)
    cm = anekit.compile(_model(), "m1")
    feeds = {"x": np.ones((1, 8, 1, 16), np.float32)}
    doubled = cm.run(feeds, "doubling")["y"]
    np.testing.assert_array_equal(doubled, 2 * cm.run(feeds, "sim")["y"])
    assert [s.entry.index for s in seen] == [s.index for s in cm.program.segments]


def test_unavailable_backend_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    class Elsewhere(Backend):
        name = "elsewhere"
        summary = "needs hardware"
        runs_segments = True

        def unavailable(self) -> str | None:
            return "it needs a machine this is not"

    registry = dict(backends._registry())
    registry["elsewhere"] = Elsewhere()
    monkeypatch.setattr(backends, "_registry", lambda: registry)
    cm = anekit.compile(_model(), "m1")
    with pytest.raises(AnekitError, match="cannot run here: it needs a machine this is not"):
        cm.run({"x": np.ones((1, 8, 1, 16), np.float32)}, "elsewhere")
    assert ("elsewhere", "needs hardware", "it needs a machine this is not") in backends.describe()


def test_cli_takes_its_choices_from_the_registry(tmp_path, capsys) -> None:  # noqa: ANN001
    from anekit.cli import main

    cm = anekit.compile(_model(), "m1")
    bundle = cm.save(tmp_path / "m.anekit")
    np.save(tmp_path / "x.npy", np.ones((1, 8, 1, 16), np.float32))
    for name in backends.segment_backends():
        # a backend this machine lacks (ane off a Mac) is refused as the user's problem
        expected = 0 if backends.get(name).unavailable() is None else 2
        run = ["run", str(bundle), "-i", f"x={tmp_path / 'x.npy'}", "--backend", name]
        assert main(run) == expected
    assert (
        main(["run", str(bundle), "-i", f"x={tmp_path / 'x.npy'}", "--backend", "reference"]) == 2
    )
    err = capsys.readouterr().err
    assert "backend 'reference' runs graphs; a bundle is a compiled program" in err
