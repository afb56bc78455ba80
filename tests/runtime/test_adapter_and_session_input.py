"""LoRA adapters and sessions under careless input: alpha from adapter_config.json (PEFT's
merge as the oracle), non-finite or missing settings, adapters as mappings of the wrong
shape, reads within the memory budget, and session arguments of the wrong kind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import anekit
from anekit.errors import AnekitError, FormatError, InputError, MemoryBudgetError, PathError
from tests.numerics import agreement
from tests.runtime.test_lora import RANK, X, _block, _peft_adapter, _save, compiled  # noqa: F401


def _merged(tensors: dict[str, torch.Tensor], alpha: float) -> np.ndarray:
    """PEFT's merge, W + (alpha / r) B A, with the adapter's own alpha."""
    block = _block()
    with torch.no_grad():
        for layer in ("q_proj", "v_proj"):
            a = tensors[f"base_model.model.{layer}.lora_A.weight"]
            b = tensors[f"base_model.model.{layer}.lora_B.weight"]
            getattr(block, layer).weight += (alpha / RANK) * (b @ a)
        return block(torch.from_numpy(X)).numpy()


def _peft_dir(tmp_path: Path, tensors, config) -> Path:  # noqa: ANN001
    folder = tmp_path / "adapter"
    folder.mkdir()
    _save(tensors, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return folder


def test_the_adapters_lora_alpha_is_the_one_computed(compiled, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """A program compiled for alpha 16, given an adapter trained with lora_alpha 64:
    the output is PEFT's merged model at 64, not at 16."""
    tensors = _peft_adapter(3)
    adapter = anekit.lora.load(_peft_dir(tmp_path, tensors, {"lora_alpha": 64, "r": RANK}))
    assert adapter.alpha == 64.0
    sess = compiled.session("sim")
    sess.set_adapter(adapter)
    out = next(iter(sess.run({"x": X}).values()))
    want, wrong = _merged(tensors, 64.0), _merged(tensors, 16.0)
    assert agreement(out, want).cosine > 0.9999
    assert np.abs(out - want).max() < 2e-2 * np.abs(want).max()
    assert np.abs(out - wrong).max() > 10 * np.abs(out - want).max()


@pytest.mark.parametrize("config", [{"lora_alpha": float("nan")}, {"lora_alpha": "16"},
                                    {"lora_alpha": -2}, {"r": 8}, [1, 2], "{not json"])  # fmt: skip
def test_an_unusable_lora_alpha_is_refused(tmp_path: Path, config) -> None:  # noqa: ANN001
    folder = _peft_dir(tmp_path, _peft_adapter(4), config)
    with pytest.raises(FormatError, match="lora_alpha"):
        anekit.lora.load(folder)


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"alpha": None}, "alpha must be a number"), ({"alpha": float("nan")}, "finite"),
     ({"alpha": 0}, "above 0"), ({"targets": [5]}, "targets"), ({"targets": "q_proj"}, "targets"),
     ({"targets": []}, "targets"), ({"rank": 2.5}, "rank")],
)  # fmt: skip
def test_lora_settings_are_checked(kw: dict, match: str) -> None:
    with pytest.raises(AnekitError, match=match):
        anekit.LoRA(**kw)


def test_lora_load_takes_a_path(tmp_path: Path) -> None:
    with pytest.raises(PathError, match="must be a path"):
        anekit.lora.load(12345)
    with pytest.raises(AnekitError, match="no adapter file"):
        anekit.lora.load(tmp_path / "none.safetensors")


def test_adapters_as_mappings(compiled) -> None:  # noqa: ANN001, F811
    sess = compiled.session("sim")
    rng = np.random.default_rng(0)
    good = {layer: (rng.standard_normal((64, RANK)).astype(np.float32) * 0.1,
                    rng.standard_normal((RANK, 64)).astype(np.float32) * 0.1)
            for layer in ("q_proj", "v_proj")}  # fmt: skip
    sess.set_adapter(good)  # a plain mapping works like an Adapter
    adapted = next(iter(sess.run({"x": X}).values()))
    sess.set_adapter(anekit.lora.Adapter(good))
    np.testing.assert_array_equal(next(iter(sess.run({"x": X}).values())), adapted)
    wrong_shape = {**good, "q_proj": (good["q_proj"][0][:10], good["q_proj"][1])}
    ragged = {**good, "v_proj": ([[1.0, 2.0], [3.0]], good["v_proj"][1])}
    for bad, match in ((wrong_shape, "has A"), (ragged, "not an array"),
                       ({"q_proj": good["q_proj"]}, "no matrices"), ({"q_proj": 5}, "pair"),
                       ({**good, "q_proj": (good["q_proj"][0] * np.nan, good["q_proj"][1])}, "NaN"),
                       ([1, 2], "mapping"), ("adapter.safetensors", "mapping")):  # fmt: skip
        with pytest.raises(InputError, match=match):
            sess.set_adapter(bad)
    # the session still holds the last adapter it accepted
    np.testing.assert_array_equal(next(iter(sess.run({"x": X}).values())), adapted)


