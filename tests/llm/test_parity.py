"""Acceptance: the trained tiny GPT-2 and Llama models generate on sim what transformers'
fp32 models generate, token for token, with near-identical logits at every step; decoding
with the resident cache equals recomputing the whole sequence; a second generate compiles
nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from tests.llm.conftest import PROMPT, TINY_GPT2, TINY_LLAMA


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def hf_greedy(folder, prompt_ids: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """transformers' greedy tokens and logits, computed in fp32 (from a bf16 checkpoint too)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False, eos_token_id=None,
            pad_token_id=0, output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    return out.sequences[0, len(prompt_ids) :].tolist(), [l[0].numpy() for l in out.logits]


@pytest.mark.parametrize("which", ["tiny_gpt2", "tiny_llama"])
def test_greedy_64_tokens_match_transformers(which: str, request) -> None:
    model = request.getfixturevalue(which)
    folder = TINY_GPT2 if which == "tiny_gpt2" else TINY_LLAMA
    result = model.generate(PROMPT, max_new_tokens=64, stop_at_eos=False, return_logits=True)
    expected, ref_logits = hf_greedy(folder, result.prompt_ids, 64)
    assert result.token_ids == expected
    assert len(result.logits) == 64
    worst = min(cosine(a, b) for a, b in zip(result.logits, ref_logits, strict=True))
    assert worst >= 0.9999
    # the logits are decisive: the chosen token leads the runner-up clearly at most steps
    margins = [np.sort(l)[-1] - np.sort(l)[-2] for l in ref_logits]
    assert np.median(margins) > 0.1
    assert result.text == model.tokenizer.decode(expected)


@pytest.mark.parametrize("which", ["tiny_gpt2", "tiny_llama"])
def test_decode_with_cache_equals_recompute(which: str, request) -> None:
    model = request.getfixturevalue(which)
    result = model.generate(PROMPT, max_new_tokens=12, stop_at_eos=False, return_logits=True)
    ids = result.prompt_ids + result.token_ids
    n = len(result.prompt_ids)
    for step in (1, 5, 11):  # decode-step logits vs a prefill over the whole sequence so far
        recomputed, _ = model.prefill(ids[: n + step])
        assert cosine(result.logits[step], recomputed) >= 0.9999
        assert int(np.argmax(recomputed)) == result.token_ids[step]


def test_second_generate_compiles_nothing(tiny_llama) -> None:
    import anekit.llm
    from anekit.llm import programs

    tiny_llama.generate(PROMPT, max_new_tokens=3)
    cached = len(programs._CACHE)
    again = anekit.llm.load(TINY_LLAMA)  # a second load of the same folder shares the cache
    result = again.generate(PROMPT, max_new_tokens=3)
    assert result.compile_seconds == 0.0
    assert len(programs._CACHE) == cached


def test_prefill_keys_seed_the_cache_as_transformers_computes_them(tiny_gpt2) -> None:
    ids = tiny_gpt2.encode(PROMPT)
    _, kv = tiny_gpt2.prefill(ids)
    hf = transformers.AutoModelForCausalLM.from_pretrained(TINY_GPT2).eval()
    with torch.no_grad():
        cache = hf(torch.tensor([ids]), use_cache=True).past_key_values
    keys = cache.layers[1].keys[0].numpy()  # [heads, n, hd]
    ours = kv["k_1"][0, :, 0, :].reshape(keys.shape[0], keys.shape[2], len(ids)).transpose(0, 2, 1)
    np.testing.assert_allclose(ours, keys, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("which", ["tiny_gpt2", "tiny_llama"])
def test_the_cache_stays_resident_on_the_engine_surface(which: str, request) -> None:
    from anekit.llm.session import open_session

    model = request.getfixturevalue(which)
    decode, _ = model.decode_program()
    session = open_session(decode, "sim", range(model.config.layers))
    expected = {f"{k}_cache_{i}" for i in range(model.config.layers) for k in "kv"}
    assert set(session.resident) == expected
    # one engine dispatch per step; the embedding gathers are the CPU segment before it
    assert [s.device for s in decode.segments] == ["cpu", "ane"]
