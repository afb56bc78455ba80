"""Fuzz targets for the files the living runtime reads: a Hugging Face model folder's
config.json, safetensors header and tokenizer.json; a PEFT adapter (its safetensors and
adapter_config.json); a training checkpoint; and a program cache folder. Each case writes
its files into the sandbox and runs the reader as a user would; any AnekitError is a clean
refusal, anything else (or a case that writes outside the files it was given) a finding.

Structure-aware edits reach past the first checks: one JSON value replaced (config.json,
tokenizer.json, adapter_config.json, a safetensors header); the checkpoint's manifest
edited and re-signed with its own checksum; a cache entry's manifest re-signed after its
file was changed (as someone who knows the format would). A cache case must either miss
(and compile) or serve the very program the model compiles to: a different output is a
finding.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np

from format_fuzzer.engine import Field, FuzzTarget, Prepared, user_facing_target
from format_fuzzer.feed_targets import json_edit
from format_fuzzer.sandbox import WroteOutside, sandbox

# ---- Hugging Face folders ------------------------------------------------------------------


def _configs() -> list[tuple[str, bytes]]:
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 96,
            "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 64, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": True}  # fmt: skip
    llama = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96,
             "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
             "num_hidden_layers": 2, "intermediate_size": 64, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
             "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}  # fmt: skip
    qwen2 = {**llama, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
             "use_sliding_window": False, "sliding_window": 4096}  # fmt: skip
    mistral = {**llama, "model_type": "mistral", "sliding_window": 4096}
    return [(n, json.dumps(c).encode()) for n, c in
            (("gpt2", gpt2), ("llama", llama), ("qwen2", qwen2), ("mistral", mistral))]  # fmt: skip


def _json_fields(data: bytes) -> list[Field]:
    return []


def _ends(data: bytes) -> list[int]:
    return sorted({0, 1, len(data) // 2, max(0, len(data) - 1)})


def _in_folder(files: dict[str, bytes]) -> Path:
    box = sandbox()
    folder = box.fresh() / "model"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def _checked(run: Any, folder: Path) -> Any:
    box = sandbox()
    before = box.snapshot()
    try:
        return run(folder)
    finally:
        box.check(before)


def _config_case(data: bytes) -> Any:
    from anekit.llm.config import read_config

    return _checked(read_config, _in_folder({"config.json": data}))


def hf_config_target() -> FuzzTarget:
    return user_facing_target("hf.config", _configs, _config_case, _json_fields, _ends, json_edit)


def _safetensors_fixtures() -> list[tuple[str, bytes]]:
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    f32 = {"wte.weight": rng.standard_normal((96, 32)).astype(np.float32),
           "h.0.ln_1.weight": np.ones(32, np.float32)}  # fmt: skip
    f16 = {k: v.astype(np.float16) for k, v in f32.items()}
    ints = {"positions": np.arange(16, dtype=np.int64), "w": np.zeros((4, 4), np.float32)}
    return [("f32", save(f32, {"format": "pt"})), ("f16", save(f16)), ("mixed", save(ints))]


def _header_fields(data: bytes) -> list[Field]:
    return [Field(0, 8, "header length")]


def _header_ends(data: bytes) -> list[int]:
    end = 8 + int.from_bytes(data[:8], "little")
    return sorted({0, 4, 8, min(end, len(data) - 1), len(data) - 1})


def safetensors_header_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """One value of the JSON header replaced (dtype, shape, data_offsets), data kept."""
    size = int.from_bytes(fixture.data[:8], "little")
    header = Prepared("header", fixture.data[8 : 8 + size], (), ())
    text, description = json_edit(rng, header)
    return struct.pack("<Q", len(text)) + text + fixture.data[8 + size :], description


def _read_every_tensor(folder: Path) -> dict[str, Any]:
    """Every tensor of the folder's checkpoint read as the model loader reads it (the shape
    the header declares is the one asked for: the header is what is fuzzed)."""
    from anekit.llm.weights import Checkpoint

    with Checkpoint(folder) as checkpoint:
        return {name: checkpoint.take(name, shape) for name, shape in checkpoint.shapes().items()}


def _weights_case(data: bytes) -> Any:
    return _checked(_read_every_tensor, _in_folder({"model.safetensors": data}))


def hf_safetensors_target() -> FuzzTarget:
    return user_facing_target("hf.safetensors", _safetensors_fixtures, _weights_case,
                              _header_fields, _header_ends, safetensors_header_edit)  # fmt: skip


def _tokenizer_fixtures() -> list[tuple[str, bytes]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")[:20000]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(text.splitlines(), trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"]))
    wordlevel = Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>"))
    return [("bpe_300", tok.to_str().encode()), ("wordlevel", wordlevel.to_str().encode())]


def _tokenizer_case(data: bytes) -> Any:
    from anekit.llm.tokenizer import load_tokenizer

    def run(folder: Path) -> Any:
        tok = load_tokenizer(folder)
        return tok.decode(tok.encode("hello anekit"))

    return _checked(run, _in_folder({"tokenizer.json": data}))


def hf_tokenizer_target() -> FuzzTarget:
    return user_facing_target("hf.tokenizer", _tokenizer_fixtures, _tokenizer_case, _json_fields,
                              _ends, json_edit)  # fmt: skip


# ---- PEFT adapters -------------------------------------------------------------------------

_LORA: dict[str, Any] = {}
_D, _R = 16, 4


def _lora_program() -> Any:
    """A two-layer model compiled with LoRA on both layers (rank 4, alpha 8): its ports."""
    if "ports" not in _LORA:
        import anekit

        rng = np.random.default_rng(1)
        x = anekit.input("x", (1, _D))
        h = anekit.ops.matmul(x, anekit.constant(rng.standard_normal((_D, _D)).astype(np.float32),
                                                 name="layers.0.q_proj.weight"), name="q")  # fmt: skip
        y = anekit.ops.matmul(h, anekit.constant(rng.standard_normal((_D, _D)).astype(np.float32),
                                                 name="layers.0.v_proj.weight"), name="v")  # fmt: skip
        program = anekit.compile(anekit.graph([y]), "m4", lora=anekit.LoRA(rank=_R, alpha=8.0)).program
        _LORA["ports"] = {p.name: p for p in program.inputs}
        _LORA["alpha"] = program.lora_alpha
    return _LORA


def _peft_files() -> dict[str, bytes]:
    from safetensors.numpy import save

    rng = np.random.default_rng(2)
    tensors = {}
    for layer in ("q_proj", "v_proj"):
        tensors[f"base_model.model.layers.0.{layer}.lora_A.weight"] = rng.standard_normal((_R, _D)).astype(np.float32)
        tensors[f"base_model.model.layers.0.{layer}.lora_B.weight"] = rng.standard_normal((_D, _R)).astype(np.float32)
    config = {"lora_alpha": 16, "r": _R, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA"}
    return {"adapter_model.safetensors": save(tensors), "adapter_config.json": json.dumps(config).encode()}


def _peft_fixtures() -> list[tuple[str, bytes]]:
    return [(name, data) for name, data in _peft_files().items()]


def peft_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    if fixture.name == "adapter_model.safetensors":
        return safetensors_header_edit(rng, fixture)
    return json_edit(rng, fixture)


def _peft_case(fixture: Prepared, data: bytes) -> Any:
    import anekit
    from anekit import lora

    info = _lora_program()
    files = {**_peft_files(), fixture.name: data}

    def run(folder: Path) -> Any:
        adapter = anekit.lora.load(folder)
        return lora.bind(adapter, info["ports"], info["alpha"])

    return _checked(run, _in_folder(files))


def peft_target() -> FuzzTarget:
    return user_facing_target("peft", _peft_fixtures, lambda data: None, _header_fields,
                              _header_ends, peft_edit, decode_case=_peft_case)  # fmt: skip


# ---- training checkpoints ------------------------------------------------------------------

_TRAIN: dict[str, Any] = {}


def _checkpoint_fixtures() -> list[tuple[str, bytes]]:
    import anekit
    from anekit.train import SGD, Adam, Trainer
    from anekit.train.trainer import select_parameters  # noqa: F401 - the trainer's import path

    rng = np.random.default_rng(3)
    x = anekit.input("x", (4, 8))
    w = anekit.parameter(rng.standard_normal((8, 3)).astype(np.float32), name="w")
    b = anekit.parameter(np.zeros(3, np.float32), name="b")
    graph = anekit.graph([x @ w + b])
    data = {"x": rng.standard_normal((16, 8)).astype(np.float32), "target": rng.integers(0, 3, 16)}
    _TRAIN["batch"] = {k: v[:4] for k, v in data.items()}
    found = []
    for name, opt in (("adam", Adam(lr=1e-2)), ("sgd", SGD(lr=0.1, momentum=0.9))):
        t = Trainer(graph, "cross_entropy", opt, backend="reference")
        t.fit(data, 1, 4, steps=2, progress=False)
        box = sandbox()
        path = box.fresh() / "ck.npz"
        t.save(path)
        found.append((name, path.read_bytes()))
    return found


def _zip_fields(data: bytes) -> list[Field]:
    fields = []
    at = data.find(b"PK\x03\x04")
    while at >= 0 and len(fields) < 40:
        fields += [Field(at + 18, 4, "compressed size"), Field(at + 22, 4, "size"),
                   Field(at + 26, 2, "name length")]  # fmt: skip
        at = data.find(b"PK\x03\x04", at + 4)
    end = data.rfind(b"PK\x05\x06")
    if end >= 0:
        fields += [Field(end + 10, 2, "entries"), Field(end + 16, 4, "cd offset")]
    return fields


def _zip_ends(data: bytes) -> list[int]:
    return sorted({0, 30, max(0, data.rfind(b"PK\x01\x02")), max(0, data.rfind(b"PK\x05\x06")),
                   len(data) - 1})  # fmt: skip


def checkpoint_manifest_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    """One value of the manifest or the model document replaced, then the manifest's own
    checksum recomputed (the edit reaches the checks behind it)."""
    from anekit.train import checkpoint

    with np.load(io.BytesIO(fixture.data)) as z:
        arrays = {k: z[k] for k in z.files}
    docs = {k: json.loads(arrays[k].tobytes()) for k in ("__manifest__", "__model__")}
    which = rng.choice(sorted(docs))
    text, description = json_edit(rng, Prepared(which, json.dumps(docs[which]).encode(), (), ()))
    docs[which] = json.loads(text)
    manifest = docs["__manifest__"]
    if isinstance(manifest, dict):
        manifest[checkpoint.SELF] = checkpoint._documents_digest(manifest, docs["__model__"])
    for k, doc in docs.items():
        arrays[k] = np.frombuffer(json.dumps(doc).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue(), f"{which}: {description}"


def _checkpoint_case(data: bytes) -> Any:
    from anekit.train import Trainer

    box = sandbox()
    path = box.fresh() / "ck.npz"
    path.write_bytes(data)
    before = box.snapshot()
    try:
        t = Trainer.load(path)
        return t.step(_TRAIN["batch"])
    finally:
        box.check(before)


def checkpoint_target() -> FuzzTarget:
    return user_facing_target("checkpoint", _checkpoint_fixtures, _checkpoint_case, _zip_fields,
                              _zip_ends, checkpoint_manifest_edit, slow_seconds=5.0)  # fmt: skip


# ---- the program cache ---------------------------------------------------------------------

_CACHE: dict[str, Any] = {}


def _cache_model() -> dict[str, Any]:
    if not _CACHE:
        import anekit
        from anekit.runtime.cache import content_key, source_key

        rng = np.random.default_rng(4)
        x = anekit.input("x", (1, 16))
        graph = anekit.graph([anekit.ops.relu(anekit.ops.matmul(
            x, rng.standard_normal((16, 16)).astype(np.float32)), name="y")])  # fmt: skip
        compiled = anekit.compile(graph, "m4")
        feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)}
        files = {rel: bytes(data) for rel, data in compiled.bundle.files.items()}
        _CACHE.update(graph=graph, compiled=compiled, feeds=feeds, files=files,
                      expected=compiled.program.run(feeds)["y"],
                      key=content_key(compiled.bundle.manifest),
                      skey=source_key(graph, "m4", {}))  # fmt: skip
    return _CACHE


def _cache_fixtures() -> list[tuple[str, bytes]]:
    info = _cache_model()
    found = [("sources", info["key"].encode())]
    for rel in sorted(info["files"]):
        found.append((f"bundle/{rel}", info["files"][rel]))
        if rel != "manifest.json":
            found.append((f"bundle/{rel}+rehash", info["files"][rel]))
    return found


def _cache_case(fixture: Prepared, data: bytes) -> Any:
    from anekit.runtime.cache import ProgramCache, cached

    info = _cache_model()
    name = fixture.name.removesuffix("+rehash")
    files = {f"bundle/{rel}": content for rel, content in info["files"].items()}
    files[name] = data
    if fixture.name.endswith("+rehash"):
        manifest = json.loads(files["bundle/manifest.json"])
        rel = name.removeprefix("bundle/")
        manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        files["bundle/manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    box = sandbox()
    cache_dir = box.fresh() / "cache"
    entry = cache_dir / "entries" / info["key"]
    index = files.pop("sources", info["key"].encode())
    for rel, content in files.items():
        (entry / rel).parent.mkdir(parents=True, exist_ok=True)
        (entry / rel).write_bytes(content)
    (entry / ".used").write_bytes(b"")
    (entry / f".from-{info['skey']}").write_bytes(b"")
    (cache_dir / "sources").mkdir()
    (cache_dir / "sources" / info["skey"]).write_bytes(index)
    for folder in (cache_dir, *(p for p in cache_dir.rglob("*") if p.is_dir())):
        folder.chmod(0o700)
    outside = {k: v for k, v in box.snapshot().items() if not k.startswith("case/cache")}
    fsync = os.fsync
    # durability is not what a case tests (tests/safety/test_crash.py does): without fsync a
    # miss's insert costs no disk flush, and a case runs in milliseconds, not a second
    os.fsync = lambda fd: None
    try:
        program = cached(ProgramCache(cache_dir), info["graph"], "m4", {}, lambda g: info["compiled"])
        got = program.run(info["feeds"])["y"]
        if not np.array_equal(got, info["expected"]):
            raise WrongProgram("the cache served a program that computes something else")
        return got
    finally:
        os.fsync = fsync
        now = {k: v for k, v in box.snapshot().items() if not k.startswith("case/cache")}
        if now != outside:
            raise WroteOutside(f"the case changed files outside the cache: {sorted(set(now) ^ set(outside))[:3]}")


class WrongProgram(Exception):
    """A cache hit whose program is not the one compiled for the source (a finding)."""


def cache_edit(rng: random.Random, fixture: Prepared) -> tuple[bytes, str]:
    if fixture.name == "sources":
        return rng.choice([b"0" * 64, b"f" * 64, hashlib.sha256(b"other").hexdigest().encode(),
                           b"../" * 20, b"", b"\0" * 64]), "another index value"  # fmt: skip
    return json_edit(rng, fixture)


def cache_target() -> FuzzTarget:
    return user_facing_target("cache", _cache_fixtures, lambda data: None, _json_fields, _ends,
                              cache_edit, decode_case=_cache_case, slow_seconds=10.0)  # fmt: skip
