"""One copy of the weights: two prompt buckets and the decode program of one model hold the
model's float32 weights and its fp16 weight file once. Measured in a child process (its
resident memory after each program is loaded): a program added to a loaded model costs its
working set, 0.1-0.2 float32 copies' bytes measured here; a program keeping its own fp16
weight file and the simulator's inlined fp16 literals measured 1.6, and a simulator keeping
a float32 copy of its own per program 2.6."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
import transformers

from tests.llm.test_families import save

REPO = Path(__file__).resolve().parents[2]
# a model whose layers outweigh its embeddings: 4 layers of 512 x 2048, vocabulary 1024
CONFIG = {"vocab_size": 1024, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4,
          "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 256,
          "tie_word_embeddings": False}  # fmt: skip


def test_two_prompt_buckets_and_decode_share_one_copy(tmp_path) -> None:
    save(tmp_path, transformers.LlamaConfig(**CONFIG), torch.bfloat16)
    script = textwrap.dedent(f"""
        import json
        import anekit.llm

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096

        out = {{"start": rss()}}
        model = anekit.llm.load({str(tmp_path)!r}, max_context=64)
        out["loaded"] = rss()
        out["fp32_weights"] = 2 * model.conversion.fp16_bytes
        model.prefill(list(range(1, 10)))              # bucket 16
        out["one_program"] = rss()
        model.prefill(list(range(1, 30)))              # bucket 32
        model.generate(list(range(1, 10)), max_new_tokens=3, stop_at_eos=False)  # decode
        out["three_programs"] = rss()
        print(json.dumps(out))
    """)
    env = {"PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    m = json.loads(done.stdout.strip().splitlines()[-1])
    w32 = m["fp32_weights"]
    assert m["loaded"] - m["start"] < 1.5 * w32, m  # the one shared copy (and the reader's transients)
    per_added_program = (m["three_programs"] - m["one_program"]) / 2
    assert per_added_program < 0.6 * w32, (per_added_program / w32, m)
