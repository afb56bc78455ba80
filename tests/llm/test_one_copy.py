"""One copy of the weights: two prompt buckets and the decode program of one model hold the
model's fp16 weights once (the checkpoint reader's float16 arrays, which the weight files
view and the simulator's products read in place). Measured in a child process (its resident
memory after each step, and its peak, VmHWM): loading holds the fp16 copy and the reader's
last block; a program added to a loaded model costs its working set. Measured here: loaded
1.2 fp16 copies, each added program 0.1-0.2, peak 1.34 (over the interpreter after a run of
the shipped tiny model, which imports the code a run needs; a simulator widening the
weights to a float32 copy measured 3.5, a program keeping its own joined weight file 1.0
more)."""

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
TINY = REPO / "tests" / "data" / "llm" / "tiny-llama"
# a model whose layers outweigh its embeddings: 4 layers of 512 x 2048, vocabulary 1024
CONFIG = {"vocab_size": 1024, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4,
          "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 256,
          "tie_word_embeddings": False}  # fmt: skip


def test_two_prompt_buckets_and_decode_share_one_copy(tmp_path) -> None:
    save(tmp_path, transformers.LlamaConfig(**CONFIG), torch.bfloat16)
    script = textwrap.dedent(f"""
        import json
        # the code a run imports (reader, compiler, simulator): not what a model holds
        import ml_dtypes, safetensors.numpy
        import anekit.compiler, anekit.codegen.model_bundle, anekit.cost, anekit.llm
        import anekit.llm.graph, anekit.runtime.backends.sim, anekit.simulator
        from anekit.llm.plan import kv_bytes

        def status(key):
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

        # a run of the shipped tiny model first: every module a run imports, not a weight
        tiny = anekit.llm.load({str(TINY)!r}, max_context=64)
        tiny.generate(list(range(1, 10)), max_new_tokens=2, stop_at_eos=False)
        del tiny
        out = {{"start": status("VmRSS:")}}
        model = anekit.llm.load({str(tmp_path)!r}, max_context=64)
        out["loaded"] = status("VmRSS:")
        out["fp16_weights"] = model.conversion.fp16_bytes
        out["kv"] = kv_bytes(model.config, 64, itemsize=2)
        model.prefill(list(range(1, 10)))              # bucket 16
        out["one_program"] = status("VmRSS:")
        model.prefill(list(range(1, 30)))              # bucket 32
        model.generate(list(range(1, 10)), max_new_tokens=3, stop_at_eos=False)  # decode
        out["three_programs"] = status("VmRSS:")
        out["peak"] = status("VmHWM:")
        print(json.dumps(out))
    """)
    env = {"PYTHONPATH": str(REPO / "src"), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    m = json.loads(done.stdout.strip().splitlines()[-1])
    w16 = m["fp16_weights"]
    assert m["loaded"] - m["start"] < 1.25 * w16, m  # the one fp16 copy and the reader's block
    per_added_program = (m["three_programs"] - m["one_program"]) / 2
    assert per_added_program < 0.3 * w16, (per_added_program / w16, m)
    # the whole run, over the interpreter's own: within the 1.5x of weights and cache
    assert m["peak"] - m["start"] < 1.5 * (w16 + m["kv"]), ((m["peak"] - m["start"]) / w16, m)
