"""Train an MLP or a small CNN on Fashion-MNIST on the simulator (fp16), with parameters and
Adam's moments resident in a session; evaluate, checkpoint and export.

Needs Debian's dataset-fashion-mnist (`make fashion-mnist` installs it).

    python examples/train_fashion_mnist.py --model mlp --epochs 10
    python examples/train_fashion_mnist.py --model cnn --epochs 2 --plot loss.png
"""

from __future__ import annotations

import argparse
from collections import Counter

import anekit
from anekit.train import Adam, Trainer
from anekit.train.data import fashion_mnist
from anekit.train.models import cnn, cnn_weights, mlp, mlp_weights

BATCH = 128


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--rows", type=int, default=60000, help="training images to use")
    ap.add_argument("--backend", default="sim", choices=["sim", "sim-fp32", "reference"])
    ap.add_argument("--plot", help="write the loss curve to this image")
    ap.add_argument("--checkpoint", default="fashion_mnist.ckpt")
    args = ap.parse_args()

    data = fashion_mnist()
    mean, std = 0.2860, 0.3530
    train = {"x": (data["train"]["x"][: args.rows] - mean) / std,
             "target": data["train"]["target"][: args.rows]}  # fmt: skip
    test = {"x": (data["test"]["x"] - mean) / std, "target": data["test"]["target"]}

    model = mlp(BATCH, mlp_weights((784, 256, 10)), (1, 28, 28)) if args.model == "mlp" \
        else cnn(BATCH, cnn_weights((1, 32, 64)))  # fmt: skip
    trainer = Trainer(model, "cross_entropy", Adam(lr=1e-3), target="m4", backend=args.backend)
    cpu = Counter(
        (r["op"], r["reason"]) for r in trainer.check({k: v[:BATCH] for k, v in train.items()})
    )
    for (op, reason), count in sorted(cpu.items()):
        print(f"on the CPU: {count} x {op}: {reason}")
    trainer.fit(train, epochs=args.epochs, batch_size=BATCH, plot=args.plot)
    result = trainer.evaluate(test)
    print(
        f"test accuracy {result['accuracy']:.4f}, loss {result['loss']:.4f}, "
        f"{trainer.step_count} steps, {trainer.skipped} skipped (non-finite gradients)"
    )
    trainer.save(args.checkpoint)
    graph = trainer.export()  # the trained model as a Graph: compile it like any other
    print(anekit.compile(graph, "m4").summary_line())


if __name__ == "__main__":
    main()
