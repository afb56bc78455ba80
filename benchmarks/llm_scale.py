"""Benchmark: language models at real size, as people publish them.

The published configurations of SmolLM2-135M, Qwen3-0.6B, Llama-3.2-1B and Gemma-3-1B
(config.json values written out below), seeded random weights (``torch.manual_seed(0)``,
transformers' own initialisation) saved with ``save_pretrained`` in bf16 as they are
published. For each model and each context (256, 2048, 4096 positions):

- anekit, in a child process (its peak RSS is the child's ``ru_maxrss``): ``load`` seconds,
  compile seconds (the programs the generate needs), 32 greedy tokens after a 16-token
  prompt on ``sim``, decode tokens/s, the program plan (chunks, dispatches) and the cost
  model's decode estimate on the M4;
- transformers fp32 (``from_pretrained(dtype=float32)``) in another child on the same
  number of threads: 32 greedy tokens with its KV cache, decode tokens/s, peak RSS;
- agreement: tokens equal to transformers' (random weights make logits nearly flat, so
  fp16 may flip a near tie: the first differing step is recorded, with both sides' top two
  tokens and top-1 minus top-2 logit margins there) and the first step's logits cosine and
  largest absolute difference (the scale of fp16's noise a margin is compared with);
- memory: peak RSS against the model's fp16 weight bytes plus its KV cache (goal 1.5x);
  anekit runs under ``ANEKIT_MAX_MEMORY`` (``--max-memory``, default the machine's available
  memory less 1 GiB), so a model that will not fit is refused before any weight is read
  and its row says what it needs.

Writes ``benchmarks/results/llm_scale.json`` (``--smoke``: the same code paths on each
configuration cut to 2 layers and a 2048-wide vocabulary, one context, 4 tokens; writes
``llm_scale.smoke.json`` unless ``--output``).

    python benchmarks/llm_scale.py [--model smollm2-135m ...] [--contexts 256,2048,4096] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from benchmarks._common import add_smoke, results_path, write_json  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "llm_scale.json"

# The published config.json values (Hugging Face hub, each model's main branch).
PUBLISHED = {
    "smollm2-135m": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
                     "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                     "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                     "hidden_act": "silu", "tie_word_embeddings": True, "bos_token_id": 0,
                     "eos_token_id": 0},
    "qwen3-0.6b": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
                   "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                   "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False,
                   "sliding_window": None, "max_window_layers": 28, "attention_bias": False,
                   "bos_token_id": 151643, "eos_token_id": 151645},
    "llama-3.2-1b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
                     "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                     "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
                     "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                     "hidden_act": "silu", "tie_word_embeddings": True, "bos_token_id": 128000,
                     "eos_token_id": 128001},
    "gemma-3-1b": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                   "vocab_size": 262144, "hidden_size": 1152, "intermediate_size": 6912,
                   "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
                   "head_dim": 256, "max_position_embeddings": 32768, "query_pre_attn_scalar": 256,
                   "sliding_window": 512, "sliding_window_pattern": 6, "rope_theta": 1000000.0,
                   "rope_local_base_freq": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-6,
                   "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
                   "attn_logit_softcapping": None, "tie_word_embeddings": True, "bos_token_id": 2,
                   "eos_token_id": 1},
}  # fmt: skip
PROMPT_TOKENS = 16
THREADS = 2


def smoke_config(config: dict) -> dict:
    return {**config, "num_hidden_layers": 2, "vocab_size": 2048}


def make_checkpoint(config: dict, folder: Path) -> None:
    """transformers' seeded initialisation of ``config``, saved in bf16 (in a child, so the
    fp32 model it builds is not counted against anything measured)."""
    script = textwrap.dedent(f"""
        import json, torch, transformers
        config = transformers.AutoConfig.for_model(**json.loads({json.dumps(json.dumps(config))}))
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained({str(folder)!r}, safe_serialization=True)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env=_env(), timeout=3600)


MAX_MEMORY: list[str] = []  # ANEKIT_MAX_MEMORY for the anekit children (--max-memory)