def test_adapter_reads_stay_within_the_memory_budget(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    big = {"base_model.model.q_proj.lora_A.weight": torch.zeros(8, 1 << 20),
           "base_model.model.q_proj.lora_B.weight": torch.zeros(64, 8)}  # fmt: skip
    path = _save(big, tmp_path / "big.safetensors")  # 32 MiB
    monkeypatch.setenv("ANEKIT_MAX_MEMORY", "40M")
    with pytest.raises(MemoryBudgetError, match="decoding the adapter's tensors needs"):
        anekit.lora.load(path)
    # an adapter_config.json of 3 GiB (sparse): refused by its size, never read
    folder = _peft_dir(tmp_path, _peft_adapter(5), {"lora_alpha": 16})
    with open(folder / "adapter_config.json", "r+b") as f:
        f.truncate(3 << 30)
    start = time.perf_counter()
    with pytest.raises(FormatError, match="adapter_config.json is"):
        anekit.lora.load(folder)
    assert time.perf_counter() - start < 5


def test_session_arguments_of_the_wrong_kind(compiled) -> None:  # noqa: ANN001, F811
    sess = compiled.session("sim")
    with pytest.raises(InputError, match="mapping"):
        sess.seed([1, 2])
    with pytest.raises(InputError, match="generator of feeds"):
        sess.run_steps(2, ({"x": X} for _ in range(2)))
    with pytest.raises(InputError, match="not a mapping"):
        sess.run_steps(2, [{"x": X}, [X]])
    with pytest.raises(InputError, match="not a mapping"):
        sess.run([X])
    start = time.perf_counter()
    with pytest.raises(MemoryBudgetError, match=r"run_steps\(1000000000\) keeping and stacking"):
        sess.run_steps(10**9, {"x": X})
    assert time.perf_counter() - start < 5  # refused before the first step
    out = sess.run_steps(3, {"x": X})  # and the session still runs
    assert next(iter(out.values())).shape[0] == 3


def test_chained_adapted_layers_compile_and_compute_the_merged_model() -> None:
    """Two adapted layers in a row (the second reads the first's output): each takes its
    own adapter, as the merged weights W + (alpha / r) A B compute (numpy oracle)."""
    rng = np.random.default_rng(6)
    d, r, alpha = 16, 4, 8.0
    w1, w2 = (rng.standard_normal((d, d)).astype(np.float32) * 0.3 for _ in range(2))
    x = anekit.input("x", (1, d))
    h = anekit.ops.matmul(x, anekit.constant(w1, name="l0.q_proj.weight"), name="q")
    y = anekit.ops.matmul(h, anekit.constant(w2, name="l0.v_proj.weight"), name="v")
    chained = anekit.compile(anekit.graph([y]), "m4", lora=anekit.LoRA(rank=r, alpha=alpha))
    mats = {layer: (rng.standard_normal((d, r)).astype(np.float32) * 0.2,
                    rng.standard_normal((r, d)).astype(np.float32) * 0.2)
            for layer in ("l0.q_proj", "l0.v_proj")}  # fmt: skip
    sess = chained.session("sim-fp32")
    sess.set_adapter(mats)
    feed = rng.standard_normal((1, d)).astype(np.float32)
    out = next(iter(sess.run({"x": feed}).values()))
    (a1, b1), (a2, b2) = mats["l0.q_proj"], mats["l0.v_proj"]
    want = feed @ (w1 + alpha / r * a1 @ b1) @ (w2 + alpha / r * a2 @ b2)
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_a_saved_bundle_remembers_its_lora_alpha(compiled, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """The alpha a program was compiled for travels in its bundle: loaded in a new process's
    way (from disk), an adapter trained with lora_alpha 64 still gives PEFT's merge at 64."""
    compiled.save(tmp_path / "m.anekit")
    loaded = anekit.load(tmp_path / "m.anekit")
    assert loaded.lora_alpha == compiled.program.lora_alpha is not None
    tensors = _peft_adapter(6)
    sess = loaded.session("sim")
    sess.set_adapter(anekit.lora.load(_peft_dir(tmp_path, tensors, {"lora_alpha": 64, "r": RANK})))
    out = next(iter(sess.run({"x": X}).values()))
    want = _merged(tensors, 64.0)
    assert agreement(out, want).cosine > 0.9999
    assert np.abs(out - want).max() < 2e-2 * np.abs(want).max()


def test_an_adapters_alpha_is_refused_where_the_programs_is_unknown(compiled, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """A program that does not record its LoRA alpha (a bare MIL file) cannot rescale an
    adapter trained with another: refused, never silently computed at the wrong scale."""
    compiled.save(tmp_path / "m.anekit")
    bare = anekit.load(tmp_path / "m.anekit")
    bare.lora_alpha = None  # as a program whose report says nothing
    adapter = anekit.lora.load(_peft_dir(tmp_path, _peft_adapter(7), {"lora_alpha": 64, "r": RANK}))
    with pytest.raises(InputError, match="does not record the alpha"):
        bare.session("sim").set_adapter(adapter)
