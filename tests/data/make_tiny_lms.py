"""Train the tiny GPT-2 and Llama models the language-model tests load (run once; the
folders it writes are committed as test data, so tests never train).

Both learn a byte-level BPE vocabulary and next-token prediction on Python standard library
sources for a few hundred steps, enough that their logits are decisive (a clear top-1), as a
real checkpoint's are. Written with ``save_pretrained`` (safetensors) beside the tokenizer:
GPT-2 as vocab.json + merges.txt, Llama as tokenizer.json.

    python tests/data/make_tiny_lms.py [--steps 400]
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parent / "llm"
SOURCES = ("textwrap.py", "string/__init__.py", "heapq.py", "bisect.py", "functools.py",
           "fractions.py", "shlex.py", "difflib.py", "calendar.py", "statistics.py")  # fmt: skip
VOCAB = 512
CONTEXT = 256
SEQ = 128


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
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    text = corpus()
    tok = train_tokenizer(text)
    ids = torch.tensor(tok.encode(text).ids, dtype=torch.long)
    print(f"corpus: {len(text)} characters, {len(ids)} tokens")
    eos = tok.token_to_id("<|endoftext|>")

    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=eos, eos_token_id=eos,
    ))  # fmt: skip
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos,
    ))  # fmt: skip
    for name, model, seed in (("tiny-gpt2", gpt2, 1), ("tiny-llama", llama, 2)):
        print(name)
        loss = train(model, ids, args.steps, seed)
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder, safe_serialization=True)
        if name == "tiny-gpt2":
            tok.save_model(str(folder))  # vocab.json + merges.txt
        else:
            tok.save(str(folder / "tokenizer.json"))
        (folder / "training.json").write_text(json.dumps({
            "steps": args.steps, "final_loss": round(loss, 4), "sources": list(SOURCES),
            "tokens": len(ids), "script": "tests/data/make_tiny_lms.py",
        }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
