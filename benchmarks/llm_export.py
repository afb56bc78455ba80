"""Benchmark: exporting a 1B-class language model as what an app ships (`anekit export`).

The model: TinyLlama 1.1B's configuration (Llama, 22 layers, hidden 2048, 32 query and 4
key/value heads, MLP 5632, vocabulary 32000, untied head) with seeded random weights
(numpy, ``default_rng(0)``, normal * 0.02, fp16 safetensors). It is loaded with a
256-position context and exported for the M4 with one prefill bucket (64) and the decode
function per chunk. Measured:

- the export's wall time (compiling every chunk's programs, converting, writing) and the
  peak memory of the process that ran it (a child process; ``ru_maxrss``);
- per package: its weight file's bytes, its largest engine program's weight bytes against
  the per-program weight limit the export cut at (``--program-limit-mib``, default 256 MiB,
  under the M4's 1 GiB ``limits.max_program_weight_bytes``: compiling a 1 GiB chunk's
  programs takes more than 11 GB here, more than a shared machine gives one run; ANE shards
  of 223 MB ran on the engine, chips.json's source for the limit; the embedding gather's
  table runs on the CPU and is not counted there), its functions and states (read back
  from the package's own model description);
- the weight bytes across all packages against the model's fp16 parameter bytes (the
  functions of a package share one weight file: the ratio stays near 1, not near the
  number of functions);
- the export folder's total size.

``--smoke`` runs the same code on a 4-layer model with a per-program limit small enough
to cut it into chunks (seconds; a test runs it).

``--published`` instead checks the export's estimate (`anekit export --estimate`: every
chunk's functions and dispatches) against published measurements of whole language
models on the engine, writing ``llm_export_estimates.json``. The cost model is calibrated
on per-op measurements only; these figures are never fed back into it. The one published
whole-model figure with a configuration anekit exports is Orion's GPT-2 124M decode on an
M4 Max (5.76 ms/token, FACTS section 8; GPT-2 124M's configuration with seeded random
weights here, since estimates do not depend on the weights' values).

    python benchmarks/llm_export.py [--smoke | --published] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from benchmarks._common import add_smoke, machine, results_path, write_json  # noqa: E402

TINYLLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
             "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
             "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
SMOKE = {**TINYLLAMA, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}  # fmt: skip


def write_checkpoint(folder: Path, config: dict) -> int:
    """Seeded random fp16 weights in Hugging Face names; returns the parameter count."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    c, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = c // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hd

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    tensors = {"model.embed_tokens.weight": w(v, c), "model.norm.weight": np.ones(c, np.float16),
               "lm_head.weight": w(v, c)}  # fmt: skip
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        tensors.update({
            f"{p}.input_layernorm.weight": np.ones(c, np.float16),
            f"{p}.post_attention_layernorm.weight": np.ones(c, np.float16),
            f"{p}.self_attn.q_proj.weight": w(c, c), f"{p}.self_attn.k_proj.weight": w(kv, c),
            f"{p}.self_attn.v_proj.weight": w(kv, c), f"{p}.self_attn.o_proj.weight": w(c, c),
            f"{p}.mlp.gate_proj.weight": w(f, c), f"{p}.mlp.up_proj.weight": w(f, c),
            f"{p}.mlp.down_proj.weight": w(c, f),
        })  # fmt: skip
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return sum(t.size for t in tensors.values())


def run_export(folder: Path, out: Path, limit: int, queue: multiprocessing.Queue) -> None:
    """In a child process: load, export (programs cut under ``limit`` weight bytes), and
    report what it measured."""
    import dataclasses

    import anekit.llm
    from anekit import targets

    target = targets.get("m4")
    limits = dataclasses.replace(target.limits, max_program_weight_bytes=limit)
    target = dataclasses.replace(target, limits=limits)
    start = time.perf_counter()
    model = anekit.llm.load(folder, target=target, max_context=256)
    manifest = model.export(out, buckets=(64,))
    seconds = time.perf_counter() - start
    queue.put(
        {"seconds": seconds, "manifest": manifest, "limit": target.limits.max_program_weight_bytes}
    )


PUBLISHED = [
    # (model, chip, published decode ms/token, source)
    (
        "gpt2-124M",
        "m4-max",
        5.76,
        "Orion (FACTS section 8): GPT-2 124M decode 170 tok/s on an M4 Max, "
        "24 programs (one per layer) with IOSurface round trips between them",
    ),
]


