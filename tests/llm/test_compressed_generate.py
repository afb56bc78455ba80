"""Compressed language models: `anekit.llm.load(path, compress=...)` and `anekit generate
--compress` run the constexpr-compressed programs; int8 keeps the trained model's logits."""

from __future__ import annotations

import numpy as np
import pytest

import anekit.llm
from anekit.cli import main
from anekit.errors import TargetError
from tests.llm.conftest import PROMPT, TINY_GPT2, TINY_LLAMA


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize(("folder", "target"), [(TINY_GPT2, "m1"), (TINY_LLAMA, "m4")])
def test_int8_keeps_the_logits(folder, target: str) -> None:
    dense = anekit.llm.load(folder, target=target)
    int8 = anekit.llm.load(folder, target=target, compress="int8")
    ids = dense.encode(PROMPT)
    full = dense.generate(ids, max_new_tokens=8, stop_at_eos=False)
    sequence = ids + full.token_ids
    for n in (len(ids), len(sequence) - 1):  # the same positions through both models
        assert cosine(int8.prefill(sequence[:n])[0], dense.prefill(sequence[:n])[0]) >= 0.999
    decode, _ = int8.decode_program()
    assert decode.compressed and decode.compression_report["ratio"] > 1.9
    ops = {o.op for p in decode.program.programs for o in p.function("main").operations}
    expected = (
        "constexpr_affine_dequantize" if target == "m1" else "constexpr_blockwise_shift_scale"
    )
    assert expected in ops


def test_palettized_and_sparse_generate(capsys) -> None:
    code = main(["generate", str(TINY_LLAMA), "-p", PROMPT, "-n", "4", "--compress", "palettize4"])
    out = capsys.readouterr()
    assert code == 0 and out.out.startswith(PROMPT)
    model = anekit.llm.load(TINY_GPT2, compress="sparse")
    assert len(model.generate(PROMPT, max_new_tokens=4, stop_at_eos=False).token_ids) == 4


def test_int4_on_m1_is_refused() -> None:
    with pytest.raises(TargetError, match="int4 weights need the iOS 18"):
        anekit.llm.load(TINY_GPT2, target="m1", compress="int4")
