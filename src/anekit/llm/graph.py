"""The programs of a decoder-only transformer, built on the anekit IR from a `ProgramSpec`.

Activations are in the engine's [1, C, 1, S] layout (channels, then sequence positions on
the last axis); every projection is a 1x1 convolution. Attention reshapes to
[1, heads, S, head_dim] for the fused attention op with an explicit additive mask (the
engine's fused attention ignores causal masks, Orion constraint #6).

A program runs the layers of one chunk (`anekit.llm.plan`). Its inputs: ``ids`` [1, S]
(the first chunk) or ``hidden`` [1, hidden, 1, S]; ``positions`` [1, S]; ``mask`` (and
``mask_sliding`` when a layer of the model attends through a sliding window); and

- prefill: ``mask`` [1, 1, S, S], and ``last`` [1, 1, 1, S] in the head's chunk (one-hot:
  the position whose logits are returned); outputs each layer's ``k_<l>``/``v_<l>``
  [1, kv_heads * head_dim, 1, S], which seed the decode cache;
- decode of S positions against a cache of T: ``mask`` [1, 1, S, T], ``write``
  [1, 1, S, T] (row s one-hot at the cache slot of position s), ``last`` when S > 1, and
  the state ``k_cache_<l>``/``v_cache_<l>`` [1, W, 1, T]; outputs ``k_cache_<l>_next``/
  ``v_cache_<l>_next``, the cache with these positions written in. A session binds each
  ``*_next`` output to its input, so the cache stays resident between steps.

The head's chunk outputs ``logits_<i>`` (the vocabulary head cut under the chip's
``max_channels``); other chunks output ``hidden``. The embedding lookups (tokens, learned
positions, rotary tables) are gathers, which the compiler places in a CPU segment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from anekit.float16 import share
from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import Tensor, graph, input
from anekit.ir.dtypes import DType
from anekit.ir.graph import Graph
from anekit.ir.registry import TensorType
from anekit.llm.config import LMConfig, Rope
from anekit.llm.plan import ProgramSpec, head_splits
from anekit.llm.weights import Checkpoint
from anekit.passes.decompose.norms import SCALE_FLOOR

# A projection's weights in torch.nn.Linear form: [out, in] and an optional bias [out].
Linear = tuple[np.ndarray, np.ndarray | None]
Norm = tuple[np.ndarray, np.ndarray | None]


@dataclass(frozen=True)
class LayerWeights:
    norm1: Norm
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    norm2: Norm  # before the MLP
    up: Linear  # GPT-2: c_fc; gated: up_proj
    gate: Linear | None  # gated MLPs only
    down: Linear
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    attn_out_norm: Norm | None = None  # Gemma 3: post_attention_layernorm
    mlp_out_norm: Norm | None = None  # Gemma 3: post_feedforward_layernorm


@dataclass(frozen=True)
class ModelWeights:
    """A model's weights: fp16 values held once as read-only float32, which every program uses."""

    embed: np.ndarray  # [vocab, hidden]
    positions: np.ndarray | None  # learned [max_positions, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: Norm
    head: np.ndarray  # [vocab, hidden]


def model_weights(cfg: LMConfig, ckpt: Checkpoint) -> ModelWeights:
    """The checkpoint's tensors arranged per layer, shapes checked against the config."""
    return _gpt2_weights(cfg, ckpt) if cfg.family == "gpt2" else _decoder_weights(cfg, ckpt)


def _gpt2_weights(cfg: LMConfig, ws: Checkpoint) -> ModelWeights:
    c, f = cfg.hidden, cfg.intermediate

    def norm(name: str) -> Norm:
        return ws.take(f"{name}.weight", (c,)), ws.take(f"{name}.bias", (c,))

    def conv1d(name: str, n_in: int, n_out: int) -> Linear:  # HF Conv1D stores [in, out]
        weight = share(np.ascontiguousarray(ws.take(f"{name}.weight", (n_in, n_out)).T))
        return weight, ws.take(f"{name}.bias", (n_out,))

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


