"""Benchmark: GPT-2 124M (its real configuration, seeded random weights) generating on the
simulator against transformers (torch, fp32, KV cache) on this machine, and the cost
model's decode time per token on an M4 Max beside Orion's measured 5.76 ms (Orion
table 9). With ``--compress`` also each weight compression: bundle size, cosine of the
logits against the uncompressed model, tokens/s.

Writes ``benchmarks/results/llm_gpt2.json``.

How it measures (one process; the machine has 2 cores shared with other sessions, so the
load average is recorded before and after, and medians are taken over ``--repeat`` runs):
- the checkpoint: ``GPT2LMHeadModel(GPT2Config())`` after ``torch.manual_seed(0)``, saved
  with ``save_pretrained`` to a temporary folder and loaded with ``anekit.llm.load``;
- prompt: ``--prompt-tokens`` seeded random token ids; ``--new-tokens`` greedy tokens;
- anekit: compile time of the prefill bucket and the decode program (first generate),
  then per run the prefill seconds (prompt tokens / s) and the decode seconds (tokens
  after the first / s), as `GenerateResult` measures them; backend ``sim``;
- transformers: prefill = one forward over the prompt with ``use_cache=True``; decode =
  ``--new-tokens - 1`` single-token forwards on its cache (the same work the decode
  program does), greedy; torch at its default thread count;
- agreement: the sim's greedy tokens against transformers' (random weights make the
  logits nearly flat, so top-1 may flip where two logits tie within fp16), and the cosine
  of the first step's logits;
- compression: each scheme's decode bundle and weight bytes, the weights' worst relative
  error, the logits' cosine against the uncompressed model's where both saw the same
  context (the first step, and every step up to the first differing greedy token), how
  many greedy tokens agree, tokens/s and the cost model's decode estimate.

    python benchmarks/llm_gpt2.py [--repeat 3] [--compress int8,int4,palettize4]

``python benchmarks/llm_gpt2.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from benchmarks._common import add_smoke, results_path, write_json  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "llm_gpt2.json"
ORION_DECODE_MS = 5.76  # Orion table 9: ANE full forward (decode), M4 Max


def checkpoint(folder: Path, tiny: bool = False) -> None:
    """GPT-2 124M (or, for a smoke run, a 1-layer 64-wide GPT-2) with seeded weights."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=64, n_head=2) if tiny else GPT2Config()
    GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)


def torch_run(folder: Path, prompt: list[int], new: int) -> dict:
    import torch
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(os.cpu_count() or 1)  # its default; the environment may pin 1
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        start = time.perf_counter()
        out = model(torch.tensor([prompt]), use_cache=True)
        prefill = time.perf_counter() - start
        logits, cache = out.logits[0, -1], out.past_key_values
        tokens, first = [int(torch.argmax(logits))], logits.numpy().copy()
        start = time.perf_counter()
        for _ in range(new - 1):
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tokens.append(int(torch.argmax(out.logits[0, -1])))
        decode = time.perf_counter() - start
    return {"prefill_s": prefill, "decode_s": decode, "tokens": tokens, "first_logits": first}


def anekit_run(model, prompt: list[int], new: int) -> dict:
    r = model.generate(prompt, max_new_tokens=new, stop_at_eos=False, return_logits=True)
    return {"prefill_s": r.prefill_seconds, "decode_s": r.decode_seconds, "compile_s": r.compile_seconds,
            "tokens": r.token_ids, "logits": r.logits}  # fmt: skip


