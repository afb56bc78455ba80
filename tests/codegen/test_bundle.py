"""The bundle builder converts a tied embedding once for both segments that store it, with the
same bytes as converting every weight on its own; the writer's files are the contents."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.codegen import bundle
from anekit.codegen.builder import cast_array
from anekit.codegen.weights import Conversions
from anekit.formats.blob import BlobReader
from anekit.frontend.builder.tensor import constant
from anekit.ir.graph import Graph

VOCAB, DIM = 4000, 32


def _tied_lm() -> tuple[Graph, np.ndarray]:
    """Embedding gather (a CPU segment) and an LM head on the same table (engine, in parts)."""
    table = np.random.default_rng(5).standard_normal((VOCAB, DIM)).astype(np.float32)
    wte = constant(table, name="wte")
    ids = anekit.input("ids", (1, 8), "int32")
    h = ops.relu(ops.embedding(ids, wte))
    return anekit.graph([ops.matmul(h, ops.transpose(wte, (1, 0)), name="logits")]), table


def _build(compiled: anekit.CompiledModel) -> bundle.BundleContents:
    return bundle.build_bundle(compiled.graph, compiled.target, compiled.segments)


def test_a_tied_embedding_is_converted_once_with_unchanged_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph, table = _tied_lm()
    compiled = anekit.compile(graph, "m4")
    assert [s.device for s in compiled.segments] == ["cpu", "ane"]
    converted: list[int] = []

    def counting(array: np.ndarray, dtype: str) -> np.ndarray:
        converted.append(array.size)
        return cast_array(array, dtype)

    monkeypatch.setattr(bundle, "cast_array", counting)
    shared = _build(compiled)  # every conversion is done when it returns
    shared_files = dict(shared.files)
    assert converted.count(table.size) == 1 and sum(converted) < 2 * table.size
    # the oracle: every request converted on its own (no sharing), as before
    monkeypatch.setattr(Conversions, "submit", lambda self, array, dtype: self._start(array, dtype))
    converted.clear()
    alone = _build(compiled)
    alone_files = dict(alone.files)
    assert sum(converted) >= 2 * table.size
    assert shared_files == alone_files
    assert shared.manifest == alone.manifest
    # and both segments hold the whole table, as fp16, in their own weight.bin (the engine's
    # LM head as row blocks, in order)
    for s in shared.manifest.segments:
        with BlobReader(shared.files[s.weights]) as reader:
            stored = np.concatenate([reader.read(r.offset) for r in reader.records()])
        assert stored.tobytes() == table.astype(np.float16).tobytes()


def test_written_files_are_the_contents_with_their_digests(tmp_path: Path) -> None:
    graph, _ = _tied_lm()
    contents = _build(anekit.compile(graph, "m1"))
    out = bundle.write_bundle(contents, tmp_path / "lm.anekit")
    written = {
        str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }
    assert written == dict(contents.files)
    for rel, entry in contents.manifest.files.items():
        assert hashlib.sha256(written[rel]).hexdigest() == entry.sha256
        assert len(written[rel]) == entry.size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm.anekit"]


def test_a_failed_conversion_surfaces_in_the_write_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, _ = _tied_lm()
    compiled = anekit.compile(graph, "m4")

    def failing(array: np.ndarray, dtype: str) -> np.ndarray:
        raise MemoryError("no room for the weights")

    monkeypatch.setattr(bundle, "cast_array", failing)
    contents = _build(compiled)  # the failure is kept in the weight file's data
    with pytest.raises(MemoryError, match="no room"):
        bundle.write_bundle(contents, tmp_path / "lm.anekit")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(MemoryError, match="no room"):
        contents.manifest  # noqa: B018 - the digests never come


def test_a_failed_emission_stops_the_conversions(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, _ = _tied_lm()
    compiled = anekit.compile(graph, "m4")
    calls = []
    real = bundle.emit_segment

    def second_fails(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("lowering failed")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bundle, "emit_segment", second_fails)
    with pytest.raises(RuntimeError, match="lowering failed"):
        _build(compiled)
    workers = [t for t in threading.enumerate() if t.name.startswith("anekit-")]
    for t in workers:  # queued conversions were cancelled: the threads end on their own
        t.join(timeout=30)
    assert not [t for t in workers if t.is_alive()]


def test_no_worker_thread_outlives_build_bundle() -> None:
    graph, _ = _tied_lm()
    compiled = anekit.compile(graph, "m4")
    before = {t.ident for t in threading.enumerate()}
    contents = _build(compiled)
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []
    assert all(not isinstance(f.digest, Future) or f.digest.done() for f in contents.payload.values())
