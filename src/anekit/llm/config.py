"""A Hugging Face config.json read into the facts the graph builder needs, per family.

Each family names how its block is made (positions, norm, MLP, attention) so the builder
has one code path; a config that asks for something the builder lacks is refused with a
message naming the missing feature.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anekit.errors import ModelError, UnsupportedModelError
from anekit.llm.files import member, read_json

# model_type -> the family's block recipe
FAMILIES: dict[str, dict[str, str]] = {
    "gpt2": {"positions": "learned", "norm": "layer_norm", "mlp": "gelu", "bias": "all"},
    "llama": {"positions": "rotary", "norm": "rms_norm", "mlp": "swiglu", "bias": "none"},
    "mistral": {"positions": "rotary", "norm": "rms_norm", "mlp": "swiglu", "bias": "none"},
    "qwen2": {"positions": "rotary", "norm": "rms_norm", "mlp": "swiglu", "bias": "qkv"},
}
# activation names of config.json the builder implements, per MLP kind
_GELU_TANH = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"}
_SILU = {"silu", "swish"}
CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 1 << 20


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
    mlp: str  # "gelu" (tanh form) | "swiglu"
    bias: str  # "all" | "qkv" | "none"
    rope_theta: float
    tied_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | None

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 = multi-head, >1 = grouped-query attention)."""
        return self.heads // self.kv_heads


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
    if family not in FAMILIES:
        arch = raw.get("architectures") or [family]
        raise UnsupportedModelError(
            f"model_type '{family}' ({', '.join(map(str, arch))}) is not a supported language "
            "model family",
            hint=f"supported: {', '.join(FAMILIES)}",
            where=where,
        )
    recipe = FAMILIES[family]
    if family == "gpt2":
        return _gpt2(raw, recipe, where)
    return _llama_like(raw, family, recipe, where)


def _int(raw: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelError(f"'{key}' must be a positive integer, got {value!r}", where=where)
    return value


def _float(raw: dict[str, Any], key: str, where: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ModelError(f"'{key}' must be a positive number, got {value!r}", where=where)
    return float(value)


def _token(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _missing(what: list[str], family: str, where: str) -> None:
    if what:
        raise UnsupportedModelError(
            f"this {family} model needs {'; '.join(what)}, which anekit.llm does not build",
            where=where,
        )


def _gpt2(raw: dict[str, Any], recipe: dict[str, str], where: str) -> LMConfig:
    hidden, heads = _int(raw, "n_embd", where), _int(raw, "n_head", where)
    act = raw.get("activation_function", "gelu_new")
    missing = []
    if act not in _GELU_TANH:
        missing.append(f"the activation '{act}' (supported: {sorted(_GELU_TANH)})")
    if raw.get("scale_attn_by_inverse_layer_idx") or raw.get("reorder_and_upcast_attn"):
        missing.append("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn")
    if raw.get("scale_attn_weights") is False:
        missing.append("attention without the 1/sqrt(head_dim) scale")
    if raw.get("add_cross_attention"):
        missing.append("cross-attention")
    if hidden % heads:
        missing.append(f"n_embd {hidden} divisible by n_head {heads}")
    _missing(missing, "gpt2", where)
    return LMConfig(
        family="gpt2",
        vocab_size=_int(raw, "vocab_size", where),
        hidden=hidden,
        layers=_int(raw, "n_layer", where),
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=_int(raw, "n_inner", where, 4 * hidden) if raw.get("n_inner") else 4 * hidden,
        max_positions=_int(raw, "n_positions", where),
        norm_eps=_float(raw, "layer_norm_epsilon", where, 1e-5),
        rope_theta=0.0,
        tied_embeddings=True,
        bos_token_id=_token(raw, "bos_token_id"),
        eos_token_id=_token(raw, "eos_token_id"),
        **recipe,
    )


def _llama_like(raw: dict[str, Any], family: str, recipe: dict[str, str], where: str) -> LMConfig:
    hidden, heads = _int(raw, "hidden_size", where), _int(raw, "num_attention_heads", where)
    kv_heads = _int(raw, "num_key_value_heads", where, heads)
    head_dim = raw.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    act = raw.get("hidden_act", "silu")
    missing = []
    if act not in _SILU:
        missing.append(f"the activation '{act}' (supported: {sorted(_SILU)})")
    # transformers 5 writes rope_parameters; earlier versions rope_theta and rope_scaling
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope = rope if isinstance(rope, dict) else {}
    rope_type = rope.get("rope_type") or rope.get("type")
    if rope_type not in (None, "default"):
        missing.append(f"the rotary scaling {rope_type!r}")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        missing.append("attention_bias / mlp_bias")
    if family == "mistral" and raw.get("sliding_window") not in (None, 0) and raw.get(
        "sliding_window", 0
    ) < raw.get("max_position_embeddings", 0):
        missing.append("a sliding attention window shorter than the context")
    if family == "qwen2" and raw.get("use_sliding_window"):
        missing.append("sliding-window attention")
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        missing.append(f"an even head dimension (got {head_dim!r})")
    if heads % kv_heads:
        missing.append(f"num_attention_heads {heads} divisible by num_key_value_heads {kv_heads}")
    _missing(missing, family, where)
    return LMConfig(
        family=family,
        vocab_size=_int(raw, "vocab_size", where),
        hidden=hidden,
        layers=_int(raw, "num_hidden_layers", where),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=int(head_dim),  # type: ignore[arg-type]
        intermediate=_int(raw, "intermediate_size", where),
        max_positions=_int(raw, "max_position_embeddings", where),
        norm_eps=_float(raw, "rms_norm_eps", where, 1e-6),
        rope_theta=_float({"rope_theta": 10000.0, **rope, **raw}, "rope_theta", where, 1e4),
        tied_embeddings=bool(raw.get("tie_word_embeddings", False)),
        bos_token_id=_token(raw, "bos_token_id"),
        eos_token_id=_token(raw, "eos_token_id"),
        **recipe,
    )