def _decoder_weights(cfg: LMConfig, ws: Checkpoint) -> ModelWeights:
    c, hd, inter = cfg.hidden, cfg.head_dim, cfg.intermediate
    nq, nkv = cfg.heads * hd, cfg.kv_heads * hd

    def lin(name: str, n_out: int, n_in: int, bias: bool = False) -> Linear:
        w = ws.take(f"{name}.weight", (n_out, n_in))
        return w, ws.take(f"{name}.bias", (n_out,)) if bias else None

    def norm(name: str, size: int = c) -> Norm:
        return ws.take(f"{name}.weight", (size,)), None

    qkv_bias, o_bias = cfg.bias in ("qkv", "qkvo"), cfg.bias == "qkvo"
    layers = []
    for i in range(cfg.layers):
        p = f"layers.{i}"
        a, m = f"{p}.self_attn", f"{p}.mlp"
        if cfg.fused:  # Phi-3: one [q; k; v] and one [gate; up] matrix
            qkv, _ = lin(f"{a}.qkv_proj", nq + 2 * nkv, c)
            q, k, v = (qkv[:nq], None), (qkv[nq : nq + nkv], None), (qkv[nq + nkv :], None)
            gate_up, _ = lin(f"{m}.gate_up_proj", 2 * inter, c)
            gate, up = (gate_up[:inter], None), (gate_up[inter:], None)
        else:
            q = lin(f"{a}.q_proj", nq, c, qkv_bias)
            k = lin(f"{a}.k_proj", nkv, c, qkv_bias)
            v = lin(f"{a}.v_proj", nkv, c, qkv_bias)
            gate, up = lin(f"{m}.gate_proj", inter, c), lin(f"{m}.up_proj", inter, c)
        qk = (ws.take(f"{a}.q_norm.weight", (hd,)), ws.take(f"{a}.k_norm.weight", (hd,))) \
            if cfg.qk_norm else (None, None)  # fmt: skip
        if cfg.sandwich:
            norm2, around = norm(f"{p}.pre_feedforward_layernorm"), (
                norm(f"{p}.post_attention_layernorm"), norm(f"{p}.post_feedforward_layernorm"))
        else:
            norm2, around = norm(f"{p}.post_attention_layernorm"), (None, None)
        layers.append(LayerWeights(
            norm(f"{p}.input_layernorm"), q, k, v, lin(f"{a}.o_proj", c, nq, o_bias), norm2,
            up, gate, lin(f"{m}.down_proj", c, inter), qk[0], qk[1], around[0], around[1],
        ))  # fmt: skip
    embed = ws.take("embed_tokens.weight", (cfg.vocab_size, c))
    head = embed if cfg.tied_embeddings else ws.take("lm_head.weight", (cfg.vocab_size, c))
    return ModelWeights(embed, None, tuple(layers), norm("norm"), head)


def inverse_frequencies(rope: Rope, head_dim: int) -> np.ndarray:
    """The rotation rate of each of the head's half-dimensions, with the rotary scaling
    applied as transformers computes it (linear: divided by the factor; llama3: long
    wavelengths divided by the factor, medium ones blended)."""
    inv = 1.0 / (rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if rope.type == "linear":
        return inv / rope.factor
    if rope.type == "llama3":
        old = rope.original_max_positions
        low_wavelen, high_wavelen = old / rope.low_freq_factor, old / rope.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / rope.factor, inv)
        smooth = (old / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, blended, scaled)
    return inv


def rotary_tables(rope: Rope, head_dim: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [length, head_dim] of rotary positions (each frequency on both halves)."""
    angles = np.outer(np.arange(length, dtype=np.float64), inverse_frequencies(rope, head_dim))
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _const(value: np.ndarray, name: str | None = None) -> Tensor:
    """A weight as an IR constant. The model's arrays (fp16, read-only,
    `anekit.float16.share`d) are used in place, so every program's graph holds the same
    copy; anything else is converted to float32."""
    if value.dtype != np.float16 or not value.flags.c_contiguous:
        value = np.ascontiguousarray(value, dtype=np.float32)
    # typed fp32 like the activations it meets (the engine computes in fp16 either way); the
    # compiler writes it to the fp16 weight file as it is
    return Tensor(TensorType(value.shape, DType.FP32), name=name, array=value)


def conv_weight(name: str, weight: np.ndarray) -> Tensor:
    """A [out, in] weight as the 1x1 convolution's [out, in, 1, 1] constant."""
    return _const(weight[:, :, None, None], name=name)


Rotary = tuple[Tensor, Tensor]


