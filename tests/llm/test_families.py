"""Mistral and Qwen2 (grouped-query attention, query/key/value biases, untied and tied heads)
and a GPT-2 whose vocabulary head is split: prefill and decode logits against transformers
on small random checkpoints written by save_pretrained."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import transformers

import anekit.llm
from anekit import targets
from anekit.llm.graph import head_chunks


def save(tmp_path, config) -> object:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger than the default init, so logits are not all near zero
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(3.0)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model


CONFIGS = {
    "mistral": lambda: transformers.MistralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64,
        sliding_window=None, tie_word_embeddings=False),
    "qwen2": lambda: transformers.Qwen2Config(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, rope_theta=1e6),
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_prefill_and_decode_logits_match_transformers(family: str, tmp_path) -> None:
    hf = save(tmp_path, CONFIGS[family]())
    model = anekit.llm.load(tmp_path, max_context=32)
    assert model.config.family == family
    prompt = [5, 17, 42, 3, 88, 61, 9]
    result = model.generate(prompt, max_new_tokens=6, stop_at_eos=False, return_logits=True)
    ids = torch.tensor([prompt + result.token_ids])
    with torch.no_grad():
        ref = hf(ids).logits[0].numpy()
    for step, ours in enumerate(result.logits):
        expected = ref[len(prompt) - 1 + step]
        cos = np.dot(ours, expected) / (np.linalg.norm(ours) * np.linalg.norm(expected))
        assert cos >= 0.9999, (step, cos)


def test_vocabulary_head_is_split_below_the_channel_limit() -> None:
    limit = targets.get("m4").limits.max_channels
    chunks = head_chunks(50257, limit)
    assert len(chunks) == 4 and max(b - a for a, b in chunks) <= limit
    assert chunks[0][0] == 0 and chunks[-1][1] == 50257
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    assert head_chunks(100, limit) == [(0, 100)]
