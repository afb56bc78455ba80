"""The published configurations of GPT-2, Qwen2.5-0.5B and Phi-3-mini-4k-instruct cut to 2
layers and a 2048-token vocabulary (every width, head count, head_dim, rotary base, window
and norm as published), seeded random weights from transformers' own initialisation saved
in bf16 as published: greedy tokens equal transformers fp32's and every step's logits reach
cosine 0.9999. SmolLM2-135M, Qwen3-0.6B, Llama-3.2-1B and Gemma-3-1B, cut the same way, are
checked by benchmarks/llm_scale.py --smoke (tests/llm/test_llm_scale_smoke.py). Mistral-7B
is left out: cut to 2 layers it is still 436M parameters (about two minutes here), and its
block is Llama's with a window, which tests/llm/test_trained_families.py checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import anekit.llm
from tests.llm.test_parity import cosine

# config.json of each model's main branch on the Hugging Face hub (values that matter here)
PUBLISHED = {
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
             "n_embd": 768, "n_layer": 12, "n_head": 12, "activation_function": "gelu_new",
             "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256},
    "qwen2.5-0.5b": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
                     "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                     "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                     "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 32768,
                     "max_window_layers": 24, "bos_token_id": 151643, "eos_token_id": 151643},
    "phi-3-mini-4k": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064,
                      "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
                      "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": None,
                      "rms_norm_eps": 1e-5, "sliding_window": 2047, "hidden_act": "silu",
                      "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000},
}  # fmt: skip
VOCAB = 2048
STEPS = 8


def cut(config: dict) -> dict:
    layers = "n_layer" if config["model_type"] == "gpt2" else "num_hidden_layers"
    keep = {k: v for k, v in config.items() if k not in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return {**keep, layers: 2, "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configuration_cut_to_two_layers_matches_transformers(name: str, tmp_path) -> None:
    config = transformers.AutoConfig.for_model(**cut(PUBLISHED[name]))
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(tmp_path)
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, VOCAB, 12)]
    model = anekit.llm.load(tmp_path, max_context=64)
    assert model.conversion.source_dtypes == {"BF16"}
    result = model.generate(prompt, max_new_tokens=STEPS, stop_at_eos=False, return_logits=True)
    del model
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([prompt + result.token_ids])).logits[0, len(prompt) - 1 :].numpy()
    # greedy over transformers' own logits of the same sequence: equal tokens at every step
    assert result.token_ids == [int(l.argmax()) for l in ref[:STEPS]]
    for step, ours in enumerate(result.logits):
        assert cosine(ours, ref[step]) >= 0.9999, (step, cosine(ours, ref[step]))
