"""`ExportedModel`: an export folder (`anekit.llm.export`) loaded and run as an app runs it.

What runs is the packages themselves: each chunk's ``.mlpackage`` is read back
(`anekit.formats.mlpackage`), and its functions run on the simulator with their Core ML
states (`anekit.simulator.states`), in the call order docs/llm.md gives an app:

1. make each chunk's state (zeros);
2. ``prefill_<S>`` of the smallest bucket S holding the prompt, chunk after chunk, each
   chunk's outputs feeding the next chunk's inputs of the same name; the last chunk's
   ``logits_*`` are the next token's;
3. ``decode`` once per new token with its position, in the same chunk order.

The manifest's sha256 of every file is checked before anything is read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import InputError, ModelError
from anekit.llm import export as exp
from anekit.llm import programs as progs
from anekit.llm.config import parse_config
from anekit.llm.model import GenerateResult, LanguageModel, Token
from anekit.llm.sampling import Sampler, SamplingOptions
from anekit.llm.tokenizer import StreamDecoder, load_tokenizer
from anekit.runtime import mlpackage as packages

BACKENDS = packages.BACKENDS


class _Chunk:
    """One package's functions, loaded on first use, and its state."""

    def __init__(self, folder: Path, entry: dict):
        self.entry = entry
        self.path = folder / entry["package"]
        self.package = packages.read(self.path)
        self._functions: dict[tuple[str, str], Any] = {}
        self.state: Any = None

    def function(self, name: str, backend: str) -> Any:
        found = self._functions.get((name, backend))
        if found is None:
            found = self._functions[(name, backend)] = packages.load_function(
                self.package, self.path, name, backend
            )
        return found

    def reset(self, backend: str) -> None:
        """A new state (zeros), as an app makes one per conversation."""
        self.state = self.function("decode", backend).new_state()


