"""Prefill and decode graphs of a decoder-only transformer, built on the anekit IR.

Activations are in the engine's [1, C, 1, S] layout (channels, then sequence positions on
the last axis); every projection is a 1x1 convolution. Attention reshapes to
[1, heads, S, head_dim] for the fused attention op with an explicit additive mask (the
engine's fused attention ignores causal masks, Orion constraint #6).

Two program kinds:

- prefill over a bucket of S positions: inputs ``ids`` [1, S], ``positions`` [1, S],
  ``mask`` [1, 1, S, S] and ``last`` [1, 1, 1, S] (one-hot: the position whose logits are
  returned); outputs ``logits_<i>`` and each layer's keys and values ``k_<l>``/``v_<l>``
  [1, kv_heads * head_dim, 1, S], which seed the decode cache;
- decode of one position against a cache of T positions: inputs ``ids`` [1, 1],
  ``positions`` [1, 1], ``mask`` [1, 1, 1, T], ``write`` [1, 1, 1, T] (one-hot: the cache
  slot of this position) and the state ``k_cache_<l>``/``v_cache_<l>``; outputs
  ``logits_<i>`` and ``k_cache_<l>_next``/``v_cache_<l>_next``, the cache with this
  position written in. A session binds each ``*_next`` output to its input, so the cache
  stays resident between steps.

The embedding lookups (token, learned position, rotary tables) are gathers, which the
compiler places in a CPU segment; the vocabulary head is split into convolutions of at
most the target's ``max_channels`` output channels (Orion constraint #16).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import Tensor, constant, graph, input
from anekit.ir.graph import Graph
from anekit.llm.config import LMConfig
from anekit.llm.weights import WeightSet
from anekit.passes.decompose.norms import SCALE_FLOOR

# A projection's weights in torch.nn.Linear form: [out, in] and an optional bias [out].
Linear = tuple[np.ndarray, np.ndarray | None]


@dataclass(frozen=True)
class LayerWeights:
    norm1: tuple[np.ndarray, np.ndarray | None]
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    norm2: tuple[np.ndarray, np.ndarray | None]
    up: Linear  # GPT-2: c_fc; SwiGLU: up_proj
    gate: Linear | None  # SwiGLU only
    down: Linear


@dataclass(frozen=True)
class ModelWeights:
    embed: np.ndarray  # [vocab, hidden]
    positions: np.ndarray | None  # learned [max_positions, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: tuple[np.ndarray, np.ndarray | None]
    head: np.ndarray  # [vocab, hidden]


PREFIXES = {"gpt2": ("transformer.",), "llama": ("model.",), "mistral": ("model.",),
            "qwen2": ("model.",)}  # fmt: skip


def model_weights(cfg: LMConfig, ws: WeightSet) -> ModelWeights:
    """The checkpoint's tensors arranged per layer, shapes checked against the config."""
    return _gpt2_weights(cfg, ws) if cfg.family == "gpt2" else _llama_weights(cfg, ws)


def _gpt2_weights(cfg: LMConfig, ws: WeightSet) -> ModelWeights:
    c, f = cfg.hidden, cfg.intermediate

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return ws.take(f"{name}.weight", (c,)), ws.take(f"{name}.bias", (c,))

    def conv1d(name: str, n_in: int, n_out: int) -> Linear:  # HF Conv1D stores [in, out]
        return ws.take(f"{name}.weight", (n_in, n_out)).T, ws.take(f"{name}.bias", (n_out,))

    layers = []
    for i in range(cfg.layers):
        p = f"h.{i}"
        w, b = conv1d(f"{p}.attn.c_attn", c, 3 * c)
        q, k, v = ((w[j * c : (j + 1) * c], b[j * c : (j + 1) * c]) for j in range(3))  # type: ignore[index]
        layers.append(LayerWeights(
            norm(f"{p}.ln_1"), q, k, v, conv1d(f"{p}.attn.c_proj", c, c), norm(f"{p}.ln_2"),
            conv1d(f"{p}.mlp.c_fc", c, f), None, conv1d(f"{p}.mlp.c_proj", f, c),
        ))  # fmt: skip
    embed = ws.take("wte.weight", (cfg.vocab_size, c))
    return ModelWeights(
        embed, ws.take("wpe.weight", (cfg.max_positions, c)), tuple(layers), norm("ln_f"), embed
    )


