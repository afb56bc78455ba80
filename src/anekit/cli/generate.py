"""`anekit generate PATH --prompt TEXT`: stream a language model's continuation, then the
measured prefill and decode tokens/s and the cost model's estimate for the target chip."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from anekit.cli.common import add_command, compression_line, compression_summary
from anekit.codegen.compress import SCHEMES
from anekit.targets import DEFAULT_TARGET


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "generate",
        help="generate text with a Hugging Face language model folder",
        description="Load a Hugging Face model folder (GPT-2, Llama 1-3, Mistral, Qwen2/2.5/3, "
        "Gemma 3 text, Phi-3, SmolLM2; bf16, fp16 or fp32 safetensors), compile its programs "
        "for the target (cut into chunks under the chip's limits) and generate on the "
        "simulator, streaming tokens as they come.",
        examples=[
            'anekit generate tests/data/llm/tiny-llama --prompt "def mean(data):" -n 64',
            'anekit generate tests/data/llm/tiny-gpt2 -p "Hello" -n 16 --compress int8 --json',
        ],
        json_help="print one JSON object instead of streaming",
    )
    p.add_argument("model", help="a model folder (config.json, *.safetensors, tokenizer files), "
                   "or an export folder (anekit export), whose packages run as written")
    p.add_argument("--prompt", "-p", required=True, help="the text to continue")
    p.add_argument("-n", "--max-new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    p.add_argument("--target", "-t", default=DEFAULT_TARGET,
                   help=f"the chip to compile for (default {DEFAULT_TARGET})")
    p.add_argument("--backend", default="sim", choices=("sim", "sim-fp32", "ane"),
                   help="sim: the fp16 simulator (default); sim-fp32: its fp32 twin; "
                   "ane: an export's packages through Core ML's e5rt (macOS)")  # fmt: skip
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k likeliest tokens (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = all)")
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None, help="seed of the sampler")
    p.add_argument("--max-context", type=int, default=None,
                   help="decode cache length in positions (default: the model's, at most 2048)")
    p.add_argument("--compress", choices=SCHEMES, default=None, help="compress the weights")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit import llm

    model = llm.load(args.model, target=args.target, max_context=args.max_context,
                     compress=args.compress)  # fmt: skip
    options: dict[str, Any] = dict(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, seed=args.seed, backend=args.backend,
    )  # fmt: skip
    if args.json:
        result = model.generate(args.prompt, args.max_new_tokens, **options)
        print(json.dumps({"prompt": args.prompt, "token_ids": result.token_ids,
                          "text": result.text, **_speeds(model, result)}, indent=2))  # fmt: skip
        return 0
    out = sys.stdout
    out.write(args.prompt)
    out.flush()
    tokens = []
    for token in model.generate(args.prompt, args.max_new_tokens, stream=True, **options):
        tokens.append(token)
        out.write(token.text)
        out.flush()
    out.write("\n")
    speeds = _speeds(model, model.last_result)
    print(
        f"\n{len(tokens)} tokens ({model.last_result.stop_reason}); measured on "
        f"{args.backend}: prefill {speeds['prefill_tokens_per_s']:.1f} tokens/s, decode "
        f"{speeds['decode_tokens_per_s']:.1f} tokens/s (compile {speeds['compile_s']:.2f} s)",
        file=sys.stderr,
    )
    est = speeds["estimate"]
    print(
        f"estimated on {est['target']}: prefill {est['prefill_tokens_per_s']:.0f} tokens/s, "
        f"decode {est['decode_ms_per_token']:.2f} ms/token ({est['decode_tokens_per_s']:.0f} tokens/s)",
        file=sys.stderr,
    )
    if speeds["compression"]:
        print(compression_line(speeds["compression"]), file=sys.stderr)
    return 0


def _speeds(model: Any, result: Any) -> dict[str, Any]:
    from anekit.llm import ExportedModel

    speeds = {
        "prefill_tokens_per_s": result.prefill_tokens_per_s,
        "decode_tokens_per_s": result.decode_tokens_per_s,
        "compile_s": result.compile_seconds,
        "stop_reason": result.stop_reason,
        "estimate": model.estimate(len(result.prompt_ids)),
    }
    if isinstance(model, ExportedModel):  # an export reports no recompression
        return {**speeds, "compression": None}
    first_decode = model.plan.decode(model.plan.context_for(len(result.prompt_ids)))[0]
    return {
        **speeds,
        "compression": compression_summary(model.program(first_decode)[0].compression_report),
        "programs": model.plan.as_dict(),
        "weights": model.conversion.as_dict() if model.conversion else None,
    }