class ExportedModel:
    """A language model export, run from its packages."""

    def __init__(self, folder: Path, manifest: dict):
        self.path = folder
        self.manifest = manifest
        self.config = parse_config(manifest["config_json"], str(folder / "config.json"))
        self.max_context: int = int(manifest["max_context"])
        self.buckets: tuple[int, ...] = tuple(int(b) for b in manifest["buckets"])
        self.window: int | None = manifest["window"]
        self.tokenizer = load_tokenizer(folder) if manifest["tokenizer_files"] else None
        self.chunks = [_Chunk(folder, entry) for entry in manifest["chunks"]]
        self.last_result: GenerateResult | None = None

    def __repr__(self) -> str:
        m = self.manifest
        return (f"ExportedModel({m['family']}, {len(self.chunks)} chunk(s), target={m['target']!r}, "
                f"buckets={list(self.buckets)}, max_context={self.max_context})")  # fmt: skip

    def estimate(self, prompt_tokens: int) -> dict[str, float]:
        """The cost model's times for this artifact on its target (computed at export, every
        chunk's functions counted): the prompt's bucket's prefill and one decode step."""
        est = self.manifest["estimate"]
        bucket = next((b for b in self.buckets if prompt_tokens <= b), self.buckets[-1])
        prefill_ms = est["prefill"][str(bucket)]["ms"]
        return {
            "target": est["target"],
            "prefill_ms": prefill_ms,
            "prefill_tokens_per_s": prompt_tokens / prefill_ms * 1e3,
            "decode_ms_per_token": est["decode_ms_per_token"],
            "decode_tokens_per_s": est["decode_tokens_per_s"],
        }

    def encode(self, prompt: str | Sequence[int]) -> list[int]:
        # the folder's model's checks (it reads only the tokenizer and the config)
        ids = LanguageModel.encode(self, prompt)  # type: ignore[arg-type]
        if len(ids) > self.buckets[-1] or len(ids) >= self.max_context:
            raise InputError(f"the prompt has {len(ids)} tokens; the export's largest prefill "
                             f"bucket is {self.buckets[-1]} and its context {self.max_context}")  # fmt: skip
        return ids

    # --- the app's call order --------------------------------------------------------------

    def _run(self, function: str, feeds: dict[str, np.ndarray], backend: str) -> np.ndarray:
        pool = dict(feeds)
        out: dict[str, np.ndarray] = {}
        for chunk in self.chunks:
            fn = chunk.function(function, backend)
            out = fn.run({n: pool[n] for n in fn.inputs}, chunk.state)
            pool.update(out)
            if "hidden_out" in out:  # a chunk's hidden state is the next chunk's input
                pool["hidden"] = out["hidden_out"]
        logits = sorted(
            (k for k in out if k.startswith("logits_")), key=lambda k: int(k.split("_")[1])
        )
        return np.concatenate([out[k].reshape(-1).astype(np.float32) for k in logits])

    def prefill(self, ids: Sequence[int], backend: str = "sim") -> np.ndarray:
        """New states, then the bucket's prefill over ``ids``: the logits after the last id."""
        _check_backend(backend)
        bucket = next(b for b in self.buckets if len(ids) <= b)
        for chunk in self.chunks:
            chunk.reset(backend)
        feeds = progs.prefill_feeds(list(ids), bucket, self.window)
        return self._run(f"prefill_{bucket}", feeds, backend)

    def decode(self, token: int, position: int, backend: str = "sim") -> np.ndarray:
        """One decode step at ``position`` against the states the prefill began."""
        feeds = progs.decode_feeds([token], position, 1, self.max_context, self.window)
        return self._run("decode", feeds, backend)

    def generate(self, prompt: str | Sequence[int], max_new_tokens: int = 32, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0,
                 seed: int | None = None, stop_at_eos: bool = True, stream: bool = False,
                 backend: str = "sim", return_logits: bool = False) -> GenerateResult | Iterator[Token]:  # fmt: skip
        """As `LanguageModel.generate`, run from the exported packages on ``backend``
        (``sim``: the simulator; ``ane``: Core ML's engine runtime through e5rt, macOS)."""
        _check_backend(backend)
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise InputError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        sampler = Sampler(SamplingOptions(temperature, top_k, top_p, repetition_penalty, seed))
        ids = self.encode(prompt)
        tokens = self._steps(ids, max_new_tokens, sampler, stop_at_eos, return_logits, backend)
        if stream:
            return tokens
        for _ in tokens:
            pass
        assert self.last_result is not None
        return self.last_result

    def _steps(self, ids: list[int], max_new: int, sampler: Sampler, stop_at_eos: bool,
               keep_logits: bool, backend: str) -> Iterator[Token]:  # fmt: skip
        text = StreamDecoder(self.tokenizer) if self.tokenizer else None
        eos = self.config.eos_token_id if stop_at_eos else None
        bucket = next(b for b in self.buckets if len(ids) <= b)
        for chunk in self.chunks:  # read and load the functions once, outside the timings
            chunk.function(f"prefill_{bucket}", backend)
            chunk.function("decode", backend)
        start = time.perf_counter()
        logits = self.prefill(ids, backend)
        prefill_s, decode_s, stop = time.perf_counter() - start, 0.0, "length"
        history, made = list(ids), []
        for step in range(max_new):
            token = sampler(logits, history)
            history.append(token)
            made.append(
                Token(token, text.push(token) if text else "", logits if keep_logits else None)
            )
            yield made[-1]
            if token == eos:
                stop = "eos"
                break
            if len(history) >= self.max_context:
                stop = "context"
                break
            if step == max_new - 1:
                break
            start = time.perf_counter()
            logits = self.decode(token, len(history) - 1, backend)
            decode_s += time.perf_counter() - start
        self.last_result = GenerateResult(
            prompt_ids=ids, token_ids=[t.id for t in made],
            text="".join(t.text for t in made) if self.tokenizer else "", stop_reason=stop,
            prefill_seconds=prefill_s, decode_seconds=decode_s, compile_seconds=0.0,
            logits=[t.logits for t in made if t.logits is not None],
        )  # fmt: skip


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise InputError(f"an export runs on {' or '.join(BACKENDS)}, not '{backend}'")


def load_export(folder: Path) -> ExportedModel:
    """An export folder, every file checked against the manifest's sha256 first."""
    from anekit.llm.files import member, read_json

    manifest = exp.read_manifest(folder)
    exp.verify(folder, manifest)
    path = member(folder, "config.json", 1 << 20)
    if path is None:
        raise ModelError(
            "the export has no config.json", where=str(folder), hint="export the model again"
        )
    manifest["config_json"] = read_json(path, 1 << 20)
    return ExportedModel(folder, manifest)
