"""transformers models from tiny configs (random weights, nothing downloaded): each builder
returns (module, example inputs, input names) for torch's ONNX export."""

from __future__ import annotations

from typing import Any

import torch

SEQ, VOCAB, HIDDEN, HEADS, LAYERS, FFN = 16, 128, 64, 4, 2, 128
TEXT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_attention_heads=HEADS,
            num_hidden_layers=LAYERS, intermediate_size=FFN)  # fmt: skip


class Wrap(torch.nn.Module):
    """Calls a transformers model with keyword inputs and returns its first output tensor."""

    def __init__(self, model: Any, names: tuple[str, ...], field: str | None = None) -> None:
        super().__init__()
        self.model, self.names, self.field = model, names, field

    def forward(self, *xs):
        out = self.model(**dict(zip(self.names, xs, strict=True)))
        if self.field is not None:
            return getattr(out, self.field)
        return out[0] if isinstance(out, tuple) else next(iter(out.values()))


def _ids(n: int = SEQ) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64).remainder(VOCAB - 3).add(2)[None]


def _text(model_cls: str, config_cls: str, **overrides) -> tuple[Any, tuple, tuple[str, ...]]:
    import transformers

    config = getattr(transformers, config_cls)(**{**TEXT, **overrides})
    model = getattr(transformers, model_cls)(config).eval()
    return Wrap(model, ("input_ids",)), (_ids(),), ("input_ids",)


def _image(model_cls: str, config_cls: str, size: int = 32, channels: int = 3, **cfg):
    import transformers

    config = getattr(transformers, config_cls)(**cfg)
    model = getattr(transformers, model_cls)(config).eval()
    x = torch.randn(1, channels, size, size)
    return Wrap(model, ("pixel_values",)), (x,), ("pixel_values",)


def _seq2seq(model_cls: str, config_cls: str, **cfg):
    import transformers

    config = getattr(transformers, config_cls)(**cfg)
    model = getattr(transformers, model_cls)(config).eval()
    names = ("input_ids", "decoder_input_ids")
    return Wrap(model, names, "last_hidden_state"), (_ids(), _ids(4)), names


VIT = dict(image_size=32, patch_size=16, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
           num_attention_heads=HEADS, intermediate_size=FFN)  # fmt: skip
LLAMA = dict(num_key_value_heads=2, max_position_embeddings=64)
BUILDERS = {
    "bert": lambda: _text("BertModel", "BertConfig"),
    "distilbert": lambda: _text("DistilBertModel", "DistilBertConfig", dim=HIDDEN, n_heads=HEADS, n_layers=LAYERS, hidden_dim=FFN),
    "roberta": lambda: _text("RobertaModel", "RobertaConfig"),
    "albert": lambda: _text("AlbertModel", "AlbertConfig", embedding_size=32),
    "electra": lambda: _text("ElectraModel", "ElectraConfig", embedding_size=32),
    "gpt2": lambda: _text("GPT2Model", "GPT2Config", n_embd=HIDDEN, n_head=HEADS, n_layer=LAYERS, n_positions=64),
    "gpt_neo": lambda: _text("GPTNeoModel", "GPTNeoConfig", num_layers=LAYERS, attention_types=[[["global", "local"], 1]], num_heads=HEADS, max_position_embeddings=64),
    "llama": lambda: _text("LlamaModel", "LlamaConfig", **LLAMA),
    "mistral": lambda: _text("MistralModel", "MistralConfig", **LLAMA),
    "qwen2": lambda: _text("Qwen2Model", "Qwen2Config", **LLAMA),
    "phi": lambda: _text("PhiModel", "PhiConfig", max_position_embeddings=64),
    "opt": lambda: _text("OPTModel", "OPTConfig", ffn_dim=FFN, word_embed_proj_dim=HIDDEN, max_position_embeddings=64),
    "bloom": lambda: _text("BloomModel", "BloomConfig", n_head=HEADS, n_layer=LAYERS),
    "t5": lambda: _seq2seq("T5Model", "T5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS),
    "bart": lambda: _seq2seq("BartModel", "BartConfig", vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=64),
    "vit": lambda: _image("ViTModel", "ViTConfig", **VIT),
    "deit": lambda: _image("DeiTModel", "DeiTConfig", **VIT),
    "beit": lambda: _image("BeitModel", "BeitConfig", **VIT),
    "clip_vision": lambda: _image("CLIPVisionModel", "CLIPVisionConfig", **VIT),
    "swin": lambda: _image("SwinModel", "SwinConfig", image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4),
    "mobilevit": lambda: _image("MobileViTModel", "MobileViTConfig", image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    "convnext_hf": lambda: _image("ConvNextModel", "ConvNextConfig", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 2, 1]),
    "segformer": lambda: _image("SegformerModel", "SegformerConfig", size=64, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], decoder_hidden_size=32),
    "resnet_hf": lambda: _image("ResNetModel", "ResNetConfig", size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], embedding_size=16),
}  # fmt: skip


def whisper():
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN, num_mel_bins=16, max_source_positions=16, max_target_positions=16,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        suppress_tokens=[], begin_suppress_tokens=[],
    )  # fmt: skip
    model = transformers.WhisperModel(cfg).eval()
    names = ("input_features", "decoder_input_ids")
    return Wrap(model, names, "last_hidden_state"), (torch.randn(1, 16, 32), _ids(4)), names


def _audio(model_cls: str, config_cls: str):
    import transformers

    cfg = getattr(transformers, config_cls)(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FFN, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=128, num_conv_pos_embedding_groups=16,
    )  # fmt: skip
    model = getattr(transformers, model_cls)(cfg).eval()
    return Wrap(model, ("input_values",)), (torch.randn(1, 4000),), ("input_values",)


BUILDERS |= {
    "whisper": whisper,
    "wav2vec2": lambda: _audio("Wav2Vec2Model", "Wav2Vec2Config"),
    "hubert": lambda: _audio("HubertModel", "HubertConfig"),
}