class _Builder:
    """Records one program's ops; ``cfg`` and weights shared by every program of a model."""

    def __init__(self, cfg: LMConfig, w: ModelWeights, max_context: int):
        self.cfg, self.w = cfg, w
        self.max_context = max_context

    # --- pieces ----------------------------------------------------------------------------

    def proj(self, x: Tensor, lin: Linear, name: str) -> Tensor:
        weight, bias = lin
        b = None if bias is None else _const(bias, name=f"{name}.bias")
        return ops.conv2d(x, conv_weight(f"{name}.weight", weight), b, name=name)

    def norm(self, x: Tensor, params: Norm, name: str, axis: int = 1) -> Tensor:
        """LayerNorm or RMSNorm over ``axis`` (the channels of [1, C, 1, S], or a head's
        dimensions), fp16-safe at any scale.

        The IR's norm ops normalise trailing axes, not the channel axis of this layout, so the
        norm is written out here in the compiler's own fp16-safe form
        (`anekit.passes.decompose.norms.normalize`): the deviations are divided by their peak
        before they are squared, since real checkpoints' residual streams exceed 256, where a
        plain x*x overflows fp16.
        """
        weight, bias = params
        eps = self.cfg.norm_eps
        if self.cfg.norm == "layer_norm":
            x = x - ops.reduce_mean(x, axes=axis)
        peak = ops.maximum(ops.reduce_max(ops.abs(x), axes=axis), np.float32(SCALE_FLOOR))
        inv = ops.reciprocal(peak)
        unit = x * inv  # |unit| <= 1
        var = ops.reduce_mean(unit * unit, axes=axis)
        std = ops.sqrt(var + (inv * np.float32(eps)) * inv)  # eps / peak^2, in fp16 range
        shape = [1, 1, 1, 1]
        shape[axis] = -1
        scale = weight.astype(np.float32) + np.float32(self.cfg.norm_offset)
        y = ops.div(unit, std) * _const(scale.reshape(shape))
        return y if bias is None else y + _const(bias.reshape(shape))

    def embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        """Token (and learned position) embeddings as [1, C, 1, S]."""
        s = ids.shape[1]
        x = ops.gather(_const(self.w.embed, name="embed_tokens"), ids, axis=0)  # [1, S, C]
        if self.cfg.embed_scale != 1.0:
            x = x * np.float32(self.cfg.embed_scale)
        if self.w.positions is not None:
            table = self.w.positions[: self.max_context]
            x = x + ops.gather(_const(table, name="embed_positions"), positions, axis=0)
        return ops.reshape(ops.transpose(x, (0, 2, 1)), (1, self.cfg.hidden, 1, s))

    def rotary(self, positions: Tensor) -> dict[Rope, Rotary]:
        """cos and sin of each position as [1, 1, head_dim, S], per kind of rotary layer."""
        cfg = self.cfg
        if cfg.positions != "rotary":
            return {}
        s = positions.shape[1]
        tables: dict[Rope, Rotary] = {}
        for i in range(cfg.layers):
            rope = cfg.layer_rope(i)
            if rope is None or rope in tables:
                continue
            cos, sin = rotary_tables(rope, cfg.head_dim, self.max_context)
            tag = f"_{len(tables)}" if tables else ""

            def table(values: np.ndarray, name: str) -> Tensor:
                t = ops.gather(_const(values, name=name), positions, axis=0)  # [1, S, hd]
                return ops.reshape(ops.transpose(t, (0, 2, 1)), (1, 1, cfg.head_dim, s))

            tables[rope] = (table(cos, f"rope_cos{tag}"), table(sin, f"rope_sin{tag}"))
        return tables

    def heads(self, x: Tensor, n: int, rope: Rotary | None, norm: np.ndarray | None, name: str) -> Tensor:
        """[1, n*hd, 1, S] -> [1, n, hd, S], each head normed (Qwen3, Gemma 3) and rotated."""
        hd, s = self.cfg.head_dim, x.shape[3]
        x = ops.reshape(x, (1, n, hd, s))
        if norm is not None:
            x = self.norm(x, (norm, None), name, axis=2)
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
            ops.transpose(q, (0, 1, 3, 2)), seq_major(k), seq_major(v), mask, scale=cfg.scale,
        )  # fmt: skip
        return ops.reshape(ops.transpose(out, (0, 1, 3, 2)), (1, cfg.heads * cfg.head_dim, 1, s))

    def act(self, x: Tensor) -> Tensor:
        return ops.silu(x) if self.cfg.activation == "silu" else ops.gelu(x, approximate="tanh")

    def mlp(self, x: Tensor, lw: LayerWeights, name: str) -> Tensor:
        up = self.proj(x, lw.up, f"{name}.up")
        if lw.gate is None:
            hidden = self.act(up)
        else:
            hidden = self.act(self.proj(x, lw.gate, f"{name}.gate")) * up
        return self.proj(hidden, lw.down, f"{name}.down")

    def logits(self, x: Tensor, max_channels: int) -> list[Tensor]:
        x = self.norm(x, self.w.final_norm, "final_norm")
        return [
            ops.conv2d(x, conv_weight(f"head_{i}.weight", self.w.head[a:b]), name=f"logits_{i}")
            for i, (a, b) in enumerate(head_splits(self.cfg.vocab_size, max_channels))
        ]

    def layer(
        self, x: Tensor, i: int, rope: dict[Rope, Rotary],
        kv: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], masks: dict[bool, Tensor],
    ) -> Tensor:  # fmt: skip
        """One block; ``kv(k_new, v_new)`` returns the keys and values to attend over."""
        cfg, lw, name = self.cfg, self.w.layers[i], f"layers.{i}"
        layer_rope = cfg.layer_rope(i)
        r = rope.get(layer_rope) if layer_rope is not None else None
        h = self.norm(x, lw.norm1, f"{name}.norm1")
        q = self.heads(self.proj(h, lw.q, f"{name}.q"), cfg.heads, r, lw.q_norm, f"{name}.q_norm")
        k = self.heads(self.proj(h, lw.k, f"{name}.k"), cfg.kv_heads, r, lw.k_norm, f"{name}.k_norm")
        s = k.shape[3]
        k = ops.reshape(k, (1, cfg.kv_heads * cfg.head_dim, 1, s))
        keys, values = kv(k, self.proj(h, lw.v, f"{name}.v"))
        attn = self.proj(self.attend(q, keys, values, masks[cfg.window(i) is not None]), lw.o, f"{name}.o")
        if lw.attn_out_norm is not None:
            attn = self.norm(attn, lw.attn_out_norm, f"{name}.attn_out_norm")
        x = x + attn
        out = self.mlp(self.norm(x, lw.norm2, f"{name}.norm2"), lw, f"{name}.mlp")
        if lw.mlp_out_norm is not None:
            out = self.norm(out, lw.mlp_out_norm, f"{name}.mlp_out_norm")
        return x + out


