"""A model's programs cut to the engine's limits: which layers each program holds, the
vocabulary head's splits, the prefill buckets and the decode context ladder.

This is the one description every consumer of a model's programs uses (the simulator path
in `anekit.llm.model`, estimates, exporters): `plan_programs` decides it from the config,
the chip and the context; `anekit.llm.graph.program_graph` builds any program it names.

- **Chunks.** Consecutive layers are grouped so that each program's fp16 weights stay
  under the chip's per-program weight limit (`Target.limits.max_program_weight_bytes`);
  the first chunk also gathers the embeddings (`embeds`), the last ends with the final norm
  and the vocabulary head (`head`). The hidden state passes between chunks: a chunk's
  output ``hidden_out`` [1, hidden, 1, S] is the next chunk's input ``hidden``. A head
  that does not fit beside the last layers gets a chunk of its own.
- **Head splits.** The vocabulary head is cut into convolutions of at most
  `Target.limits.max_channels` output channels (outputs ``logits_<i>``).
- **Prefill buckets.** A prompt runs through the smallest bucket that holds it; a prompt
  longer than the largest is prefilled in pieces of that bucket by the decode programs
  (which take S positions against the cache).
- **Context ladder.** Decode programs exist for caches of 256, 512, ... positions up to
  ``max_context``; a step runs the smallest rung that holds its position, so its cost
  grows with the position, not with the maximum. The cache moves up a rung by widening
  (one copy per rung).

Every program of a chunk shares one set of fp16 weights (`anekit.llm.graph.ModelWeights`).
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.llm.config import LMConfig

# Prefill sequence buckets (seed 001 section 4.4 uses 32 to 1024; 16 keeps short prompts cheap).
BUCKETS = (16, 32, 64, 128, 256, 512)
FIRST_RUNG = 256  # the smallest decode cache


@dataclass(frozen=True)
class Chunk:
    """Layers [first, stop) of a model in one program."""

    index: int
    first: int
    stop: int
    embeds: bool  # takes token ids and gathers the embeddings
    head: bool  # ends with the final norm and the vocabulary head
    weight_bytes: int  # fp16 bytes of the weights this program holds

    @property
    def layers(self) -> range:
        return range(self.first, self.stop)


@dataclass(frozen=True)
class ProgramSpec:
    """One program of a plan: ``kind`` "prefill" (``seq`` positions, no cache in) or
    "decode" (``seq`` positions against a cache of ``context``)."""

    kind: str
    chunk: Chunk
    seq: int
    context: int

    @property
    def name(self) -> str:
        tail = f"{self.seq}" if self.kind == "prefill" else f"{self.seq}x{self.context}"
        return f"{self.kind}_{tail}_chunk{self.chunk.index}"


@dataclass(frozen=True)
class ProgramPlan:
    chunks: tuple[Chunk, ...]
    head_splits: tuple[tuple[int, int], ...]
    prefill_buckets: tuple[int, ...]
    contexts: tuple[int, ...]  # the decode ladder's cache lengths, ascending
    max_context: int
    weight_limit: int  # the chip's per-program weight bytes

    def bucket(self, length: int) -> int:
        """The prefill bucket for ``length`` positions (the largest for longer prompts,
        which are prefilled in pieces)."""
        return next((b for b in self.prefill_buckets if length <= b), self.prefill_buckets[-1])

    def context_for(self, position: int) -> int:
        """The smallest rung whose cache holds ``position`` (0-based)."""
        return next(c for c in self.contexts if position < c)

    def prefill(self, seq: int) -> list[ProgramSpec]:
        return [ProgramSpec("prefill", c, seq, seq) for c in self.chunks]

    def decode(self, context: int, seq: int = 1) -> list[ProgramSpec]:
        return [ProgramSpec("decode", c, seq, context) for c in self.chunks]

    def programs(self) -> list[ProgramSpec]:
        """Every program the plan may run (prefill buckets, then the decode ladder)."""
        out = [p for s in self.prefill_buckets for p in self.prefill(s)]
        return out + [p for t in self.contexts for p in self.decode(t)]

    @property
    def dispatches_per_token(self) -> int:
        """Programs one decode step runs (one per chunk)."""
        return len(self.chunks)

    def as_dict(self) -> dict:
        return {
            "chunks": [{"index": c.index, "layers": [c.first, c.stop], "embeds": c.embeds,
                        "head": c.head, "weight_bytes": c.weight_bytes} for c in self.chunks],
            "head_splits": [list(s) for s in self.head_splits],
            "prefill_buckets": list(self.prefill_buckets),
            "contexts": list(self.contexts),
            "max_context": self.max_context,
            "weight_limit": self.weight_limit,
            "dispatches_per_token": self.dispatches_per_token,
        }  # fmt: skip


def head_splits(vocab: int, max_channels: int) -> list[tuple[int, int]]:
    """[start, stop) row ranges of the vocabulary head, each at most ``max_channels`` rows."""
    n = -(-vocab // max_channels)
    size = -(-vocab // n)
    return [(s, min(s + size, vocab)) for s in range(0, vocab, size)]


def layer_bytes(cfg: LMConfig) -> int:
    """fp16 bytes of one decoder layer's weights."""
    c, hd = cfg.hidden, cfg.head_dim
    attn = c * hd * (2 * cfg.heads + 2 * cfg.kv_heads)
    mlp = c * cfg.intermediate * (3 if cfg.mlp == "gated" else 2)
    return 2 * (attn + mlp + 4 * c + 2 * hd)


