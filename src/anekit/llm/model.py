"""`LanguageModel`: a loaded checkpoint that generates text with compiled programs.

Generation runs the prefill programs over the prompt (padded to a sequence bucket; a prompt
longer than the largest bucket continues in pieces through the decode programs), seeds the
decode sessions' KV cache with the prompt's keys and values, then runs one decode step per
new token; the cache is session state, each step's ``*_next`` outputs bound back to its
inputs. A step runs the decode programs of the smallest context rung holding its position
(`anekit.llm.plan`); moving up a rung widens the cache once. Sampling is on the host.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import InputError
from anekit.float16 import share
from anekit.llm import programs as progs
from anekit.llm.config import LMConfig
from anekit.llm.graph import ModelWeights, program_graph, slides
from anekit.llm.plan import ProgramSpec, plan_programs
from anekit.llm.sampling import Sampler, SamplingOptions
from anekit.llm.session import open_session
from anekit.llm.tokenizer import StreamDecoder, Tokenizer
from anekit.llm.weights import Conversion


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
        conversion: Conversion | None = None,
    ):  # fmt: skip
        from anekit import targets

        self.path, self.config, self.weights, self.tokenizer = path, config, weights, tokenizer
        self.target = targets.get(target)
        self.max_context = max_context
        self.compress = compress
        self.conversion = conversion
        self._fingerprint = fingerprint
        self.last_result: GenerateResult | None = None  # the latest generate, when it ended
        self.plan = plan_programs(config, self.target, max_context)
        self.head_pieces = len(self.plan.head_splits)
        # the head's pieces are the programs' constants: shared by the simulator's copies too
        self._head_views = [share(weights.head[a:b]) for a, b in self.plan.head_splits]
        windows = [w for w in config.windows if w is not None]
        self.window = min(windows) if slides(config, max_context) else None

    def __repr__(self) -> str:
        c = self.config
        return (f"LanguageModel({c.family}, {c.layers} layers, hidden {c.hidden}, "
                f"vocab {c.vocab_size}, target={self.target.name!r}, "
                f"max_context={self.max_context}, compress={self.compress!r})")  # fmt: skip

    # --- programs ------------------------------------------------------------------------

    def _compile(self, graph: Any) -> Any:
        from anekit.compiler import compile as compile_graph

        return compile_graph(graph, self.target, compress=self.compress)

    def program(self, spec: ProgramSpec) -> tuple[Any, float]:
        """The compiled program (`CompiledModel`) of one `ProgramSpec` of ``self.plan``, and
        the seconds compiling it took now (0 when it came from the process's cache)."""
        c = spec.chunk
        key = (*self._fingerprint, spec.kind, c.first, c.stop, spec.seq, spec.context)
        found, new = progs.cached(key, lambda: program_graph(
            self.config, self.weights, spec, self.max_context, self.target.limits.max_channels),
            self._compile, int(c.weight_bytes * progs.FOOTPRINT))  # fmt: skip
        return found.model, found.seconds if new else 0.0

    def prefill_program(self, seq: int) -> tuple[Any, float]:
        """The first chunk's prefill for a bucket of ``seq`` positions (the whole model when
        it is one chunk) and the seconds compiling it took now."""
        return self.program(self.plan.prefill(seq)[0])

    def decode_program(self, context: int | None = None) -> tuple[Any, float]:
        """The first chunk's one-position decode for a cache of ``context`` (default: the
        largest rung)."""
        return self.program(self.plan.decode(context or self.max_context)[0])

    def estimate(self, prompt_tokens: int, position: int | None = None) -> dict[str, Any]:
        """The cost model's times on the target: a prefill of ``prompt_tokens`` (its bucket's
        programs, every chunk) and one decode step at ``position`` (default: right after the
        prompt; the rung holding it), in ms, with the tokens/s they imply and the engine
        dispatches each takes."""
        from anekit.cost import estimate_compiled

        position = prompt_tokens if position is None else position
        if not 0 <= position < self.max_context:
            raise InputError(f"position must be in [0, {self.max_context}), got {position}")
        seq = self.plan.bucket(prompt_tokens)
        pieces = -(-prompt_tokens // self.plan.prefill_buckets[-1])
        context = self.plan.context_for(position)
        prefill = [estimate_compiled(self.program(s)[0]) for s in self.plan.prefill(seq)]
        decode = [estimate_compiled(self.program(s)[0]) for s in self.plan.decode(context)]
        prefill_ms = sum(e.total_ms for e in prefill) * pieces
        decode_ms = sum(e.total_ms for e in decode)
        return {
            "target": self.target.name,
            "prefill_ms": prefill_ms,
            "prefill_tokens_per_s": prompt_tokens / prefill_ms * 1e3,
            "prefill_dispatches": sum(e.dispatches for e in prefill) * pieces,
            "decode_ms_per_token": decode_ms,
            "decode_tokens_per_s": 1e3 / decode_ms,
            "decode_dispatches_per_token": sum(e.dispatches for e in decode),
            "decode_context": context,
            "programs_per_token": len(self.plan.chunks),
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
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InputError(f"the prompt is not valid text: {exc.reason} at character {exc.start}",
                                 hint="pass UTF-8 text") from None  # fmt: skip
            ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, Sequence | np.ndarray):
            bad_type = [t for t in prompt if isinstance(t, bool | np.bool_)
                        or not isinstance(t, int | np.integer)]  # fmt: skip
            if bad_type:
                raise InputError(f"token ids must be integers, got {bad_type[:5]!r}",
                                 hint="pass a string or a list of int token ids")  # fmt: skip
            ids = [int(t) for t in prompt]
        else:
            raise InputError(f"the prompt must be text or a list of token ids, got {type(prompt).__name__}")
        if not ids:
            raise InputError("the prompt is empty", hint="give at least one token")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise InputError(f"token ids {bad[:5]} are outside the vocabulary [0, {self.config.vocab_size})")
        return ids

    def _chain(self, specs: list[ProgramSpec], feeds: dict[str, np.ndarray], backend: str,
               sessions: list[Any] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """Run the chunks' programs in order, the hidden state passed along; every output."""
        outputs: dict[str, np.ndarray] = {}
        for i, spec in enumerate(specs):
            compiled, _ = self.program(spec)
            names = {p.name for p in compiled.program.inputs}
            given = {k: v for k, v in feeds.items() if k in names}
            if "hidden" in names:
                given["hidden"] = outputs.pop("hidden_out")
            out = sessions[i].run(given) if sessions else compiled.program.run(given, backend)
            outputs.update(out)
        return outputs

    def prefill(self, ids: Sequence[int], backend: str = "sim") -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits after the last of ``ids`` and each layer's keys and values [1, W, 1, len]."""
        plan, n = self.plan, len(ids)
        if n >= self.max_context:
            raise InputError(f"the prompt has {n} tokens; the context holds {self.max_context}",
                             hint="shorten the prompt or load the model with a larger max_context")  # fmt: skip
        step = plan.prefill_buckets[-1]
        first = list(ids[:step])
        seq = plan.bucket(len(first))
        out = self._chain(plan.prefill(seq), progs.prefill_feeds(first, seq, self.window), backend)
        logits = progs.join_logits(out, self.head_pieces)
        kv = {name: out[name][..., : len(first)] for name in self._kv_names("")}
        if n <= step:
            return logits, kv
        # the rest in pieces of the largest bucket, through the decode programs of the rung
        # that holds the whole prompt, the cache carried on the host between pieces
        context = plan.context_for(n - 1)
        cache = {f"{name[0]}_cache_{name[2:]}": _widen(a, context) for name, a in kv.items()}
        for start in range(step, n, step):
            piece = list(ids[start : start + step])
            feeds = {**progs.decode_feeds(piece, start, step, context, self.window), **cache}
            out = self._chain(plan.decode(context, step), feeds, backend)
            cache = {name: out[f"{name}_next"] for name in cache}
            logits = progs.join_logits(out, self.head_pieces)
        return logits, {f"{name[0]}_{name[8:]}": a[..., :n] for name, a in cache.items()}

    def _kv_names(self, suffix: str) -> list[str]:
        return [f"{kind}_{i}{suffix}" for i in range(self.config.layers) for kind in "kv"]

    def _open(self, context: int, backend: str, kv: dict[str, np.ndarray]) -> list[Any]:
        """Decode sessions of the rung ``context``, one per chunk, seeded with ``kv``."""
        sessions = []
        for spec in self.plan.decode(context):
            compiled, _ = self.program(spec)
            session = open_session(compiled, backend, spec.chunk.layers)
            session.seed({f"{k}_cache_{i}": _widen(kv[f"{k}_{i}"], context)
                          for i in spec.chunk.layers for k in "kv"})  # fmt: skip
            sessions.append(session)
        return sessions

    def _read(self, sessions: list[Any], context: int) -> dict[str, np.ndarray]:
        """The sessions' caches, as the prefill's [1, W, 1, context] keys and values."""
        out = {}
        for spec, session in zip(self.plan.decode(context), sessions, strict=True):
            for i in spec.chunk.layers:
                for k in "kv":
                    out[f"{k}_{i}"] = session.read(f"{k}_cache_{i}")
        return out

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

    def _warm(self, specs: list[ProgramSpec], backend: str, stats: _Stats) -> None:
        """Compile and load ``specs`` outside the timings."""
        for spec in specs:
            compiled, seconds = self.program(spec)
            stats.compile += seconds
            compiled.program.runners(backend)

    def _steps(
        self, ids: list[int], max_new: int, sampler: Sampler, stop_at_eos: bool, backend: str,
        keep_logits: bool, stats: _Stats,
    ) -> Iterator[Token]:  # fmt: skip
        text = StreamDecoder(self.tokenizer) if self.tokenizer else None
        eos = self.config.eos_token_id if stop_at_eos else None
        plan = self.plan
        context = plan.context_for(len(ids))
        warm = plan.prefill(plan.bucket(len(ids))) + plan.decode(context)
        if len(ids) > plan.prefill_buckets[-1]:
            warm += plan.decode(plan.context_for(len(ids) - 1), plan.prefill_buckets[-1])
        self._warm(warm, backend, stats)
        start = time.perf_counter()
        logits, kv = self.prefill(ids, backend)
        stats.prefill = time.perf_counter() - start
        sessions = self._open(context, backend, kv)
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
            position = len(history) - 1
            if position >= context:  # up a rung: the cache widened once
                kv = self._read(sessions, context)
                context = plan.context_for(position)
                self._warm(plan.decode(context), backend, stats)
                sessions = self._open(context, backend, kv)
            start = time.perf_counter()
            out = self._chain(plan.decode(context), progs.decode_feeds([token], position, 1, context, self.window),
                              backend, sessions)  # fmt: skip
            logits = progs.join_logits(out, self.head_pieces)
            stats.decode += time.perf_counter() - start


def _widen(kv: np.ndarray, context: int) -> np.ndarray:
    """A prefill's [1, W, 1, n] keys or values as a [1, W, 1, context] cache (zeros after)."""
    cache = np.zeros((*kv.shape[:3], context), np.float32)
    cache[..., : kv.shape[3]] = kv
    return cache
