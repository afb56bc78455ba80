"""Train a small character-level transformer on real text (the Python standard library's
own sources) on the simulator, then generate text with the exported model and the runtime.

    python examples/train_char_lm.py --steps 300
"""

from __future__ import annotations

import argparse

import numpy as np

import anekit
from anekit.train import AdamW, Trainer, warmup_cosine
from anekit.train.data import CharVocab, char_windows, python_source_text
from anekit.train.models import char_transformer, char_transformer_weights

BATCH, SEQ = 16, 64


def generate(graph: anekit.Graph, vocab: CharVocab, prompt: str, length: int,
             temperature: float, seed: int, backend: str) -> list[str]:  # fmt: skip
    """Sample ``length`` characters after ``prompt`` for each row of the exported model's
    batch: the context sits left-aligned in the window (the causal mask keeps the padding
    after it unseen) and the logits at its last position give the next character."""
    program = anekit.compile(graph, "m4").program
    rng = np.random.default_rng(seed)
    texts = [prompt] * BATCH
    for _ in range(length):
        window = np.full((BATCH, SEQ), vocab.index[" "], np.int32)
        ends = []
        for i, t in enumerate(texts):
            ctx = vocab.encode(t[-SEQ:])
            window[i, : len(ctx)] = ctx
            ends.append(len(ctx) - 1)
        logits = program.run({"ids": window}, backend=backend)[graph.output_names[0]]
        for i, end in enumerate(ends):
            z = logits[i, end].astype(np.float64) / temperature
            p = np.exp(z - z.max())
            texts[i] += vocab.symbols[rng.choice(len(p), p=p / p.sum())]
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--backend", default="sim", choices=["sim", "sim-fp32", "reference"])
    ap.add_argument("--prompt", default="def ")
    ap.add_argument("--length", type=int, default=80)
    ap.add_argument("--plot", help="write the loss curve to this image")
    args = ap.parse_args()

    vocab = CharVocab()
    ids = vocab.encode(python_source_text(400_000))
    split = int(0.9 * len(ids))
    train_ids, held_out = ids[:split], ids[split:]
    model = char_transformer(
        BATCH, SEQ, char_transformer_weights(len(vocab), d=64, layers=2, seq=SEQ)
    )
    sched = warmup_cosine(3e-3, total=args.steps, warmup=args.steps // 10, min_lr=3e-4)
    trainer = Trainer(model, "cross_entropy", AdamW(lr=sched, weight_decay=0.01),
                      backend=args.backend, max_grad_norm=1.0)  # fmt: skip
    rng = np.random.default_rng(0)
    losses = [trainer.step(char_windows(train_ids, SEQ, BATCH, rng)) for _ in range(args.steps)]
    for i in range(0, len(losses), max(1, len(losses) // 10)):
        print(f"step {i + 1:4d}  loss {np.mean(losses[i : i + 10]):.3f}")
    held = trainer.evaluate(char_windows(held_out, SEQ, 4 * BATCH, np.random.default_rng(1)))
    print(
        f"held-out loss {held['loss']:.3f} (uniform guess: {np.log(len(vocab)):.3f}), "
        f"next-character accuracy {held['accuracy']:.3f}"
    )
    if args.plot:
        from anekit.train.trainer import plot_losses

        plot_losses(losses, args.plot)
    samples = generate(trainer.export(), vocab, args.prompt, args.length, 0.8, 0, args.backend)
    for s in samples[:3]:
        print("---\n" + s)


if __name__ == "__main__":
    main()
