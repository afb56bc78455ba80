"""Train the tiny language models the language-model tests load (run once; the folders it
writes are committed as test data, so tests never train).

Every model learns next-token prediction on Python standard library sources (the Python
Software Foundation License; CPython 3.11's files) with one byte-level BPE vocabulary
trained on the same text, for a few hundred steps, enough that their logits are decisive (a
clear top-1), as a real checkpoint's are. Written with ``save_pretrained`` (fp32
safetensors) beside the tokenizer: GPT-2 as vocab.json + merges.txt, the others as
tokenizer.json.

Beside GPT-2 and Llama, one model per family anekit reads, each configured to exercise what
sets the family apart (``family_configs``): Llama 3 rotary scaling and tied embeddings; Mistral's
and Qwen2's sliding windows shorter than a prompt plus 64 generated tokens (Qwen2 with one
full-attention layer below a sliding one, and query/key/value biases); Qwen3's query/key
norms and an explicit head_dim unequal to hidden/heads; Gemma 3's interleaved sliding and
global layers with their own rotary bases, four norms per block, scaled embeddings and
GELU-tanh; Phi-3's fused qkv and gate_up projections with a window. Each is seeded on its
own, so ``--only`` regenerates one without changing the others.

    python tests/data/make_tiny_lms.py [--steps 400] [--family-steps 1000] [--only tiny-qwen3 ...]
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

OUT = Path(__file__).resolve().parent / "llm"
SOURCES = ("textwrap.py", "string/__init__.py", "heapq.py", "bisect.py", "functools.py",
           "fractions.py", "shlex.py", "difflib.py", "calendar.py", "statistics.py")  # fmt: skip
VOCAB = 512
CONTEXT = 256
SEQ = 128
WINDOW = 16  # sliding windows far shorter than a prompt plus 64 generated tokens
# shared by every family model: 2 layers, grouped-query attention, a 512-token vocabulary
SMALL = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": CONTEXT}  # fmt: skip


def family_configs(eos: int) -> dict:
    """name -> (config, seed): each family's distinguishing features switched on."""
    ids = {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}
    return {
        "tiny-llama3": (LlamaConfig(**SMALL, **ids, tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32, "rope_theta": 500000.0}), 3),
        "tiny-mistral": (MistralConfig(**SMALL, **ids, head_dim=16, sliding_window=WINDOW), 4),
        "tiny-qwen2": (Qwen2Config(**SMALL, **ids, tie_word_embeddings=True, use_sliding_window=True,
                                   sliding_window=WINDOW, max_window_layers=1,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1e6}), 5),
        "tiny-qwen3": (Qwen3Config(**SMALL, **ids, head_dim=32, tie_word_embeddings=True), 6),
        "tiny-gemma3": (Gemma3TextConfig(
            **SMALL, **ids, head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}), 7),
        "tiny-phi3": (Phi3Config(**SMALL, **ids, sliding_window=WINDOW), 8),
    }  # fmt: skip


def corpus() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in SOURCES:
        path = stdlib / name
        if not path.is_file():
            path = stdlib / name.replace("/__init__", "")
        texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


def train_tokenizer(text: str) -> ByteLevelBPETokenizer:
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([text], vocab_size=VOCAB, min_frequency=2,
                            special_tokens=["<|endoftext|>"])  # fmt: skip
    return tok


def train(model: torch.nn.Module, ids: torch.Tensor, steps: int, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(steps):
        starts = torch.randint(0, len(ids) - SEQ - 1, (16,), generator=gen)
        batch = torch.stack([ids[s:s + SEQ] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"  step {step}: loss {loss.item():.3f}")
    model.eval()
    return float(loss.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="GPT-2's and Llama's training steps")
    parser.add_argument("--family-steps", type=int, default=1000,
                        help="the family models' steps (at 400, two met near ties that fp16 rounding flipped)")
    parser.add_argument("--only", nargs="+", help="the folders to (re)write (default: all)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    text = corpus()
    tok = train_tokenizer(text)
    ids = torch.tensor(tok.encode(text).ids, dtype=torch.long)
    print(f"corpus: {len(text)} characters, {len(ids)} tokens")
    eos = tok.token_to_id("<|endoftext|>")
    wanted = set(args.only or ())

    def write(name: str, model: torch.nn.Module, loss: float, steps: int) -> None:
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder, safe_serialization=True)
        if name == "tiny-gpt2":
            tok.save_model(str(folder))  # vocab.json + merges.txt
        else:
            tok.save(str(folder / "tokenizer.json"))
        (folder / "training.json").write_text(json.dumps({
            "steps": steps, "final_loss": round(loss, 4), "sources": list(SOURCES),
            "tokens": len(ids), "script": "tests/data/make_tiny_lms.py",
        }, indent=2) + "\n")  # fmt: skip

    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=eos, eos_token_id=eos,
    ))  # fmt: skip
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos,
    ))  # fmt: skip
    # GPT-2 and Llama share the global generator (GPT-2 trains with dropout): made together
    if not wanted or {"tiny-gpt2", "tiny-llama"} <= wanted:
        for name, model, seed in (("tiny-gpt2", gpt2, 1), ("tiny-llama", llama, 2)):
            print(name)
            write(name, model, train(model, ids, args.steps, seed), args.steps)
    for name, (config, seed) in family_configs(eos).items():
        if wanted and name not in wanted:
            continue
        print(name)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        write(name, model, train(model, ids, args.family_steps, seed), args.family_steps)


if __name__ == "__main__":
    main()
