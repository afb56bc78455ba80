"""A target carries what the compiler reads of it; the program cache keys on that."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

import anekit
from anekit import targets
from anekit.compiler import estimate_model, load_or_compile
from anekit.runtime.cache import ProgramCache


def _model() -> anekit.Graph:
    x = anekit.input("x", (1, 8, 1, 16))
    w = np.random.default_rng(0).normal(size=(8, 8, 1, 1)).astype(np.float32)
    return anekit.graph([anekit.ops.relu(anekit.ops.conv2d(x, w), name="y")])


def test_the_compile_key_follows_the_figures_the_compiler_reads() -> None:
    m1, m4 = targets.get("m1"), targets.get("m4")
    assert m1.compile_key != m4.compile_key
    # a chip of the same generation with more cores compiles alike
    assert targets.get("m1-max").compile_key == m1.compile_key
    edited = replace(m4, features=replace(m4.features, softmax=not m4.features.softmax))
    assert edited.compile_key != m4.compile_key and edited.compile_id != m4.compile_id
    assert replace(m4, notes="another note").compile_id == m4.compile_id
    assert targets.DEFAULT_TARGET in targets.names()


def test_an_edited_target_gets_its_own_cache_entry(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import anekit.compiler as compiler

    compiled = []
    real = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda g, t, **o: compiled.append(1) or real(g, t))
    cache = ProgramCache(tmp_path / "cache")
    m4 = targets.get("m4")
    edited = replace(m4, limits=replace(m4.limits, min_io_bytes=m4.limits.min_io_bytes * 2))
    load_or_compile(_model(), m4, cache=cache)
    load_or_compile(_model(), "m4", cache=cache)  # the stock chip by name: a hit
    assert len(compiled) == 1
    load_or_compile(_model(), edited, cache=cache)  # the same name, other figures: compiled
    assert len(compiled) == 2


def test_estimates_compile_once_per_compile_key(monkeypatch) -> None:  # noqa: ANN001
    import anekit.compiler as compiler

    calls = []
    real = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda g, t, **o: calls.append(t.name) or real(g, t))
    chosen = [targets.get(n) for n in ("m1", "m1-max", "m4")]
    estimates = estimate_model(_model(), chosen)
    assert [e.target for e in estimates] == ["m1", "m1-max", "m4"]
    assert calls == ["m1", "m4"]
