"""Generate Python-like text with the tiny Llama trained on standard library sources
(tests/data/llm/tiny-llama, made by tests/data/make_tiny_lms.py): greedy and sampled,
streamed, then int8-compressed, with measured and estimated speeds.

    python examples/generate_text.py [MODEL_FOLDER]

Needs the `llm` extra (safetensors, tokenizers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anekit.llm

TINY_LLAMA = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "tiny-llama"
PROMPT = "def mean(data):\n    "


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else TINY_LLAMA
    model = anekit.llm.load(folder, target="m4")
    print(model)

    greedy = model.generate(PROMPT, max_new_tokens=48)
    print(f"--- greedy ({len(greedy.token_ids)} tokens, compile {greedy.compile_seconds:.2f} s)")
    print(PROMPT + greedy.text)

    print("--- sampled, streamed (temperature 0.8, top-p 0.9, seed 1)")
    sys.stdout.write(PROMPT)
    for token in model.generate(PROMPT, max_new_tokens=48, temperature=0.8, top_p=0.9,
                                seed=1, stream=True):  # fmt: skip
        sys.stdout.write(token.text)
        sys.stdout.flush()
    again = model.last_result
    print(f"\n(prefill {again.prefill_tokens_per_s:.0f} tokens/s, decode "
          f"{again.decode_tokens_per_s:.0f} tokens/s on sim; compiled nothing: "
          f"{again.compile_seconds == 0})")  # fmt: skip

    estimate = model.estimate(len(greedy.prompt_ids))
    print(f"--- estimated on {estimate['target']}: decode {estimate['decode_ms_per_token']:.2f} ms/token")

    int8 = anekit.llm.load(folder, target="m4", compress="int8")
    result = int8.generate(PROMPT, max_new_tokens=48)
    report = int8.decode_program()[0].compression_report
    same = sum(a == b for a, b in zip(result.token_ids, greedy.token_ids, strict=False))
    print(f"--- int8 weights: {report['fp16_bytes']:,} -> {report['stored_bytes']:,} bytes, "
          f"{same}/{len(greedy.token_ids)} greedy tokens as fp16")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
