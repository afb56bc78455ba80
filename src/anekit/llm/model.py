"""`LanguageModel`: a loaded checkpoint that generates text with compiled programs.

Generation runs a prefill program over the prompt (padded to a sequence bucket), seeds the
decode session's KV cache with the prompt's keys and values, then runs one decode step per
new token; the cache is session state, each step's ``*_next`` outputs bound back to its
inputs. Sampling is on the host.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import InputError
from anekit.llm import programs as progs
from anekit.llm.config import LMConfig
from anekit.llm.graph import ModelWeights, decode_graph, head_chunks, prefill_graph
from anekit.llm.sampling import Sampler, SamplingOptions
from anekit.llm.session import open_session
from anekit.llm.tokenizer import StreamDecoder, Tokenizer


@dataclass(frozen=True)
class Token:
    """One generated token: its id, its text (may be "" while a character is incomplete)."""

    id: int
    text: str
    logits: np.ndarray | None = None


@dataclass
class GenerateResult:
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    stop_reason: str  # "length" | "eos" | "context"
    prefill_seconds: float
    decode_seconds: float
    compile_seconds: float
    logits: list[np.ndarray] = field(default_factory=list)  # per step, with return_logits

    @property
    def prefill_tokens_per_s(self) -> float:
        return len(self.prompt_ids) / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        steps = len(self.token_ids) - 1  # the first token comes from the prefill
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds else 0.0


@dataclass
class _Stats:
    prefill: float = 0.0
    decode: float = 0.0
    compile: float = 0.0
    stop: str = "length"


class LanguageModel:
    """A decoder-only language model loaded by `anekit.llm.load`."""

    def __init__(
        self, path: Path, config: LMConfig, weights: ModelWeights, tokenizer: Tokenizer | None,
        *, target: Any, max_context: int, compress: str | None, fingerprint: tuple,
    ):  # fmt: skip
        from anekit import targets

        self.path, self.config, self.weights, self.tokenizer = path, config, weights, tokenizer
        self.target = targets.get(target)
        self.max_context = max_context
        self.compress = compress
        self._fingerprint = fingerprint
        self.last_result: GenerateResult | None = None  # the latest generate, when it ended
        self.chunks = len(head_chunks(config.vocab_size, self.target.limits.max_channels))

    def __repr__(self) -> str:
        c = self.config
        return (f"LanguageModel({c.family}, {c.layers} layers, hidden {c.hidden}, "
                f"vocab {c.vocab_size}, target={self.target.name!r}, "
                f"max_context={self.max_context}, compress={self.compress!r})")  # fmt: skip

    # --- programs ------------------------------------------------------------------------

    def _compile(self, graph: Any) -> Any:
        from anekit.compiler import compile as compile_graph

        return compile_graph(graph, self.target, compress=self.compress)

    def prefill_program(self, seq: int) -> tuple[Any, float]:
        """The compiled prefill for a bucket of ``seq`` positions and the seconds compiling
        it took now (0 when it came from the cache)."""
        key = (*self._fingerprint, "prefill", seq)
        found, new = progs.cached(key, lambda: prefill_graph(
            self.config, self.weights, seq, self.max_context,
            self.target.limits.max_channels), self._compile)  # fmt: skip
        return found.model, found.seconds if new else 0.0

    def decode_program(self) -> tuple[Any, float]:
        key = (*self._fingerprint, "decode", self.max_context)
        found, new = progs.cached(key, lambda: decode_graph(
            self.config, self.weights, self.max_context,
            self.target.limits.max_channels), self._compile)  # fmt: skip
        return found.model, found.seconds if new else 0.0

    def estimate(self, prompt_tokens: int) -> dict[str, float]:
        """The cost model's times on the target: a prefill of ``prompt_tokens`` (its bucket's
        program) and one decode step, in ms, with the tokens/s they imply."""
        from anekit.cost import estimate_compiled

        seq = progs.bucket_for(prompt_tokens, self.max_context)
        prefill_ms = estimate_compiled(self.prefill_program(seq)[0]).total_ms
        decode_ms = estimate_compiled(self.decode_program()[0]).total_ms
        return {
            "target": self.target.name,
            "prefill_ms": prefill_ms,
            "prefill_tokens_per_s": prompt_tokens / prefill_ms * 1e3,
            "decode_ms_per_token": decode_ms,
            "decode_tokens_per_s": 1e3 / decode_ms,
        }

    def export(self, out: Any, *, buckets: Sequence[int] | None = None) -> dict:
        """Write the model as an app ships it: one stateful multifunction Core ML package
        per chunk and a manifest, in the folder ``out`` (`anekit.llm.export`)."""
        from anekit.llm.export import export

        return export(self, out, buckets=buckets)

    # --- running -------------------------------------------------------------------------

    def encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InputError("this model folder has no tokenizer; pass token ids")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise InputError("the prompt is empty", hint="give at least one token")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise InputError(f"token ids {bad[:5]} are outside the vocabulary [0, {self.config.vocab_size})")
        return ids

    def prefill(self, ids: Sequence[int], backend: str = "sim") -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits after the last of ``ids`` and each layer's keys and values [1, W, 1, len]."""
        seq = progs.bucket_for(len(ids), self.max_context)
        model, _ = self.prefill_program(seq)
        out = model.program.run(progs.prefill_feeds(list(ids), seq), backend)
        n = len(ids)
        kv = {name: out[name][..., :n] for name in out if not name.startswith("logits_")}
        return progs.join_logits(out, self.chunks), kv

    def generate(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 32,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        stop_at_eos: bool = True,
        stream: bool = False,
        backend: str = "sim",
        return_logits: bool = False,
    ) -> GenerateResult | Iterator[Token]:
        """Continue ``prompt`` (text or token ids) by up to ``max_new_tokens`` tokens.

        ``stream=True`` returns an iterator of `Token` as they are made; otherwise a
        `GenerateResult` with ``token_ids`` and ``text``. ``temperature`` 0 is greedy.
        """
        options = SamplingOptions(temperature, top_k, top_p, repetition_penalty, seed)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        ids = self.encode(prompt)
        if len(ids) >= self.max_context:
            raise InputError(
                f"the prompt has {len(ids)} tokens; the context holds {self.max_context}",
                hint="shorten the prompt or load the model with a larger max_context",
            )
        stats = _Stats()
        steps = self._steps(ids, max_new_tokens, Sampler(options), stop_at_eos, backend,
                            return_logits, stats)  # fmt: skip
        recorded = self._record(ids, steps, stats)
        if stream:
            return recorded
        for _ in recorded:
            pass
        assert self.last_result is not None
        return self.last_result

    def _record(self, ids: list[int], steps: Iterator[Token], stats: _Stats) -> Iterator[Token]:
        """Pass the tokens on; when they end, keep the whole run as ``last_result``."""
        tokens = []
        for token in steps:
            tokens.append(token)
            yield token
        self.last_result = GenerateResult(
            prompt_ids=ids,
            token_ids=[t.id for t in tokens],
            text="".join(t.text for t in tokens) if self.tokenizer else "",
            stop_reason=stats.stop,
            prefill_seconds=stats.prefill,
            decode_seconds=stats.decode,
            compile_seconds=stats.compile,
            logits=[t.logits for t in tokens if t.logits is not None],
        )

    def _steps(
        self, ids: list[int], max_new: int, sampler: Sampler, stop_at_eos: bool, backend: str,
        keep_logits: bool, stats: _Stats,
    ) -> Iterator[Token]:  # fmt: skip
        text = StreamDecoder(self.tokenizer) if self.tokenizer else None
        eos = self.config.eos_token_id if stop_at_eos else None
        seq = progs.bucket_for(len(ids), self.max_context)
        _, seconds = self.prefill_program(seq)
        decode, more = self.decode_program()
        stats.compile = seconds + more
        for compiled in (self.prefill_program(seq)[0], decode):
            compiled.program.runners(backend)  # parse and load once, outside the timings
        start = time.perf_counter()
        logits, kv = self.prefill(ids, backend)
        stats.prefill = time.perf_counter() - start
        session = open_session(decode, backend, self.config.layers)
        session.seed({f"{name[0]}_cache_{name[2:]}": _widen(a, self.max_context)
                      for name, a in kv.items()})  # fmt: skip
        history = list(ids)
        for step in range(max_new):
            token = sampler(logits, history)
            history.append(token)
            yield Token(token, text.push(token) if text else "", logits if keep_logits else None)
            if token == eos:
                stats.stop = "eos"
                return
            if len(history) >= self.max_context:
                stats.stop = "context"
                return
            if step == max_new - 1:
                return
            start = time.perf_counter()
            out = session.run(progs.decode_feeds(token, len(history) - 1, self.max_context))
            logits = progs.join_logits(out, self.chunks)
            stats.decode += time.perf_counter() - start


def _widen(kv: np.ndarray, context: int) -> np.ndarray:
    """A prefill's [1, W, 1, n] keys or values as a [1, W, 1, context] cache (zeros after)."""
    cache = np.zeros((*kv.shape[:3], context), np.float32)
    cache[..., : kv.shape[3]] = kv
    return cache
