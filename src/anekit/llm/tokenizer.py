"""A model folder's tokenizer through the `tokenizers` library: tokenizer.json, or GPT-2's
vocab.json and merges.txt (byte-level BPE). Incremental decoding for streaming."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anekit import budget
from anekit.errors import AnekitError, ModelError
from anekit.llm.files import member

MAX_TOKENIZER_BYTES = 64 << 20
# The tokenizers library holds about 12 bytes per byte of tokenizer.json once parsed (a 60 MB
# file took 715 MB): the budget is checked for that before it parses.
PARSED_PER_BYTE = 12


class Tokenizer:
    """Text <-> token ids."""

    def __init__(self, backend: Any, where: str):
        self._tok = backend
        self.where = where

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        try:
            return list(self._tok.encode(text, add_special_tokens=False).ids)
        except BaseException as exc:  # noqa: BLE001 - the library raises plain Exceptions and panics
            raise _tokenizer_error(exc, "the tokenizer cannot encode the prompt", self.where) from None

    def decode(self, ids: Sequence[int]) -> str:
        try:
            return str(self._tok.decode(list(ids), skip_special_tokens=False))
        except BaseException as exc:  # noqa: BLE001 - as in encode
            raise _tokenizer_error(exc, "the tokenizer cannot decode the tokens", self.where) from None


def _tokenizer_error(exc: BaseException, what: str, where: str) -> BaseException:
    """What the tokenizers library raised, as anekit's error: it raises plain Exceptions for a
    broken tokenizer.json and a Rust panic (a BaseException) for some; an interrupt stays one."""
    if isinstance(exc, KeyboardInterrupt | SystemExit | AnekitError):
        return exc
    return ModelError(f"{what}: {exc}", where=where,
                      hint="the folder's tokenizer files are damaged or inconsistent")  # fmt: skip


def load_tokenizer(folder: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.implementations import ByteLevelBPETokenizer

    try:
        if (path := member(folder, "tokenizer.json", MAX_TOKENIZER_BYTES)) is not None:
            _check_budget(path)
            return Tokenizer(HFTokenizer.from_file(str(path)), str(path))
        vocab = member(folder, "vocab.json", MAX_TOKENIZER_BYTES)
        merges = member(folder, "merges.txt", MAX_TOKENIZER_BYTES)
        if vocab is not None and merges is not None:
            _check_budget(vocab, merges)
            return Tokenizer(ByteLevelBPETokenizer(str(vocab), str(merges)), str(vocab))
    except BaseException as exc:  # noqa: BLE001 - plain Exceptions and Rust panics
        raise _tokenizer_error(exc, "cannot read the tokenizer", str(folder)) from None
    raise ModelError(
        f"no tokenizer in '{folder}'",
        hint="the folder needs tokenizer.json, or vocab.json and merges.txt; "
        "or pass the prompt as token ids",
    )


def _check_budget(*paths: Path) -> None:
    size = sum(p.stat().st_size for p in paths)
    budget.check(size * PARSED_PER_BYTE, f"parsing the tokenizer ({budget.describe(size)})",
                 where=str(paths[0]))  # fmt: skip


class StreamDecoder:
    """Text of each new token as it comes: decodes the whole continuation and hands out
    what is new, holding back an incomplete UTF-8 sequence (shown as U+FFFD) until its
    last byte arrives."""

    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer
        self._ids: list[int] = []
        self._sent = 0

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        text = self._tok.decode(self._ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self._sent = text[self._sent:], len(text)
        return piece
