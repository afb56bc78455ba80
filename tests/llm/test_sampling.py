"""Host sampling against transformers' logits processors (the oracle for each filter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers.generation.logits_process as generation

from anekit.errors import InputError
from anekit.llm.sampling import Sampler, SamplingOptions

LOGITS = np.random.default_rng(0).normal(0, 3, 200).astype(np.float32)
HISTORY = [3, 17, 17, 150, int(np.argmax(LOGITS))]


def kept(o: SamplingOptions, draws: int = 400) -> set[int]:
    sampler = Sampler(o)
    return {sampler(LOGITS, HISTORY) for _ in range(draws)}


def hf_kept(processors: list) -> set[int]:
    scores = torch.tensor(LOGITS[None].astype(np.float32))
    ids = torch.tensor([HISTORY])
    for p in processors:
        scores = p(ids, scores)
    return set(np.flatnonzero(np.isfinite(scores[0].numpy())).tolist())


def test_greedy_and_repetition_penalty_match_transformers() -> None:
    o = SamplingOptions(repetition_penalty=1.3)
    ours = Sampler(o).adjust(LOGITS, HISTORY)
    ref = generation.RepetitionPenaltyLogitsProcessor(1.3)(
        torch.tensor([HISTORY]), torch.tensor(LOGITS[None]))[0].numpy()  # fmt: skip
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    assert Sampler(o)(LOGITS, HISTORY) == int(np.argmax(ref))
    assert Sampler(SamplingOptions())(LOGITS, []) == int(np.argmax(LOGITS))


def test_top_k_and_top_p_keep_what_transformers_keeps() -> None:
    assert kept(SamplingOptions(temperature=1.0, top_k=5, seed=1)) <= hf_kept(
        [generation.TopKLogitsWarper(5)]
    )
    assert len(kept(SamplingOptions(temperature=1.0, top_k=5, seed=1))) == 5
    nucleus = hf_kept([generation.TemperatureLogitsWarper(0.7), generation.TopPLogitsWarper(0.6)])
    assert kept(SamplingOptions(temperature=0.7, top_p=0.6, seed=2), 2000) == nucleus
    assert Sampler(SamplingOptions(temperature=1.0, top_k=1, seed=3))(LOGITS, []) == int(
        np.argmax(LOGITS)
    )


def test_a_seed_repeats_and_temperature_spreads() -> None:
    a = [Sampler(SamplingOptions(temperature=1.0, seed=7))(LOGITS, []) for _ in range(3)]
    draws = Sampler(SamplingOptions(temperature=1.0, seed=7))
    b = [draws(LOGITS, []) for _ in range(50)]
    assert a[0] == b[0] and len(set(b)) > 5
    # at a high temperature the empirical distribution follows softmax(logits / T)
    hot = Sampler(SamplingOptions(temperature=2.0, seed=8))
    counts = np.bincount([hot(LOGITS, []) for _ in range(4000)], minlength=LOGITS.size)
    p = np.exp(LOGITS / 2.0 - np.max(LOGITS / 2.0))
    p /= p.sum()
    top = int(np.argmax(p))
    assert abs(counts[top] / 4000 - p[top]) < 0.03


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0),
                                 dict(repetition_penalty=0.0)])  # fmt: skip
def test_bad_options_are_refused(bad: dict) -> None:
    with pytest.raises(InputError):
        SamplingOptions(**bad)
