"""A careless or hostile model folder and careless calls: every mistake is an AnekitError (exit
2 on the command line) naming the key, the tensor or the argument; values fp16 cannot hold
are refused before anything runs; the memory budget holds on the reader (only the tensors a
model uses are read), the context and the tokenizer."""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import anekit.llm
from anekit.cli import main
from anekit.errors import AnekitError, InputError, MemoryBudgetError, ModelError, PathError
from tests.llm.conftest import TINY_LLAMA

REPO = Path(__file__).resolve().parents[2]


def folder_with(tmp_path: Path, **config_changes) -> Path:
    """The tiny trained Llama with config.json's keys changed (None removes a key)."""
    folder = tmp_path / "model"
    shutil.copytree(TINY_LLAMA, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in config_changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"model_type": ["llama"]}, "model_type '['llama']'"),
        ({"model_type": "bert", "architectures": 5}, "model_type 'bert'"),
        ({"sliding_window": "4096"}, "'sliding_window' must be a positive integer"),
        ({"max_position_embeddings": "256"}, "'max_position_embeddings' must be a positive integer"),
        ({"rope_theta": math.nan}, "'rope_theta' must be a finite positive number"),
        ({"rope_theta": math.inf}, "'rope_theta' must be a finite positive number"),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": math.nan}},
         "'rope_theta' must be a finite positive number"),
        ({"rope_parameters": {"rope_type": "llama3", "factor": "8"}}, "'factor' must be a finite positive number"),
        ({"rope_parameters": [1, 2]}, "the rotary parameters must be an object"),
        ({"rms_norm_eps": math.nan}, "'rms_norm_eps' must be a finite positive number"),
        ({"rms_norm_eps": -1e-5}, "'rms_norm_eps' must be a finite positive number"),
        ({"head_dim": 0}, "'head_dim' must be a positive integer"),
        ({"num_hidden_layers": True}, "'num_hidden_layers' must be a positive integer"),
        ({"num_hidden_layers": 2**31}, "'num_hidden_layers' is 2147483648, more than the 1024"),
        ({"vocab_size": 2**40}, "'vocab_size' is 1099511627776, more than the 2147483647"),
        ({"tie_word_embeddings": "yes"}, "'tie_word_embeddings' must be true or false"),
        ({"layer_types": ["full_attention"]}, None),  # llama has no per-layer types: ignored
    ],
)  # fmt: skip
def test_config_values_of_the_wrong_type_or_range_are_named(tmp_path, changes, named) -> None:
    folder = folder_with(tmp_path, **changes)
    if named is None:
        anekit.llm.load(folder)
        return
    with pytest.raises(ModelError) as info:
        anekit.llm.load(folder)
    assert named in str(info.value)


def test_deeply_nested_json_is_a_clear_error(tmp_path) -> None:
    folder = folder_with(tmp_path)
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ModelError, match="config.json is not valid JSON"):
        anekit.llm.load(folder)


def _rewrite_tensor(folder: Path, name: str, change) -> None:
    from safetensors.numpy import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    tensors[name] = change(tensors[name].copy())
    save_file(tensors, str(path))


@pytest.mark.parametrize(
    ("value", "named"),
    [(np.nan, "holds 1 NaN or infinite values"), (np.inf, "holds 1 NaN or infinite values"),
     (1e6, "holds 1 values beyond fp16's range")],
)  # fmt: skip
def test_weights_fp16_cannot_hold_are_refused_by_name(tmp_path, value, named) -> None:
    folder = folder_with(tmp_path)
    name = "model.layers.1.mlp.down_proj.weight"

    def poison(a: np.ndarray) -> np.ndarray:
        a.flat[7] = value
        return a

    _rewrite_tensor(folder, name, poison)
    with pytest.raises(ModelError) as info:
        anekit.llm.load(folder)
    assert "layers.1.mlp.down_proj.weight" in str(info.value) and named in str(info.value)


def test_a_nul_in_a_weight_map_name_is_refused(tmp_path) -> None:
    folder = folder_with(tmp_path)
    (folder / "model.safetensors").rename(folder / "shard-1.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.norm.weight": "shard-1.safetensors\x00.txt"}}))
    with pytest.raises(ModelError, match="is not a tensor name and a file name"):
        anekit.llm.load(folder)