def summarize(runs: list[dict], n_prompt: int, new: int) -> dict:
    prefill = statistics.median(r["prefill_s"] for r in runs)
    decode = statistics.median(r["decode_s"] for r in runs)
    return {
        "prefill_ms": round(prefill * 1e3, 2),
        "prefill_tokens_per_s": round(n_prompt / prefill, 1),
        "decode_ms_per_token": round(decode / (new - 1) * 1e3, 2),
        "decode_tokens_per_s": round((new - 1) / decode, 1),
        "runs": len(runs),
    }


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def bundle_bytes(compiled) -> int:
    return sum(len(data) for data in compiled.bundle.files.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-context", type=int, default=128)
    parser.add_argument("--target", default="m4-max")
    parser.add_argument("--compress", default="", help="comma-separated schemes to also run")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:  # a 1-layer GPT-2, a few tokens, one compression scheme
        args.repeat, args.prompt_tokens, args.new_tokens, args.max_context = 1, 4, 3, 32
        args.compress = args.compress or "int8"
    import anekit.llm
    from anekit.simulator import gemm

    load_before = os.getloadavg()
    prompt = np.random.default_rng(0).integers(0, 50257, args.prompt_tokens).tolist()
    doc: dict = {
        "model": "GPT-2 124M configuration, seeded random weights (torch.manual_seed(0))",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "loadavg_before": load_before},  # fmt: skip
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "max_context": args.max_context,
        "target": args.target,
        "threads": {"torch": os.cpu_count(), "anekit_sim_gemm": gemm.THREADS},
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint(folder, tiny=args.smoke)
        model = anekit.llm.load(folder, target=args.target, max_context=args.max_context)
        first = anekit_run(model, prompt, args.new_tokens)
        runs = [anekit_run(model, prompt, args.new_tokens) for _ in range(args.repeat)]
        ref_runs = [torch_run(folder, prompt, args.new_tokens) for _ in range(args.repeat)]
        ref = ref_runs[0]
        ours = summarize(runs, args.prompt_tokens, args.new_tokens)
        theirs = summarize(ref_runs, args.prompt_tokens, args.new_tokens)
        estimate = model.estimate(args.prompt_tokens)
        agree = sum(a == b for a, b in zip(first["tokens"], ref["tokens"], strict=True))
        doc["anekit_sim"] = {**ours, "compile_s_first_generate": round(first["compile_s"], 2),
                             "second_generate_compile_s": runs[0]["compile_s"]}  # fmt: skip
        doc["transformers_fp32"] = theirs
        doc["decode_speed_ratio_sim_over_transformers"] = round(
            ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"], 3)
        doc["prefill_speed_ratio_sim_over_transformers"] = round(
            ours["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"], 3)
        doc["agreement"] = {
            "greedy_tokens_equal": agree, "of": args.new_tokens,
            "first_step_logits_cosine": round(cosine(first["logits"][0], ref["first_logits"]), 6),
        }  # fmt: skip
        doc["estimate"] = {**{k: round(v, 3) if isinstance(v, float) else v for k, v in estimate.items()},
                           "orion_measured_decode_ms_per_token_m4_max": ORION_DECODE_MS}  # fmt: skip
        prefill_cm, _ = model.prefill_program(32)
        decode_cm, _ = model.decode_program()
        doc["programs"] = {"prefill_32": prefill_cm.summary_line(), "decode": decode_cm.summary_line()}
        doc["bundle_bytes"] = {"uncompressed": bundle_bytes(decode_cm)}
        schemes = [s for s in args.compress.split(",") if s]
        doc["compression"] = {}
        del model, prefill_cm, decode_cm
        for scheme in schemes:
            # one model's programs at a time: GPT-2's graphs, bundles and loaded programs
            # take a few GB per model, and the process-wide program cache keeps them all
            anekit.llm.clear_cache()
            gc.collect()
            print(f"compression {scheme}", file=sys.stderr, flush=True)
            cm = anekit.llm.load(folder, target=args.target, max_context=args.max_context,
                                 compress=scheme)  # fmt: skip
            c_runs = [anekit_run(cm, prompt, args.new_tokens) for _ in range(args.repeat)]
            c_decode, _ = cm.decode_program()
            # logits compared only where both models saw the same context: up to and
            # including the first step whose greedy token differs
            pairs = list(zip(c_runs[0]["tokens"], first["tokens"], strict=True))
            same = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs) - 1)
            cos = [cosine(a, b) for a, b in zip(c_runs[0]["logits"][: same + 1],
                                                first["logits"][: same + 1], strict=True)]  # fmt: skip
            report = c_decode.compression_report
            doc["compression"][scheme] = {
                **summarize(c_runs, args.prompt_tokens, args.new_tokens),
                "decode_bundle_bytes": bundle_bytes(c_decode),
                "compressed_weights": report["weights"],
                "weight_bytes_fp16": report["fp16_bytes"],
                "weight_bytes_stored": report["stored_bytes"],
                "worst_weight_relative_error": report["worst_relative_error"],
                "logits_cosine_first_step": round(cos[0], 6),
                "logits_cosine_min_same_context": round(min(cos), 6),
                "same_context_steps": len(cos),
                "greedy_tokens_equal_uncompressed": sum(a == b for a, b in pairs),
                "estimate_decode_ms_per_token": round(cm.estimate(args.prompt_tokens)["decode_ms_per_token"], 3),
            }  # fmt: skip
            del cm, c_decode, c_runs
    doc["machine"]["loadavg_after"] = os.getloadavg()
    write_json(results_path(RESULTS, args.smoke), doc)
    print({k: v for k, v in doc.items() if k != "machine"})


if __name__ == "__main__":
    main()
