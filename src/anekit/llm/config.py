"""A Hugging Face config.json read into the facts the graph builder needs.

Every family is one `Family` record: how its block is made (positions, norm, MLP, biases,
query/key norms, extra norms, fused projections, scaled embeddings) and where its config
says which layers attend through a sliding window. The builder has one code path that reads
the record; a config that asks for something the builder lacks is refused with a message
naming the missing feature. Every value is type- and range-checked and named when wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anekit.errors import ModelError, UnsupportedModelError
from anekit.llm.files import member, read_json

_GELU_TANH = frozenset({"gelu_new", "gelu_pytorch_tanh", "gelu_fast"})
_SILU = frozenset({"silu", "swish"})
CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Family:
    """How one model_type's decoder block is made."""

    prefix: str = "model."  # the checkpoint's tensor-name prefix of the decoder
    positions: str = "rotary"  # "rotary" | "learned"
    norm: str = "rms_norm"  # "rms_norm" | "layer_norm"
    norm_offset: float = 0.0  # Gemma's norms scale by (1 + weight)
    mlp: str = "gated"  # "gated": down(act(gate) * up) | "plain": down(act(up)) (GPT-2)
    activations: frozenset[str] = _SILU
    activation_key: str = "hidden_act"
    default_activation: str = "silu"  # when config.json names none (transformers' default)
    bias: str = "none"  # "all" | "qkv" | "none"
    qk_norm: bool = False  # RMSNorm of each query and key head before the rotation (Qwen3, Gemma 3)
    sandwich: bool = False  # norms after attention and around the MLP (Gemma 3)
    embed_scale: bool = False  # embeddings times sqrt(hidden) (Gemma)
    fused: bool = False  # qkv_proj and gate_up_proj in one tensor each (Phi-3)
    attn_scale_key: str | None = None  # Gemma 3: scores scaled by query_pre_attn_scalar^-0.5
    sliding: str = "none"  # which layers slide: "none" | "all" (the window, when set) | "layer_types"
    tied_default: bool = False


FAMILIES: dict[str, Family] = {
    "gpt2": Family(prefix="transformer.", positions="learned", norm="layer_norm", mlp="plain",
                   activations=_GELU_TANH, activation_key="activation_function",
                   default_activation="gelu_new", bias="all",
                   tied_default=True),
    "llama": Family(),
    "mistral": Family(sliding="all"),
    "qwen2": Family(bias="qkv", sliding="layer_types"),
    "qwen3": Family(qk_norm=True, sliding="layer_types"),
    "gemma3_text": Family(norm_offset=1.0, activations=_GELU_TANH,
                          activation_key="hidden_activation", default_activation="gelu_pytorch_tanh",
                          qk_norm=True, sandwich=True,
                          embed_scale=True, attn_scale_key="query_pre_attn_scalar",
                          sliding="layer_types", tied_default=True),
    "phi3": Family(fused=True, sliding="all"),
}  # fmt: skip


@dataclass(frozen=True)
class Rope:
    """Rotary positions of one kind of layer: base and scaling (``type`` default, linear,
    dynamic or llama3; dynamic equals default within the trained context, the only range
    a model is loaded for)."""

    theta: float
    type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 0