def published(smoke: bool) -> dict:
    """The export's decode estimate against each published figure (a tiny GPT-2 with
    ``smoke``: the same code, not a check)."""
    import torch
    import transformers

    import anekit.llm
    from anekit.llm.export import model_chunks
    from anekit.llm.export_estimate import estimate_chunks

    rows = []
    for name, chip, ms, source in PUBLISHED:
        config = (
            transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512)
            if smoke
            else transformers.GPT2Config()
        )
        with tempfile.TemporaryDirectory(prefix="anekit-published-") as tmp:
            torch.manual_seed(0)
            transformers.GPT2LMHeadModel(config).save_pretrained(tmp)
            model = anekit.llm.load(tmp, target="m4", max_context=256)
            est = estimate_chunks(model_chunks(model, (64,)), chip)
        rows.append({"model": name, "chip": chip, "published_decode_ms_per_token": ms, "source": source,
                     "estimated_decode_ms_per_token": round(est["decode_ms_per_token"], 3),
                     "estimate_over_published": round(est["decode_ms_per_token"] / ms, 3),
                     "decode_dispatches": est["decode_dispatches"], "chunks": est["chunks"]})  # fmt: skip
    return {"benchmark": "llm_export_estimates", "smoke": smoke, "checks": rows}


def _result(child: Any, queue: Any) -> dict:
    """The child's measurement; a child that dies first (the kernel's OOM killer) fails the
    run instead of leaving it waiting on the queue for ever."""
    import queue as queues

    while True:
        try:
            measured = queue.get(timeout=2)
            break
        except queues.Empty:
            if not child.is_alive():
                raise SystemExit(f"the export process died (exit code {child.exitcode})") from None
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"the export process failed with exit code {child.exitcode}")
    return measured


def _chip_limit() -> int:
    from anekit import targets

    return targets.get("m4").limits.max_program_weight_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)  # a 4-layer model, seconds
    parser.add_argument(
        "--published", action="store_true", help="check the estimate against published figures"
    )
    parser.add_argument("--program-limit-mib", type=float, default=256,
                        help="per-program weight limit to cut at (default 256 MiB, below the M4's 1 GiB: "
                        "compiling a 1 GiB chunk's programs needs more memory than a shared machine has)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="the results JSON")
    args = parser.parse_args()
    if args.published:
        load_before = os.getloadavg()
        doc = {**published(args.smoke), "machine": machine(load_before)}
        results = REPO / "benchmarks" / "results" / "llm_export_estimates.json"
        write_json(args.out or results_path(results, args.smoke), doc)
        print(json.dumps(doc["checks"]))
        return 0
    out_json = args.out or results_path(REPO / "benchmarks" / "results" / "llm_export.json", args.smoke)
    load_before = os.getloadavg()
    config = SMOKE if args.smoke else TINYLLAMA
    with tempfile.TemporaryDirectory(prefix="anekit-llm-export-") as tmp:
        folder, export_dir = Path(tmp) / "model", Path(tmp) / "export"
        folder.mkdir()
        params = write_checkpoint(folder, config)
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        limit = (
            80_000 if args.smoke else int(args.program_limit_mib * 2**20)
        )  # smoke: one layer each
        child = ctx.Process(target=run_export, args=(folder, export_dir, limit, queue))
        child.start()
        measured = _result(child, queue)
        peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        manifest = measured["manifest"]
        from anekit.formats.mlpackage import read_package

        packages = []
        for chunk in manifest["chunks"]:
            engine = chunk["engine_weight_bytes"]
            path = export_dir / chunk["package"]
            weights = path / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
            described = read_package(path).functions
            packages.append({
                "package": chunk["package"],
                "weight_bytes": weights.stat().st_size,
                "engine_program_weight_bytes": engine,
                "within_program_limit": engine <= measured["limit"],
                "functions": sorted(described),
                "states": len(chunk["states"]),
            })  # fmt: skip
        total_weights = sum(p["weight_bytes"] for p in packages)
        size = sum(f["size"] for f in manifest["files"].values())
    doc = {
        "benchmark": "llm_export",
        "smoke": args.smoke,
        "model": {"config": config, "parameters": params, "fp16_bytes": 2 * params},
        "target": "m4",
        "per_program_weight_limit": measured["limit"],
        "chip_per_program_weight_limit": _chip_limit(),
        "export_seconds": round(measured["seconds"], 2),
        "export_peak_rss_bytes": peak_rss,
        "export_bytes": size,
        "weight_bytes_all_packages": total_weights,
        "weight_bytes_over_fp16_parameters": round(total_weights / (2 * params), 4),
        "every_package_within_program_limit": all(p["within_program_limit"] for p in packages),
        "packages": packages,
        "estimate_m4": manifest["estimate"],
        "machine": machine(load_before),
    }
    write_json(out_json, doc)
    print(json.dumps({k: doc[k] for k in ("export_seconds", "export_bytes", "weight_bytes_over_fp16_parameters",
                                          "every_package_within_program_limit")}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
