"""Every family against transformers fp32, from checkpoints that save_pretrained writes in
bf16 and in fp32: Llama (with llama3, linear and dynamic rotary scaling, attention biases),
Mistral and Qwen2 with a sliding window shorter than the text, Qwen3 (query/key norms, an
explicit head_dim), Gemma 3 text (interleaved sliding and global layers with their own
rotary bases, four norms per block, scaled embeddings, GELU-tanh), Phi-3 (fused qkv and
gate_up). Small random models (weights scaled up so the logits are not flat); greedy tokens
must equal transformers' greedy generation and every step's logits must reach cosine
0.9999 against transformers on the same sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import anekit.llm

SMALL = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
         "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}  # fmt: skip
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 500000.0}  # fmt: skip

CONFIGS = {
    "llama3": lambda: transformers.LlamaConfig(**SMALL, rope_parameters=LLAMA3_ROPE),
    "llama-linear": lambda: transformers.LlamaConfig(
        **SMALL, rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
    "llama-dynamic": lambda: transformers.LlamaConfig(
        **SMALL, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    "llama-bias-tied": lambda: transformers.LlamaConfig(**SMALL, attention_bias=True, tie_word_embeddings=True),
    "mistral-window": lambda: transformers.MistralConfig(**SMALL, sliding_window=5, head_dim=8),
    "qwen2-window": lambda: transformers.Qwen2Config(
        **{**SMALL, "num_hidden_layers": 3}, use_sliding_window=True, sliding_window=5, max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    "qwen3": lambda: transformers.Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=True),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SMALL, head_dim=16, query_pre_attn_scalar=12, sliding_window=5,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}),
    "phi3": lambda: transformers.Phi3Config(**SMALL, sliding_window=6),
}  # fmt: skip
PROMPT = [5, 17, 42, 3, 88, 61, 9, 33]
STEPS = 10


def save(folder, config, dtype: torch.dtype) -> torch.nn.Module:
    """A seeded random model saved in ``dtype``; returns transformers' fp32 model of exactly
    the weights written (bf16-rounded for a bf16 checkpoint)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger than the default init, so logits are not all near zero
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.mul_(3.0)
            elif "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.to(dtype).save_pretrained(folder, safe_serialization=True)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def greedy(hf: torch.nn.Module, prompt: list[int], steps: int) -> list[int]:
    """transformers fp32's greedy continuation (the whole sequence recomputed per token)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_greedy_tokens_and_logits_match_transformers(family: str, dtype: torch.dtype, tmp_path) -> None:
    hf = save(tmp_path, CONFIGS[family](), dtype)
    model = anekit.llm.load(tmp_path, max_context=32)
    assert model.conversion.source_dtypes == {"BF16" if dtype == torch.bfloat16 else "F32"}
    result = model.generate(PROMPT, max_new_tokens=STEPS, stop_at_eos=False, return_logits=True)
    expected = greedy(hf, PROMPT, STEPS)
    with torch.no_grad():
        ref = hf(torch.tensor([PROMPT + result.token_ids])).logits[0].numpy()
    assert result.token_ids == expected
    for step, ours in enumerate(result.logits):
        cos = cosine(ours, ref[len(PROMPT) - 1 + step])
        assert cos >= 0.9999, (step, cos)


def test_family_records_reach_the_config() -> None:
    from anekit.llm.config import parse_config

    gemma = parse_config({**SMALL, **CONFIGS["gemma3"]().to_dict()})
    assert gemma.windows == (5, None) and gemma.qk_norm and gemma.sandwich and gemma.norm_offset == 1.0
    assert gemma.rope_sliding is not None and gemma.rope_sliding.theta == 1e4 and gemma.rope.type == "linear"
    assert gemma.embed_scale == pytest.approx(32**0.5) and gemma.scale == pytest.approx(12**-0.5)
    qwen2 = parse_config(CONFIGS["qwen2-window"]().to_dict())
    assert qwen2.windows == (None, 5, 5)
    phi = parse_config(CONFIGS["phi3"]().to_dict())
    assert phi.fused and phi.windows == (6, 6)
    old_gemma = parse_config({**SMALL, "model_type": "gemma3_text", "num_hidden_layers": 6, "head_dim": 16,
                              "sliding_window": 512, "sliding_window_pattern": 3,
                              "rope_local_base_freq": 10000, "rope_theta": 1e6})  # fmt: skip
    assert old_gemma.windows == (512, 512, None, 512, 512, None) and old_gemma.rope.theta == 1e6
