"""The host-side feeds of the prefill and decode programs: buckets, additive masks, one-hots."""

from __future__ import annotations

import numpy as np

from anekit import targets
from anekit.llm.config import parse_config
from anekit.llm.plan import plan_programs
from anekit.llm.programs import MASKED, decode_feeds, prefill_feeds

LLAMA = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 8, "intermediate_size": 128, "max_position_embeddings": 4096}  # fmt: skip


def bucket_for(n: int, context: int) -> int:
    return plan_programs(parse_config(LLAMA), targets.get("m4"), context).bucket(n)


def test_buckets() -> None:
    assert [bucket_for(n, 256) for n in (1, 16, 17, 64, 65, 200)] == [16, 16, 32, 64, 128, 256]
    assert bucket_for(99, 100) == 100  # past the last bucket that fits: the context itself
    assert bucket_for(40, 48) == 48
    assert bucket_for(2000, 4096) == 512  # longer prompts are prefilled in pieces of 512


def test_prefill_mask_is_causal_and_hides_padding() -> None:
    f = prefill_feeds([5, 6, 7], 16)
    mask = f["mask"][0, 0]
    assert f["ids"].tolist()[0][:4] == [5, 6, 7, 0] and f["positions"][0, 15] == 15
    for i in range(3):  # a real row sees itself and earlier keys, nothing later
        assert (mask[i, : i + 1] == 0).all() and (mask[i, i + 1 :] == MASKED).all()
    assert (mask[:3, 3:] == MASKED).all()  # no real row sees a padding key
    assert (np.diag(mask) == 0).all()  # padding rows keep one key: no empty softmax row
    assert f["last"][0, 0, 0].tolist().index(1.0) == 2 and f["last"].sum() == 1


def test_decode_feeds_write_one_slot_and_see_the_past() -> None:
    f = decode_feeds([9], 4, 1, 8)
    assert f["ids"].tolist() == [[9]] and f["positions"].tolist() == [[4]]
    assert f["mask"][0, 0, 0].tolist() == [0.0] * 5 + [MASKED] * 3
    assert f["write"][0, 0, 0].tolist() == [0, 0, 0, 0, 1, 0, 0, 0]