@dataclass(frozen=True)
class LMConfig:
    """The architecture of one decoder-only language model."""

    family: str
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    max_positions: int
    norm_eps: float
    positions: str  # "learned" | "rotary"
    norm: str  # "layer_norm" | "rms_norm"
    mlp: str  # "gated" | "plain"
    activation: str  # "silu" | "gelu_tanh"
    bias: str  # "all" | "qkv" | "none"
    tied_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | None
    rope: Rope | None = None  # full-attention layers (None: learned positions)
    rope_sliding: Rope | None = None  # sliding-window layers, when they differ (Gemma 3)
    windows: tuple[int | None, ...] = ()  # each layer's sliding window (None: full attention)
    norm_offset: float = 0.0
    qk_norm: bool = False
    sandwich: bool = False
    embed_scale: float = 1.0
    fused: bool = False
    attn_scale: float = 0.0  # 0: 1/sqrt(head_dim)

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 = multi-head, >1 = grouped-query attention)."""
        return self.heads // self.kv_heads

    @property
    def rope_theta(self) -> float:
        return self.rope.theta if self.rope else 0.0

    @property
    def prefix(self) -> str:
        return FAMILIES[self.family].prefix

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None

    def layer_rope(self, layer: int) -> Rope | None:
        if self.window(layer) is not None and self.rope_sliding is not None:
            return self.rope_sliding
        return self.rope

    @property
    def scale(self) -> float:
        return self.attn_scale or 1.0 / math.sqrt(self.head_dim)


def read_config(folder: Path) -> LMConfig:
    path = member(folder, CONFIG_FILE, MAX_CONFIG_BYTES)
    if path is None:
        raise ModelError(
            f"no {CONFIG_FILE} in '{folder}'",
            hint="pass a Hugging Face model folder (config.json, *.safetensors, tokenizer files)",
        )
    raw = read_json(path, MAX_CONFIG_BYTES)
    if not isinstance(raw, dict):
        raise ModelError(f"{CONFIG_FILE} holds no JSON object", where=str(path))
    return parse_config(raw, str(path))


def parse_config(raw: dict[str, Any], where: str = CONFIG_FILE) -> LMConfig:
    """An LMConfig from config.json's object; refuses what the builder cannot make."""
    family = raw.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        arch = raw.get("architectures")
        names = ", ".join(a for a in arch if isinstance(a, str)) if isinstance(arch, list) else ""
        shown = family if isinstance(family, str) else repr(family)
        raise UnsupportedModelError(
            f"model_type '{shown}'{f' ({names})' if names else ''} is not a supported language "
            "model family",
            hint=f"supported: {', '.join(FAMILIES)}",
            where=where,
        )
    if family == "gpt2":
        return _gpt2(raw, FAMILIES[family], where)
    return _decoder(raw, family, FAMILIES[family], where)


# Sizes past int32 cannot be tensor dimensions; layer counts past this are no published model
# (the largest have ~128) and would have the configuration alone claim memory per layer.
MAX_SIZE = (1 << 31) - 1
MAX_LAYERS = 1024
_LAYER_KEYS = ("n_layer", "num_hidden_layers")


def _int(raw: dict[str, Any], key: str, where: str, default: int | None = None, *,
         minimum: int = 1) -> int:  # fmt: skip
    value = raw.get(key, default)
    if value is None and default is not None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ModelError(f"'{key}' must be {kind}, got {value!r}", where=where)
    maximum = MAX_LAYERS if key in _LAYER_KEYS else MAX_SIZE
    if value > maximum:
        raise ModelError(f"'{key}' is {value}, more than the {maximum} anekit accepts",
                         where=where, hint="check config.json: no model has this many")  # fmt: skip
    return value


def _float(raw: dict[str, Any], key: str, where: str, default: float) -> float:
    value = raw.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:  # fmt: skip
        raise ModelError(f"'{key}' must be a finite positive number, got {value!r}", where=where)
    return float(value)