def _llama_weights(cfg: LMConfig, ws: WeightSet) -> ModelWeights:
    c, hd = cfg.hidden, cfg.head_dim
    qkv_bias = cfg.bias == "qkv"

    def lin(name: str, n_out: int, n_in: int, bias: bool = False) -> Linear:
        w = ws.take(f"{name}.weight", (n_out, n_in))
        return w, ws.take(f"{name}.bias", (n_out,)) if bias else None

    layers = []
    for i in range(cfg.layers):
        p = f"layers.{i}"
        a, m = f"{p}.self_attn", f"{p}.mlp"
        layers.append(LayerWeights(
            (ws.take(f"{p}.input_layernorm.weight", (c,)), None),
            lin(f"{a}.q_proj", cfg.heads * hd, c, qkv_bias),
            lin(f"{a}.k_proj", cfg.kv_heads * hd, c, qkv_bias),
            lin(f"{a}.v_proj", cfg.kv_heads * hd, c, qkv_bias),
            lin(f"{a}.o_proj", c, cfg.heads * hd),
            (ws.take(f"{p}.post_attention_layernorm.weight", (c,)), None),
            lin(f"{m}.up_proj", cfg.intermediate, c), lin(f"{m}.gate_proj", cfg.intermediate, c),
            lin(f"{m}.down_proj", c, cfg.intermediate),
        ))  # fmt: skip
    embed = ws.take("embed_tokens.weight", (cfg.vocab_size, c))
    head = embed if cfg.tied_embeddings else ws.take("lm_head.weight", (cfg.vocab_size, c))
    return ModelWeights(embed, None, tuple(layers), (ws.take("norm.weight", (c,)), None), head)


