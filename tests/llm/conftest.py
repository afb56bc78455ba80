"""The trained tiny language models (tests/data/llm, made by tests/data/make_tiny_lms.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "llm"
TINY_GPT2 = DATA / "tiny-gpt2"
TINY_LLAMA = DATA / "tiny-llama"
PROMPT = "class Fraction(numbers.Rational):"


@pytest.fixture(scope="module")
def tiny_gpt2():
    import anekit.llm

    return anekit.llm.load(TINY_GPT2)


@pytest.fixture(scope="module")
def tiny_llama():
    import anekit.llm

    return anekit.llm.load(TINY_LLAMA)