def _flag(raw: dict[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelError(f"'{key}' must be true or false, got {value!r}", where=where)
    return value


def _token(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _missing(what: list[str], family: str, where: str) -> None:
    if what:
        raise UnsupportedModelError(
            f"this {family} model needs {'; '.join(what)}, which anekit.llm does not build",
            where=where,
        )


def _activation(raw: dict[str, Any], rec: Family, where: str) -> str:
    act = raw.get(rec.activation_key, rec.default_activation)
    if not isinstance(act, str):
        raise ModelError(f"'{rec.activation_key}' must be a string, got {act!r}", where=where)
    if act not in rec.activations:
        raise UnsupportedModelError(
            f"the activation '{act}' is not built for {next(k for k, v in FAMILIES.items() if v is rec)} "
            f"(supported: {sorted(rec.activations)})",
            where=where,
        )
    return "silu" if act in _SILU else "gelu_tanh"


def _gpt2(raw: dict[str, Any], rec: Family, where: str) -> LMConfig:
    hidden, heads = _int(raw, "n_embd", where), _int(raw, "n_head", where)
    activation = _activation(raw, rec, where)
    missing = []
    if raw.get("scale_attn_by_inverse_layer_idx") or raw.get("reorder_and_upcast_attn"):
        missing.append("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn")
    if raw.get("scale_attn_weights") is False:
        missing.append("attention without the 1/sqrt(head_dim) scale")
    if raw.get("add_cross_attention"):
        missing.append("cross-attention")
    if hidden % heads:
        missing.append(f"n_embd {hidden} divisible by n_head {heads}")
    _missing(missing, "gpt2", where)
    layers = _int(raw, "n_layer", where)
    return LMConfig(
        family="gpt2",
        vocab_size=_int(raw, "vocab_size", where),
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=_int(raw, "n_inner", where, 4 * hidden),
        max_positions=_int(raw, "n_positions", where),
        norm_eps=_float(raw, "layer_norm_epsilon", where, 1e-5),
        positions=rec.positions, norm=rec.norm, mlp=rec.mlp, activation=activation, bias=rec.bias,
        tied_embeddings=True,
        bos_token_id=_token(raw, "bos_token_id"),
        eos_token_id=_token(raw, "eos_token_id"),
        windows=(None,) * layers,
    )  # fmt: skip


def _rope(params: Any, raw: dict[str, Any], theta_key: str, default_theta: float, where: str,
          missing: list[str], max_positions: int) -> Rope:  # fmt: skip
    """One kind of layer's rotary positions from rope_parameters / rope_scaling."""
    if params is not None and not isinstance(params, dict):
        raise ModelError(f"the rotary parameters must be an object, got {params!r}", where=where)
    params = params or {}
    if raw.get(theta_key) is not None:  # a top-level value is checked even when the parameters override it
        _float(raw, theta_key, where, default_theta)
    theta = _float({theta_key: params.get("rope_theta", raw.get(theta_key))}, theta_key, where,
                   default_theta)  # fmt: skip
    kind = params.get("rope_type", params.get("type", "default"))
    if not isinstance(kind, str):
        raise ModelError(f"'rope_type' must be a string, got {kind!r}", where=where)
    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        missing.append(f"partial rotary embeddings (partial_rotary_factor {partial!r})")
    if kind == "default":
        return Rope(theta)
    if kind not in ("linear", "dynamic", "llama3"):
        missing.append(f"the rotary scaling {kind!r} (built: default, linear, dynamic, llama3)")
        return Rope(theta)
    factor = _float(params, "factor", where, 1.0)
    if kind == "dynamic":  # scaling starts past the trained context, which a load never exceeds
        return Rope(theta)
    if kind == "linear":
        return Rope(theta, "linear", factor)
    return Rope(theta, "llama3", factor, _float(params, "low_freq_factor", where, 1.0),
                _float(params, "high_freq_factor", where, 4.0),
                _int(params, "original_max_position_embeddings", where, max_positions))  # fmt: skip


def _windows(raw: dict[str, Any], family: str, rec: Family, layers: int, where: str) -> tuple[int | None, ...]:
    window = raw.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ModelError(f"'sliding_window' must be a positive integer or null, got {window!r}", where=where)
    if rec.sliding == "none" or window is None:
        return (None,) * layers
    if rec.sliding == "all":
        return (window,) * layers
    types = raw.get("layer_types")
    if types is None:  # configs written before layer_types
        if family == "gemma3_text":
            pattern = _int(raw, "sliding_window_pattern", where, 6)
            types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
        elif _flag(raw, "use_sliding_window", where):
            first = _int(raw, "max_window_layers", where, layers, minimum=0)
            types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
        else:
            types = ["full_attention"] * layers
    if not isinstance(types, list) or len(types) != layers or any(
        t not in ("full_attention", "sliding_attention") for t in types
    ):
        raise ModelError(
            f"'layer_types' must list 'full_attention' or 'sliding_attention' for each of the {layers} layers",
            where=where,
        )
    if family in ("qwen2", "qwen3") and raw.get("use_sliding_window") is False:
        return (None,) * layers  # transformers ignores the window unless use_sliding_window
    return tuple(window if t == "sliding_attention" else None for t in types)


def _decoder(raw: dict[str, Any], family: str, rec: Family, where: str) -> LMConfig:
    hidden, heads = _int(raw, "hidden_size", where), _int(raw, "num_attention_heads", where)
    kv_heads = _int(raw, "num_key_value_heads", where, heads)
    layers = _int(raw, "num_hidden_layers", where)
    max_positions = _int(raw, "max_position_embeddings", where)
    if raw.get("head_dim") is not None:
        head_dim = _int(raw, "head_dim", where)
    elif hidden % heads:
        raise ModelError(f"hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                         "and config.json gives no head_dim", where=where)  # fmt: skip
    else:
        head_dim = hidden // heads
    activation = _activation(raw, rec, where)
    missing: list[str] = []
    params = raw.get("rope_parameters") or raw.get("rope_scaling")
    sliding_params = None
    if isinstance(params, dict) and "full_attention" in params:  # per layer type (Gemma 3)
        params, sliding_params = params.get("full_attention"), params.get("sliding_attention")
    rope = _rope(params, raw, "rope_theta", 1e4, where, missing, max_positions)
    rope_sliding = None
    if family == "gemma3_text":
        local = sliding_params if sliding_params is not None else {}
        rope_sliding = _rope(local, {"rope_theta": raw.get("rope_local_base_freq")}, "rope_theta",
                             1e4, where, missing, max_positions)  # fmt: skip
    bias = rec.bias
    if _flag(raw, "attention_bias", where):
        if rec.bias == "none" and family in ("llama", "qwen3", "gemma3_text"):
            bias = "qkvo"
        else:
            missing.append("attention_bias")
    if _flag(raw, "mlp_bias", where):
        missing.append("mlp_bias")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if raw.get(key) is not None:
            missing.append(f"{key}")
    if head_dim % 2:
        missing.append(f"an even head dimension (got {head_dim})")
    if heads % kv_heads:
        missing.append(f"num_attention_heads {heads} divisible by num_key_value_heads {kv_heads}")
    _missing(missing, family, where)
    attn_scale = 0.0
    if rec.attn_scale_key is not None:
        attn_scale = _float(raw, rec.attn_scale_key, where, float(head_dim)) ** -0.5
    return LMConfig(
        family=family,
        vocab_size=_int(raw, "vocab_size", where),
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=_int(raw, "intermediate_size", where),
        max_positions=max_positions,
        norm_eps=_float(raw, "rms_norm_eps", where, 1e-6),
        positions=rec.positions, norm=rec.norm, mlp=rec.mlp, activation=activation, bias=bias,
        tied_embeddings=_flag(raw, "tie_word_embeddings", where, rec.tied_default),
        bos_token_id=_token(raw, "bos_token_id"),
        eos_token_id=_token(raw, "eos_token_id"),
        rope=rope, rope_sliding=rope_sliding,
        windows=_windows(raw, family, rec, layers, where),
        norm_offset=rec.norm_offset, qk_norm=rec.qk_norm, sandwich=rec.sandwich,
        embed_scale=math.sqrt(hidden) if rec.embed_scale else 1.0,
        fused=rec.fused, attn_scale=attn_scale,
    )  # fmt: skip
