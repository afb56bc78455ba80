"""LoRA adapters as program inputs: equal to merged weights (torch oracle), hot swap, PEFT
safetensors names, and refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import safetensors.torch as safetensors_torch
import torch

import anekit
from anekit.errors import InputError, ModelError
from tests.numerics import agreement

D, RANK, ALPHA = 64, 8, 16.0


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(D, D, bias=False)
        self.v_proj = torch.nn.Linear(D, D)
        self.o_proj = torch.nn.Linear(D, D, bias=False)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.o_proj(torch.relu(self.q_proj(x)) * self.v_proj(x))


def _block() -> _Block:
    torch.manual_seed(0)
    return _Block().eval()


X = np.random.default_rng(5).standard_normal((1, 16, D)).astype(np.float32)


def _compile(block: _Block) -> anekit.CompiledModel:
    g = anekit.from_torch(block, (torch.from_numpy(X),), ["x"], exporter="torchscript")
    return anekit.compile(
        g, "m4", lora=anekit.LoRA(rank=RANK, alpha=ALPHA, targets=["*q_proj*", "*v_proj*"])
    )


def _peft_adapter(seed: int, rank: int = RANK) -> dict[str, torch.Tensor]:
    """Tensors under PEFT's names and layouts: lora_A.weight [r, d_in], lora_B.weight [d_out, r]."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for layer in ("q_proj", "v_proj"):
        out[f"base_model.model.{layer}.lora_A.weight"] = torch.randn(rank, D, generator=g) * 0.1
        out[f"base_model.model.{layer}.lora_B.weight"] = torch.randn(D, rank, generator=g) * 0.1
    return out


def _merged_output(tensors: dict[str, torch.Tensor] | None) -> np.ndarray:
    """torch: the block with W + (alpha / r) B A merged into each adapted layer (PEFT's merge)."""
    block = _block()
    if tensors is not None:
        with torch.no_grad():
            for layer in ("q_proj", "v_proj"):
                a = tensors[f"base_model.model.{layer}.lora_A.weight"]
                b = tensors[f"base_model.model.{layer}.lora_B.weight"]
                getattr(block, layer).weight += (ALPHA / RANK) * (b @ a)
    with torch.no_grad():
        return block(torch.from_numpy(X)).numpy()


@pytest.fixture(scope="module")
def compiled() -> anekit.CompiledModel:
    return _compile(_block())


def _save(tensors: dict[str, torch.Tensor], path: Path) -> Path:
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return path


def test_adapter_inputs_and_base_output(compiled) -> None:  # noqa: ANN001
    names = [p.name for p in compiled.program.inputs]
    assert sorted(names) == [
        "q_proj.lora_A",
        "q_proj.lora_B",
        "v_proj.lora_A",
        "v_proj.lora_B",
        "x",
    ]
    sess = compiled.session("sim")
    base = sess.run({"x": X})  # no adapter: zeros, the base model
    out = next(iter(base.values()))
    assert agreement(out, _merged_output(None)).cosine > 0.9999


def test_adapters_equal_merged_weights_and_hot_swap(compiled, tmp_path: Path) -> None:  # noqa: ANN001
    sess = compiled.session("sim")
    identity = compiled.program.identity
    for seed in (1, 2, 1):  # swap, swap, and back
        tensors = _peft_adapter(seed)
        adapter = anekit.lora.load(_save(tensors, tmp_path / f"a{seed}.safetensors"))
        sess.set_adapter(adapter)
        out = next(iter(sess.run({"x": X}).values()))
        want = _merged_output(tensors)
        a = agreement(out, want)
        assert a.cosine > 0.9999 and np.abs(out - want).max() < 2e-2 * np.abs(want).max(), a
        assert agreement(out, _merged_output(None)).cosine < 0.9999  # the adapter matters
    assert compiled.program.identity == identity  # nothing recompiled
    sess.set_adapter(None)
    np.testing.assert_array_equal(
        next(iter(sess.run({"x": X}).values())),
        next(iter(compiled.session("sim").run({"x": X}).values())),
    )


def test_a_peft_directory_with_its_config(tmp_path: Path) -> None:
    _save(_peft_adapter(3), tmp_path / "adapter_model.safetensors")
    (tmp_path / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    adapter = anekit.lora.load(tmp_path)
    assert adapter.alpha == 16.0 and adapter.rank == RANK
    assert sorted(adapter.layers) == ["q_proj", "v_proj"]
    a, b = adapter.layers["q_proj"]
    assert a.shape == (D, RANK) and b.shape == (RANK, D)  # x A B orientation


def test_wrong_adapters_are_refused(compiled, tmp_path: Path) -> None:  # noqa: ANN001
    sess = compiled.session("sim")
    wrong_rank = anekit.lora.load(_save(_peft_adapter(1, rank=4), tmp_path / "r4.safetensors"))
    with pytest.raises(InputError, match="rank 4; the program was compiled for rank 8"):
        sess.set_adapter(wrong_rank)
    tensors = _peft_adapter(1)
    tensors["base_model.model.q_proj.lora_A.weight"] = torch.zeros(RANK, D + 1)
    with pytest.raises(InputError, match=r"layer 'q_proj' has A \[65, 8\].*takes A \[64, 8\]"):
        sess.set_adapter(anekit.lora.load(_save(tensors, tmp_path / "shape.safetensors")))
    tensors = _peft_adapter(1)
    del (
        tensors["base_model.model.v_proj.lora_A.weight"],
        tensors["base_model.model.v_proj.lora_B.weight"],
    )
    with pytest.raises(InputError, match="no matrices for 1 adapted layer.*v_proj"):
        sess.set_adapter(anekit.lora.load(_save(tensors, tmp_path / "half.safetensors")))
    extra = {**_peft_adapter(1), "base_model.model.k_proj.lora_A.weight": torch.zeros(RANK, D),
             "base_model.model.k_proj.lora_B.weight": torch.zeros(D, RANK)}  # fmt: skip
    with pytest.raises(InputError, match="'k_proj' is not one the program adapts"):
        sess.set_adapter(anekit.lora.load(_save(extra, tmp_path / "extra.safetensors")))
    bad = {"base_model.model.q_proj.weight": torch.zeros(2, 2)}
    with pytest.raises(anekit.FormatError, match="not a LoRA matrix"):
        anekit.lora.load(_save(bad, tmp_path / "bad.safetensors"))
    # and a session of the base model, compiled without LoRA, takes none
    plain = anekit.compile(anekit.graph([anekit.ops.relu(anekit.input("x", (1, 4)))]), "m4")
    with pytest.raises(InputError, match="takes no adapter"):
        plain.session("sim").set_adapter(wrong_rank)


def test_targets_that_match_nothing_are_refused() -> None:
    g = anekit.from_torch(_block(), (torch.from_numpy(X),), ["x"], exporter="torchscript")
    with pytest.raises(ModelError, match="no linear layer matches"):
        anekit.compile(g, "m4", lora=anekit.LoRA(targets=["*k_proj*"]))