def available_memory() -> int:
    """MemAvailable of /proc/meminfo (bytes): what this shared machine can give a run now."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 8 << 30


def _env() -> dict:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": str(THREADS),
                "OPENBLAS_NUM_THREADS": "1", "ANEKIT_NUM_THREADS": str(THREADS)})  # fmt: skip
    if MAX_MEMORY:
        env["ANEKIT_MAX_MEMORY"] = MAX_MEMORY[0]
    return env


def _child(script: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, env=_env(), timeout=6 * 3600)  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed",
                "returncode": done.returncode}  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def anekit_run(folder: Path, context: int, prompt: list[int], new: int) -> dict:
    return _child(f"""
        import json, resource, sys, time
        import anekit.llm
        from anekit.errors import MemoryBudgetError
        start = time.perf_counter()
        try:
            model = anekit.llm.load({str(folder)!r}, max_context={context})
        except MemoryBudgetError as exc:  # refused before any weight is read
            print(json.dumps({{"refused": str(exc), "needs": exc.requested, "budget": exc.limit,
                              "seconds": time.perf_counter() - start,
                              "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
            sys.exit(0)
        load_s = time.perf_counter() - start
        result = model.generate({prompt}, max_new_tokens={new}, stop_at_eos=False, return_logits=True)
        est = model.estimate({len(prompt)})
        tops = [l.argsort()[-2:][::-1] for l in result.logits]
        print(json.dumps({{
            "load_s": load_s, "compile_s": result.compile_seconds,
            "prefill_tokens_per_s": result.prefill_tokens_per_s,
            "decode_tokens_per_s": result.decode_tokens_per_s,
            "tokens": result.token_ids, "first_logits": result.logits[0].tolist(),
            "top2": [t.tolist() for t in tops],
            "margins": [float(l[t[0]] - l[t[1]]) for l, t in zip(result.logits, tops)],
            "plan": model.plan.as_dict(), "weights": model.conversion.as_dict(),
            "estimate_m4": est,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
    """)


def transformers_run(folder: Path, prompt: list[int], new: int) -> dict:
    return _child(f"""
        import json, resource, time, torch, transformers
        torch.set_num_threads({THREADS})
        model = transformers.AutoModelForCausalLM.from_pretrained({str(folder)!r}, dtype=torch.float32).eval()
        with torch.no_grad():
            start = time.perf_counter()
            out = model(torch.tensor([{prompt}]), use_cache=True)
            prefill = time.perf_counter() - start
            cache, logits = out.past_key_values, out.logits[0, -1]
            tokens, first = [int(logits.argmax())], logits.tolist()
            tops = [logits.topk(2)]
            start = time.perf_counter()
            for _ in range({new} - 1):
                out = model(torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                tokens.append(int(out.logits[0, -1].argmax()))
                tops.append(out.logits[0, -1].topk(2))
            decode = time.perf_counter() - start
        print(json.dumps({{"prefill_tokens_per_s": {len(prompt)} / prefill,
                          "decode_tokens_per_s": ({new} - 1) / decode, "tokens": tokens,
                          "first_logits": first, "top2": [t.indices.tolist() for t in tops],
                          "margins": [float(t.values[0] - t.values[1]) for t in tops],
                          "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
    """)


def fp16_weight_bytes(config: dict) -> tuple[int, int]:
    from anekit.llm.config import parse_config
    from anekit.llm.plan import kv_bytes, weight_bytes

    cfg = parse_config(config)
    return weight_bytes(cfg), kv_bytes(cfg, 1, itemsize=2)


def measure(name: str, config: dict, contexts: list[int], new: int, work: Path) -> dict:
    import numpy as np

    folder = work / name
    start = time.perf_counter()
    make_checkpoint(config, folder)
    row: dict = {"model": name, "config": config, "checkpoint_s": time.perf_counter() - start}
    weights, kv_per_position = fp16_weight_bytes(config)
    row["fp16_weight_bytes"] = weights
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, config["vocab_size"], PROMPT_TOKENS)]
    ref = transformers_run(folder, prompt, new)
    row["transformers_fp32"] = {k: v for k, v in ref.items() if k not in ("first_logits", "top2")}
    row["contexts"] = {}
    for context in contexts:
        ours = anekit_run(folder, context, prompt, new)
        entry = {k: v for k, v in ours.items() if k not in ("first_logits", "top2", "margins")}
        if "error" not in ours and "error" not in ref and "refused" not in ours:
            a, b = np.array(ours["first_logits"]), np.array(ref["first_logits"])
            same = [x == y for x, y in zip(ours["tokens"], ref["tokens"], strict=True)]
            entry["tokens_equal"] = all(same)
            entry["first_difference"] = same.index(False) if not all(same) else None
            entry["first_logits_cosine"] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            entry["first_logits_max_abs_difference"] = float(np.abs(a - b).max())  # fp16's noise
            if not all(same):  # a near tie swaps the top two, with a gap inside fp16's noise
                d = entry["first_difference"]
                entry["at_first_difference"] = {
                    "transformers_top2": ref["top2"][d], "transformers_margin": ref["margins"][d],
                    "anekit_top2": ours["top2"][d], "anekit_margin": ours["margins"][d]}  # fmt: skip
            need = weights + kv_per_position * context
            entry["fp16_weights_plus_kv_bytes"] = need
            entry["peak_rss_over_fp16_weights_plus_kv"] = ours["peak_rss"] / need
            entry["decode_vs_transformers"] = ours["decode_tokens_per_s"] / ref["decode_tokens_per_s"]
        row["contexts"][str(context)] = entry
        print(f"{name} context {context}: {json.dumps({k: v for k, v in entry.items() if k != 'plan'})[:600]}",
              flush=True)  # fmt: skip
    first, last = str(contexts[0]), str(contexts[-1])
    if all("decode_tokens_per_s" in row["contexts"][c] for c in (first, last)):
        row["decode_last_context_vs_first"] = (row["contexts"][first]["decode_tokens_per_s"]
                                               / row["contexts"][last]["decode_tokens_per_s"])  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=sorted(PUBLISHED))
    parser.add_argument("--contexts", default="256,2048,4096")
    parser.add_argument("--new-tokens", type=int, default=32)
    add_smoke(parser)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--merge", action="store_true", help="keep other models' rows already in the output")
    parser.add_argument("--max-memory", default=None,
                        help="ANEKIT_MAX_MEMORY for anekit (default: the machine's available memory less 1 GiB)")
    args = parser.parse_args(argv)
    MAX_MEMORY[:] = [args.max_memory or str(max(available_memory() - (1 << 30), 1 << 30))]
    names = args.model or list(PUBLISHED)
    contexts = [int(c) for c in args.contexts.split(",")]
    new = args.new_tokens
    if args.smoke:
        contexts, new = [64], 4
    output = args.output or results_path(RESULTS, args.smoke)
    rows = {}
    if args.merge and output.exists():
        rows = {r["model"]: r for r in json.loads(output.read_text()).get("models", [])}
    with tempfile.TemporaryDirectory(prefix="anekit-llm-scale-") as tmp:
        for name in names:
            config = smoke_config(PUBLISHED[name]) if args.smoke else PUBLISHED[name]
            rows[name] = measure(name, config, contexts, new, Path(tmp))
    write_json(output, {
        "benchmark": "llm_scale", "smoke": args.smoke, "threads": THREADS,
        "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "load_average": os.getloadavg()},
        "prompt_tokens": PROMPT_TOKENS, "new_tokens": new, "contexts": contexts,
        "anekit_max_memory": MAX_MEMORY[0],
        "models": [rows[n] for n in PUBLISHED if n in rows],
        "note": "anekit runs under ANEKIT_MAX_MEMORY (the machine's available memory less 1 GiB when "
                "not given): a model predicted not to fit is refused before any weight is read "
                "and its row records what it needs. Wall-clock speeds were measured on a machine "
                "shared with other sessions (load_average).",
    })  # fmt: skip
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
