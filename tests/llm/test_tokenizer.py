"""Tokenizers from both file layouts agree with transformers' tokenizers; streaming text
joins to the whole decode."""

from __future__ import annotations

import pytest
import transformers

from anekit.errors import ModelError
from anekit.llm.tokenizer import StreamDecoder, load_tokenizer
from tests.llm.conftest import TINY_GPT2, TINY_LLAMA

TEXT = 'def mean(data):\n    """Return the sample arithmetic mean — naïve."""\n'


@pytest.mark.parametrize("folder", [TINY_GPT2, TINY_LLAMA], ids=["vocab+merges", "tokenizer.json"])
def test_encode_and_decode_match_transformers(folder) -> None:
    ours = load_tokenizer(folder)
    if (folder / "tokenizer.json").exists():
        ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    else:
        ref = transformers.GPT2Tokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    ids = ours.encode(TEXT)
    assert ids == ref.encode(TEXT)
    assert ours.decode(ids) == TEXT == ref.decode(ids)


def test_stream_pieces_join_to_the_text_and_hold_back_split_characters() -> None:
    tok = load_tokenizer(TINY_GPT2)
    ids = tok.encode(TEXT)
    stream = StreamDecoder(tok)
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces  # 'ï' and '—' are split over byte tokens: held back, then released


def test_no_tokenizer_files(tmp_path) -> None:
    with pytest.raises(ModelError, match="no tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(ModelError, match="cannot read the tokenizer"):
        load_tokenizer(tmp_path)