def test_a_sharded_bf16_checkpoint_reads_through_its_index(tmp_path) -> None:
    import ml_dtypes
    from safetensors.numpy import load_file, save_file

    folder = folder_with(tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({n: tensors[n].astype(ml_dtypes.bfloat16) for n in part}, str(folder / file))
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, part in halves.items() for n in part}}))
    model = anekit.llm.load(folder)
    assert model.conversion.source_dtypes == {"BF16"} and model.conversion.tensors == len(names)
    reference = anekit.llm.load(TINY_LLAMA)
    a, _ = model.prefill([5, 6, 7])
    b, _ = reference.prefill([5, 6, 7])
    assert np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999  # bf16-rounded weights


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.generate([1.7, 2], max_new_tokens=1), "token ids must be integers"),
        (lambda m: m.generate([True, 2], max_new_tokens=1), "token ids must be integers"),
        (lambda m: m.generate({"a": 1}, max_new_tokens=1), "the prompt must be text or a list"),
        (lambda m: m.generate([1, 2], top_k=2.5), "top_k must be an integer"),
        (lambda m: m.generate([1, 2], seed="abc"), "seed must be an integer"),
        (lambda m: m.generate([1, 2], seed=-1), "seed must be an integer in"),
        (lambda m: m.generate([1, 2], temperature="hot"), "temperature must be a number"),
        (lambda m: m.generate("\udcff", max_new_tokens=1), "the prompt is not valid text"),
        (lambda m: m.estimate(3, position=10**9), "position must be in"),
    ],
)  # fmt: skip
def test_careless_calls_are_clear_errors(tiny_llama, call, message) -> None:
    with pytest.raises(InputError, match=message):
        call(tiny_llama)


def test_load_takes_only_a_path() -> None:
    with pytest.raises(PathError, match="must be a path"):
        anekit.llm.load(12345)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "-1"], "seed must be an integer in"),
        (["--max-context", "10000000"], "--max-context must be an integer in [2, 256]"),
        (["--top-k", "-3"], "top_k must be >= 0"),
    ],
)
def test_cli_mistakes_exit_2(capsys, argv, message) -> None:
    code = main(["generate", str(TINY_LLAMA), "-p", "x", "-n", "2", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_the_budget_refuses_a_model_before_reading_it(tmp_path, monkeypatch) -> None:
    folder = folder_with(tmp_path, num_hidden_layers=1000)  # weights far over 1 MB
    monkeypatch.setenv("ANEKIT_MAX_MEMORY", "1M")
    with pytest.raises(MemoryBudgetError, match="the model \\(llama, 1000 layers\\)"):
        anekit.llm.load(folder)


def test_a_huge_tokenizer_is_refused_by_the_budget(tmp_path, monkeypatch) -> None:
    folder = folder_with(tmp_path)
    with open(folder / "tokenizer.json", "ab") as f:
        f.write(b" " * (30 << 20))
    monkeypatch.setenv("ANEKIT_MAX_MEMORY", "256M")
    with pytest.raises(MemoryBudgetError, match="parsing the tokenizer"):
        anekit.llm.load(folder)


def _add_sparse_tensor(path: Path, name: str, nbytes: int) -> None:
    """Append a tensor of ``nbytes`` to a safetensors file's header, its data a sparse hole."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    header[name] = {"dtype": "F32", "shape": [nbytes // 4], "data_offsets": [len(data), len(data) + nbytes]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
        f.truncate(8 + len(text) + len(data) + nbytes)


def test_an_unused_3_gib_tensor_is_never_read(tmp_path) -> None:
    folder = folder_with(tmp_path)
    _add_sparse_tensor(folder / "model.safetensors", "model.unused.weight", 3 << 30)
    script = textwrap.dedent(f"""
        import json, resource, sys
        import anekit.llm
        model = anekit.llm.load({str(folder)!r})
        result = model.generate([5, 6, 7], max_new_tokens=4, stop_at_eos=False)
        # VmHWM: this process's own peak (ru_maxrss carries a forking parent's peak over exec)
        status = open("/proc/self/status").read() if sys.platform == "linux" else ""
        hwm = [int(l.split()[1]) for l in status.splitlines() if l.startswith("VmHWM:")]
        peak = hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"tokens": result.token_ids, "read": model.conversion.bytes_read,
                          "peak_kb": peak}}))
    """)
    env = {"PYTHONPATH": str(REPO / "src"), "ANEKIT_MAX_MEMORY": "512M", "OPENBLAS_NUM_THREADS": "1",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["tokens"]) == 4 and out["read"] < 10 << 20
    assert out["peak_kb"] < 1 << 20, out  # a third of the 3 GiB the header announces


def test_errors_are_anekit_errors() -> None:
    assert issubclass(MemoryBudgetError, AnekitError) and issubclass(PathError, AnekitError)