def slides(cfg: LMConfig, context: int) -> bool:
    """True when some layer's window is shorter than the context (a second mask is fed)."""
    return any(w is not None and w < context for w in cfg.windows)


def program_graph(
    cfg: LMConfig, w: ModelWeights, spec: ProgramSpec, max_context: int, max_channels: int,
) -> Graph:  # fmt: skip
    """The IR graph of one program of a plan (`anekit.llm.plan.ProgramSpec`)."""
    b = _Builder(cfg, w, max_context)
    chunk, s = spec.chunk, spec.seq
    t = s if spec.kind == "prefill" else spec.context
    positions = input("positions", (1, s), "int32")
    first = input("ids", (1, s), "int32") if chunk.embeds else input("hidden", (1, cfg.hidden, 1, s))
    inputs = [first, positions, input("mask", (1, 1, s, t))]
    masks = {False: inputs[2], True: inputs[2]}
    if slides(cfg, max_context):
        masks[True] = input("mask_sliding", (1, 1, s, t))
        inputs.append(masks[True])
    last = input("last", (1, 1, 1, s)) if chunk.head and (spec.kind == "prefill" or s > 1) else None
    if last is not None:
        inputs.append(last)
    rope = b.rotary(positions)
    x = b.embed(first, positions) if chunk.embeds else first
    caches: list[Tensor] = []
    if spec.kind == "prefill":
        def keep(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            caches.extend([k, v])
            return k, v

        for i in chunk.layers:
            x = b.layer(x, i, rope, keep, masks)
        kv_outputs = [ops.identity(c, name=f"{kind}_{i}") for i, pair in zip(chunk.layers, _pairs(caches), strict=True)
                      for kind, c in zip("kv", pair, strict=True)]  # fmt: skip
    else:
        write = input("write", (1, 1, s, t))
        inputs.append(write)
        width = cfg.kv_heads * cfg.head_dim
        state = {(kind, i): input(f"{kind}_cache_{i}", (1, width, 1, t))
                 for i in chunk.layers for kind in "kv"}  # fmt: skip
        inputs.extend(state.values())
        keep_mask = 1.0 - (write if s == 1 else ops.reduce_sum(write, axes=2))  # [1, 1, 1, T]

        def scatter(new: Tensor) -> Tensor:  # [1, W, 1, S] -> [1, W, 1, T] at the written slots
            if s == 1:
                return new * write
            flat = ops.reshape(new, (1, 1, width, s))
            return ops.reshape(ops.matmul(flat, write), (1, width, 1, t))

        for i in chunk.layers:
            def kv(k: Tensor, v: Tensor, i: int = i) -> tuple[Tensor, Tensor]:
                k_next = ops.add(state["k", i] * keep_mask, scatter(k), name=f"k_cache_{i}_next")
                v_next = ops.add(state["v", i] * keep_mask, scatter(v), name=f"v_cache_{i}_next")
                caches.extend([k_next, v_next])
                return k_next, v_next

            x = b.layer(x, i, rope, kv, masks)
        kv_outputs = caches
    if chunk.head:
        if last is not None:  # the one position whose logits are wanted
            x = ops.reduce_sum(x * last, axes=3)
        outputs = b.logits(x, max_channels)
    else:
        outputs = [ops.identity(x, name="hidden_out")]
    return graph(outputs + kv_outputs, inputs=inputs, name=f"{cfg.family}_{spec.name}")


def _pairs(items: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    return [(items[j], items[j + 1]) for j in range(0, len(items), 2)]
