"""The program cache: hits without compiling, LRU eviction by size, concurrent writers, CLI."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.cli import main
from anekit.compiler import load_or_compile
from anekit.runtime import cache as cache_module
from anekit.runtime.cache import ProgramCache


def _model(seed: int, n: int = 64) -> anekit.Graph:
    w = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    x = anekit.input("x", (1, n))
    return anekit.graph([anekit.ops.relu(anekit.ops.matmul(x, w), name="y")])


FEEDS = {"x": np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)}


def test_compiling_the_same_model_twice_is_a_hit(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    cache = ProgramCache(tmp_path)
    first = load_or_compile(_model(0), "m4", cache=cache)
    expected = first.run(FEEDS)

    def no_compile(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("a cache hit must not compile")

    monkeypatch.setattr("anekit.compiler.compile", no_compile)
    second = load_or_compile(_model(0), "m4", cache=cache)  # an equal graph built anew
    assert second.cache_key == first.cache_key
    np.testing.assert_array_equal(second.run(FEEDS)["y"], expected["y"])
    assert second.identity == first.identity
    assert second.weight_names() == first.weight_names()
    monkeypatch.undo()
    # other weights or another target are other entries; other options that emit the
    # same programs compile again (another source key) into the same entry (same content)
    other_weights = load_or_compile(_model(1), "m4", cache=cache).cache_key
    other_target = load_or_compile(_model(0), "m1", cache=cache).cache_key
    same_code = load_or_compile(_model(0), "m4", cache=cache, fold_limit=3).cache_key
    assert len({first.cache_key, other_weights, other_target}) == 3
    assert same_code == first.cache_key
    assert cache.info().entries == 3


def test_a_cached_program_updates_its_weights_in_memory_only(tmp_path: Path) -> None:
    cache = ProgramCache(tmp_path)
    program = load_or_compile(_model(0), "m4", cache=cache)
    w = program.weight_names()[0]
    program.update_weights({w: np.zeros((64, 64), np.float32)})
    assert not program.run(FEEDS)["y"].any()
    again = cache.get(program.cache_key)  # the entry still holds what was compiled
    assert again.run(FEEDS)["y"].any()


def test_least_recently_used_entries_are_evicted(tmp_path: Path) -> None:
    probe = ProgramCache(tmp_path / "probe")
    load_or_compile(_model(0, 128), "m4", cache=probe)
    size = probe.info().bytes  # one entry's size (all three models are the same size)
    cache = ProgramCache(tmp_path / "c", max_bytes=int(size * 2.5))
    a = load_or_compile(_model(0, 128), "m4", cache=cache).cache_key
    b = load_or_compile(_model(1, 128), "m4", cache=cache).cache_key
    os.utime(tmp_path / "c" / "entries" / b / ".used", (1, 1))  # b: used long ago
    os.utime(tmp_path / "c" / "entries" / a / ".used", (2, 2))
    assert cache.get(a) is not None  # a: used now
    c = load_or_compile(_model(2, 128), "m4", cache=cache).cache_key
    assert cache.get(b) is None and cache.get(a) is not None and cache.get(c) is not None
    assert cache.info().bytes <= cache.max_bytes
    assert cache.lookup_source(cache_module.source_key(_model(1, 128), "m4", {})) is None


def _writer(directory: str, seed: int, out) -> None:  # noqa: ANN001
    program = load_or_compile(_model(seed % 2), "m4", cache=ProgramCache(directory))
    out.put((seed, program.cache_key, program.run(FEEDS)["y"].tolist()))


def test_concurrent_writers(tmp_path: Path) -> None:
    """Four processes compile two models into one cache at once: every entry is whole."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i, out)) for i in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    keys = {seed % 2: key for seed, key, _ in results}
    assert all(keys[seed % 2] == key for seed, key, _ in results)
    cache = ProgramCache(tmp_path)
    assert cache.info().entries == 2
    for parity, key in keys.items():
        program = cache.get(key)  # digests verified
        np.testing.assert_array_equal(
            program.run(FEEDS)["y"], anekit.compile(_model(parity), "m4").program.run(FEEDS)["y"]
        )
    leftovers = [p for p in tmp_path.rglob(".*")
                 if p.name not in (".lock", ".used") and not p.name.startswith(".from-")]
    assert leftovers == []


def test_cli_info_and_clear(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("ANEKIT_CACHE_DIR", str(tmp_path))
    load_or_compile(_model(0), "m4")
    assert main(["cache", "info"]) == 0
    assert "entries    1" in capsys.readouterr().out
    (tmp_path / "mine.txt").write_text("not anekit's")
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert (tmp_path / "mine.txt").read_text() == "not anekit's"
    assert ProgramCache().info().entries == 0
    monkeypatch.setenv("ANEKIT_CACHE_MAX_BYTES", "lots")
    assert main(["cache", "info"]) == 2
    assert "ANEKIT_CACHE_MAX_BYTES" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["../x", "0" * 63])
def test_keys_are_checked(tmp_path: Path, bad: str) -> None:
    with pytest.raises(anekit.AnekitError, match="not a cache key"):
        ProgramCache(tmp_path).get(bad)