def embed_bytes(cfg: LMConfig) -> int:
    positions = cfg.max_positions if cfg.positions == "learned" else 0
    return 2 * (cfg.vocab_size + positions) * cfg.hidden


def head_bytes(cfg: LMConfig) -> int:
    return 2 * cfg.vocab_size * cfg.hidden


def weight_bytes(cfg: LMConfig) -> int:
    """fp16 bytes of every weight the model holds once (a tied head counted once)."""
    head = 0 if cfg.tied_embeddings else head_bytes(cfg)
    return embed_bytes(cfg) + cfg.layers * layer_bytes(cfg) + head


def kv_bytes(cfg: LMConfig, context: int, itemsize: int = 4) -> int:
    """The decode cache of ``context`` positions (float32 on the simulator)."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * context * itemsize


def ladder(max_context: int) -> tuple[int, ...]:
    rungs, t = [], FIRST_RUNG
    while t < max_context:
        rungs.append(t)
        t *= 2
    return (*rungs, max_context)


def plan_programs(cfg: LMConfig, target: object, max_context: int) -> ProgramPlan:
    """The programs of ``cfg`` on ``target`` (a `Target`) for caches up to ``max_context``."""
    limits = target.limits  # type: ignore[attr-defined]
    limit = limits.max_program_weight_bytes
    per_layer, head = layer_bytes(cfg), head_bytes(cfg)
    groups: list[list[int]] = [[]]
    used = 0
    for layer in range(cfg.layers):
        if groups[-1] and used + per_layer > limit:
            groups.append([])
            used = 0
        groups[-1].append(layer)
        used += per_layer
    # the embeddings are gathered on the CPU (no engine weight); the head joins the last
    # chunk when it fits beside its layers, else it is a program of its own
    head_alone = used + head > limit
    if head_alone:
        groups.append([])
    chunks = []
    for i, g in enumerate(groups):
        first = g[0] if g else cfg.layers
        stop = g[-1] + 1 if g else cfg.layers
        is_head = i == len(groups) - 1
        nbytes = per_layer * (stop - first) + (head if is_head else 0)
        chunks.append(Chunk(i, first, stop, embeds=i == 0, head=is_head, weight_bytes=nbytes))
    buckets = tuple(b for b in BUCKETS if b < max_context)
    if max_context <= BUCKETS[-1]:
        buckets += (max_context,)
    splits = head_splits(cfg.vocab_size, limits.max_channels)
    return ProgramPlan(tuple(chunks), tuple(splits), buckets, ladder(max_context), max_context, limit)
