"""config.json -> LMConfig per family, and the refusals that name what is missing."""

from __future__ import annotations

import json

import pytest

import anekit.llm
from anekit.errors import ModelError, UnsupportedModelError
from anekit.llm.config import parse_config
from anekit.llm.weights import Checkpoint

LLAMA = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5}  # fmt: skip


def test_families_and_their_recipes() -> None:
    cfg = parse_config({"model_type": "gpt2", "vocab_size": 50, "n_embd": 32, "n_layer": 1,
                        "n_head": 4, "n_positions": 64})  # fmt: skip
    assert (cfg.positions, cfg.norm, cfg.mlp, cfg.kv_heads, cfg.head_dim) == (
        "learned",
        "layer_norm",
        "plain",
        4,
        8,
    )
    assert cfg.intermediate == 128 and cfg.tied_embeddings
    llama = parse_config(LLAMA)
    assert (llama.positions, llama.norm, llama.mlp, llama.activation, llama.group) == (
        "rotary",
        "rms_norm",
        "gated",
        "silu",
        4,
    )
    assert llama.rope_theta == 10000.0
    qwen = parse_config({**LLAMA, "model_type": "qwen2", "rope_theta": 1e6})
    assert qwen.bias == "qkv" and qwen.rope_theta == 1e6
    new_style = parse_config(
        {**LLAMA, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}}
    )
    assert new_style.rope_theta == 5e5
    assert (
        parse_config({**LLAMA, "model_type": "mistral", "sliding_window": None}).family == "mistral"
    )


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"model_type": "bert", "architectures": ["BertModel"]}, "model_type 'bert' (BertModel)"),
        ({**LLAMA, "hidden_act": "gelu"}, "the activation 'gelu'"),
        ({**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "the rotary scaling 'yarn'"),
        ({**LLAMA, "num_key_value_heads": 3}, "divisible by num_key_value_heads 3"),
        ({"model_type": "gpt2", "vocab_size": 50, "n_embd": 32, "n_layer": 1, "n_head": 4,
          "n_positions": 64, "activation_function": "relu"}, "the activation 'relu'"),
    ],
)  # fmt: skip
def test_unsupported_configs_name_what_is_missing(raw: dict, named: str) -> None:
    with pytest.raises(UnsupportedModelError, match=named.replace("(", r"\(").replace(")", r"\)")):
        parse_config(raw)


def test_bad_values_and_folders(tmp_path) -> None:
    with pytest.raises(ModelError, match="'hidden_size' must be a positive integer"):
        parse_config({**LLAMA, "hidden_size": -1})
    with pytest.raises(ModelError, match="no config.json"):
        anekit.llm.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        anekit.llm.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    with pytest.raises(ModelError, match="no model.safetensors"):
        anekit.llm.load(tmp_path)


def test_weights_that_do_not_match_the_config(tmp_path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    save_file({"model.embed_tokens.weight": np.zeros((100, 32), np.float32)},
              str(tmp_path / "model.safetensors"))  # fmt: skip
    with pytest.raises(ModelError, match="no tensor 'layers.0.self_attn.q_proj.weight'"):
        anekit.llm.load(tmp_path)
    with Checkpoint(tmp_path, ("model.",)) as ws, pytest.raises(
        ModelError, match=r"'embed_tokens.weight' has the shape \[100, 32\]"
    ):
        ws.take("embed_tokens.weight", (100, 64))


def test_a_shard_index_pointing_outside_the_folder_is_refused(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../outside.safetensors"}})
    )
    with pytest.raises(ModelError, match="not a file inside the model folder"):
        anekit.llm.load(tmp_path)


def test_a_config_symlink_leading_out_of_the_folder_is_refused(tmp_path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(LLAMA))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").symlink_to(outside)
    with pytest.raises(ModelError, match="not a file inside the model folder"):
        anekit.llm.load(folder)