def rotary_tables(cfg: LMConfig, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [length, head_dim] of rotary positions (each frequency on both halves)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / cfg.head_dim))
    angles = np.outer(np.arange(length, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def head_chunks(vocab: int, max_channels: int) -> list[tuple[int, int]]:
    """[start, stop) row ranges of the vocabulary head, each at most ``max_channels`` rows."""
    n = math.ceil(vocab / max_channels)
    size = math.ceil(vocab / n)
    return [(s, min(s + size, vocab)) for s in range(0, vocab, size)]


def conv_weight(name: str, weight: np.ndarray) -> Tensor:
    """A [out, in] weight as the 1x1 convolution's [out, in, 1, 1] constant."""
    return constant(weight[:, :, None, None], name=name)


class _Builder:
    """Records one program's ops; ``cfg`` and weights shared by every program of a model."""

    def __init__(self, cfg: LMConfig, w: ModelWeights, max_context: int):
        self.cfg, self.w = cfg, w
        self.max_context = max_context

    # --- pieces ----------------------------------------------------------------------------

    def proj(self, x: Tensor, lin: Linear, name: str) -> Tensor:
        weight, bias = lin
        b = None if bias is None else constant(bias, name=f"{name}.bias")
        return ops.conv2d(x, conv_weight(f"{name}.weight", weight), b, name=name)

    def norm(self, x: Tensor, params: tuple[np.ndarray, np.ndarray | None], name: str) -> Tensor:
        """LayerNorm or RMSNorm over the channel axis of [1, C, 1, S], fp16-safe at any scale.

        The IR's norm ops normalise trailing axes, not the channel axis of this layout, so the
        norm is written out here in the compiler's own fp16-safe form
        (`anekit.passes.decompose.norms.normalize`): the deviations are divided by their peak
        before they are squared, since real checkpoints' residual streams exceed 256, where a
        plain x*x overflows fp16.
        """
        weight, bias = params
        eps = self.cfg.norm_eps
        if self.cfg.norm == "layer_norm":
            x = x - ops.reduce_mean(x, axes=1)
        peak = ops.maximum(ops.reduce_max(ops.abs(x), axes=1), np.float32(SCALE_FLOOR))
        inv = ops.reciprocal(peak)
        unit = x * inv  # |unit| <= 1
        var = ops.reduce_mean(unit * unit, axes=1)
        std = ops.sqrt(var + (inv * np.float32(eps)) * inv)  # eps / peak^2, in fp16 range
        y = ops.div(unit, std) * constant(weight.reshape(1, -1, 1, 1))
        return y if bias is None else y + constant(bias.reshape(1, -1, 1, 1))

    def embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        """Token (and learned position) embeddings as [1, C, 1, S]."""
        s = ids.shape[1]
        x = ops.gather(constant(self.w.embed, name="embed_tokens"), ids, axis=0)  # [1, S, C]
        if self.w.positions is not None:
            table = self.w.positions[: self.max_context]
            x = x + ops.gather(constant(table, name="embed_positions"), positions, axis=0)
        return ops.reshape(ops.transpose(x, (0, 2, 1)), (1, self.cfg.hidden, 1, s))

    def rotary(self, positions: Tensor) -> tuple[Tensor, Tensor] | None:
        """cos and sin of each position as [1, 1, head_dim, S] (None for learned positions)."""
        if self.cfg.positions != "rotary":
            return None
        cos, sin = rotary_tables(self.cfg, self.max_context)
        s = positions.shape[1]

        def table(values: np.ndarray, name: str) -> Tensor:
            t = ops.gather(constant(values, name=name), positions, axis=0)  # [1, S, hd]
            return ops.reshape(ops.transpose(t, (0, 2, 1)), (1, 1, self.cfg.head_dim, s))

        return table(cos, "rope_cos"), table(sin, "rope_sin")

    def heads(self, x: Tensor, n: int, rope: tuple[Tensor, Tensor] | None) -> Tensor:
        """[1, n*hd, 1, S] -> [1, n, hd, S], rotated when the model uses rotary positions."""
        hd, s = self.cfg.head_dim, x.shape[3]
        x = ops.reshape(x, (1, n, hd, s))
        if rope is None:
            return x
        cos, sin = rope
        lo = ops.slice(x, [0], [hd // 2], axes=[2])
        hi = ops.slice(x, [hd // 2], [hd], axes=[2])
        rotated = ops.concat([-hi, lo], axis=2)
        return x * cos + rotated * sin

    def expand_kv(self, kv: Tensor) -> Tensor:
        """[1, kv_heads, T, hd] -> [1, heads, T, hd] for grouped-query attention."""
        g = self.cfg.group
        if g == 1:
            return kv
        _, n, t, hd = kv.shape
        flat = ops.reshape(kv, (1, n, 1, t * hd))  # the engine has no tile; concat copies
        return ops.reshape(ops.concat([flat] * g, axis=2), (1, n * g, t, hd))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """q [1, H, hd, S], k and v [1, KV*hd, 1, T] -> [1, H*hd, 1, S]."""
        cfg = self.cfg
        s, t = q.shape[3], k.shape[3]

        def seq_major(x: Tensor) -> Tensor:  # [1, KV*hd, 1, T] -> [1, H, T, hd]
            x = ops.transpose(ops.reshape(x, (1, cfg.kv_heads, cfg.head_dim, t)), (0, 1, 3, 2))
            return self.expand_kv(x)

        out = ops.attention(
            ops.transpose(q, (0, 1, 3, 2)), seq_major(k), seq_major(v), mask,
            scale=1.0 / math.sqrt(cfg.head_dim),
        )  # fmt: skip
        return ops.reshape(ops.transpose(out, (0, 1, 3, 2)), (1, cfg.heads * cfg.head_dim, 1, s))

    def mlp(self, x: Tensor, lw: LayerWeights, name: str) -> Tensor:
        up = self.proj(x, lw.up, f"{name}.up")
        if lw.gate is None:
            hidden = ops.gelu(up, approximate="tanh")
        else:
            hidden = ops.silu(self.proj(x, lw.gate, f"{name}.gate")) * up
        return self.proj(hidden, lw.down, f"{name}.down")

    def logits(self, x: Tensor, max_channels: int) -> list[Tensor]:
        x = self.norm(x, self.w.final_norm, "final_norm")
        return [
            ops.conv2d(x, conv_weight(f"head_{i}.weight", self.w.head[a:b]), name=f"logits_{i}")
            for i, (a, b) in enumerate(head_chunks(self.cfg.vocab_size, max_channels))
        ]

    # --- programs ----------------------------------------------------------------------------

    def layer(
        self, x: Tensor, i: int, rope: tuple[Tensor, Tensor] | None,
        kv: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], mask: Tensor,
    ) -> Tensor:  # fmt: skip
        """One block; ``kv(k_new, v_new)`` returns the keys and values to attend over."""
        cfg, lw, name = self.cfg, self.w.layers[i], f"layers.{i}"
        h = self.norm(x, lw.norm1, f"{name}.norm1")
        q = self.heads(self.proj(h, lw.q, f"{name}.q"), cfg.heads, rope)
        k = self.heads(self.proj(h, lw.k, f"{name}.k"), cfg.kv_heads, rope)
        s = k.shape[3]
        k = ops.reshape(k, (1, cfg.kv_heads * cfg.head_dim, 1, s))
        keys, values = kv(k, self.proj(h, lw.v, f"{name}.v"))
        x = x + self.proj(self.attend(q, keys, values, mask), lw.o, f"{name}.o")
        return x + self.mlp(self.norm(x, lw.norm2, f"{name}.norm2"), lw, f"{name}.mlp")


def prefill_graph(
    cfg: LMConfig, w: ModelWeights, seq: int, max_context: int, max_channels: int,
) -> Graph:  # fmt: skip
    b = _Builder(cfg, w, max_context)
    ids, positions = input("ids", (1, seq), "int32"), input("positions", (1, seq), "int32")
    mask, last = input("mask", (1, 1, seq, seq)), input("last", (1, 1, 1, seq))
    rope = b.rotary(positions)
    x = b.embed(ids, positions)
    caches: list[Tensor] = []

    def keep(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        caches.extend([k, v])
        return k, v

    for i in range(cfg.layers):
        x = b.layer(x, i, rope, keep, mask)
    x = ops.reduce_sum(x * last, axes=3)  # the position whose logits are wanted
    outputs = b.logits(x, max_channels)
    for i in range(cfg.layers):
        outputs += [ops.identity(caches[2 * i], name=f"k_{i}"),
                    ops.identity(caches[2 * i + 1], name=f"v_{i}")]  # fmt: skip
    return graph(outputs, inputs=[ids, positions, mask, last], name=f"{cfg.family}_prefill_{seq}")


def decode_graph(
    cfg: LMConfig, w: ModelWeights, max_context: int, max_channels: int,
) -> Graph:  # fmt: skip
    b = _Builder(cfg, w, max_context)
    t, width = max_context, cfg.kv_heads * cfg.head_dim
    ids, positions = input("ids", (1, 1), "int32"), input("positions", (1, 1), "int32")
    mask, write = input("mask", (1, 1, 1, t)), input("write", (1, 1, 1, t))
    state = [input(f"{kind}_cache_{i}", (1, width, 1, t)) for i in range(cfg.layers)
             for kind in ("k", "v")]  # fmt: skip
    keep = 1.0 - write
    rope = b.rotary(positions)
    x = b.embed(ids, positions)
    nexts: list[Tensor] = []

    for i in range(cfg.layers):
        k_cache, v_cache = state[2 * i], state[2 * i + 1]

        def kv(k: Tensor, v: Tensor, k_cache: Tensor = k_cache, v_cache: Tensor = v_cache,
               i: int = i) -> tuple[Tensor, Tensor]:  # fmt: skip
            k_next = ops.add(k_cache * keep, k * write, name=f"k_cache_{i}_next")
            v_next = ops.add(v_cache * keep, v * write, name=f"v_cache_{i}_next")
            nexts.extend([k_next, v_next])
            return k_next, v_next

        x = b.layer(x, i, rope, kv, mask)
    outputs = b.logits(x, max_channels) + nexts
    return graph(outputs, inputs=[ids, positions, mask, write, *state], name=f"{cfg.family}_decode")
