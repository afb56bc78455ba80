"""Programs cut to the engine's limits (anekit.llm.plan): layers grouped into chunks under the
chip's per-program weight bytes, the head in a program of its own when it does not fit,
prompts longer than the largest bucket prefilled in pieces, and decode steps that move up a
ladder of context rungs. The cut model must generate exactly what transformers does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import transformers

import anekit.llm
from anekit import targets
from anekit.llm import plan
from anekit.llm.config import parse_config
from tests.llm.test_families import CONFIGS, cosine, greedy, save

PUBLISHED_LLAMA_1B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
                      "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "max_position_embeddings": 131072,
                      "tie_word_embeddings": True, "rope_theta": 500000.0,
                      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192}}  # fmt: skip


def limited(nbytes: int) -> targets.Target:
    m4 = targets.get("m4")
    return dataclasses.replace(m4, limits=dataclasses.replace(m4.limits, max_program_weight_bytes=nbytes))


def test_published_llama_1b_plan_meets_every_limit() -> None:
    cfg = parse_config(PUBLISHED_LLAMA_1B)
    m4 = targets.get("m4")
    p = plan.plan_programs(cfg, m4, 4096)
    assert all(c.weight_bytes <= m4.limits.max_program_weight_bytes for c in p.chunks)
    assert [c.first for c in p.chunks][0] == 0 and p.chunks[-1].stop == 16 and p.chunks[-1].head
    assert sum(c.stop - c.first for c in p.chunks) == 16
    assert max(b - a for a, b in p.head_splits) <= m4.limits.max_channels  # 128256 rows cut
    assert p.contexts == (256, 512, 1024, 2048, 4096) and p.prefill_buckets[-1] == 512
    assert len(p.programs()) <= m4.process.max_loaded_programs
    assert p.weight_limit == m4.limits.max_program_weight_bytes


def test_a_cut_model_with_a_ladder_and_pieces_matches_transformers(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(plan, "FIRST_RUNG", 8)
    monkeypatch.setattr(plan, "BUCKETS", (4,))
    anekit.llm.clear_cache()
    config = CONFIGS["qwen2-window"]()
    hf = save(tmp_path, config, torch.float32)
    cfg = parse_config(config.to_dict())
    model = anekit.llm.load(tmp_path, max_context=32, target=limited(plan.layer_bytes(cfg) + 1))
    p = model.plan
    assert [(c.first, c.stop, c.embeds, c.head) for c in p.chunks] == [
        (0, 1, True, False), (1, 2, False, False), (2, 3, False, False), (3, 3, False, True)]
    assert p.contexts == (8, 16, 32) and p.prefill_buckets == (4,)
    prompt = [5, 17, 42, 3, 88, 61, 9, 33, 12, 7]  # 10 tokens: pieces of 4, 4 and 2
    steps = 14  # positions 10 to 23: rungs 16 and 32
    result = model.generate(prompt, max_new_tokens=steps, stop_at_eos=False, return_logits=True)
    assert result.token_ids == greedy(hf, prompt, steps)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt + result.token_ids])).logits[0].numpy()
    for step, ours in enumerate(result.logits):
        assert cosine(ours, ref[len(prompt) - 1 + step]) >= 0.9999, step
    est = model.estimate(len(prompt), position=20)
    assert est["programs_per_token"] == 4 and est["decode_context"] == 32
    assert est["decode_dispatches_per_token"] >= 4  # at least one engine program per chunk
    small = model.estimate(len(prompt), position=5)
    assert small["decode_context"] == 8 and small["decode_ms_per_token"] < est["decode_ms_per_token"]
    anekit.llm.clear_cache()


def test_the_program_cache_is_bounded_by_bytes(tmp_path) -> None:
    from anekit.llm import programs

    save(tmp_path, transformers.LlamaConfig(**{**CONFIGS["llama3"]().to_dict(), "model_type": "llama"}),
         torch.float32)  # fmt: skip
    anekit.llm.clear_cache()
    model = anekit.llm.load(tmp_path, max_context=32)
    one = model.plan.chunks[0].weight_bytes * programs.FOOTPRINT
    try:
        programs.set_cache_limit(one)  # room for one program
        model.prefill_program(16)
        model.decode_program()
        assert len(programs._CACHE) == 1 and programs.cached_bytes() <= one
        model.generate([1, 2, 3], max_new_tokens=3)  # still runs: programs are recompiled as needed
    finally:
        programs.set_cache_limit(None)
        anekit.llm.clear_cache()
    np.testing.assert_equal(len(programs._CACHE), 0)


@pytest.mark.parametrize("context", [64, 256])
def test_decode_cost_follows_the_position(context: int) -> None:
    cfg = parse_config(PUBLISHED_LLAMA_1B)
    p = plan.plan_programs(cfg, targets.get("m4"), 4096)
    assert p.context_for(context - 1) == 256  # short positions run the smallest rung
    assert p.context_for(4095) == 4096
