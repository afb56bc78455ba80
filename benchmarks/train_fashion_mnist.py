"""Fashion-MNIST trained on the simulator in fp16 against the same model in torch fp32.

Both start from the same weights, see the batches in the same order (the trainer's
generator draws one permutation per epoch; the torch run replays it) and use the same
hyperparameters (Adam, lr 1e-3, batch 128, the last partial batch dropped). Pixels are
standardised with the training set's mean and deviation (0.286, 0.353). The data is
Debian's dataset-fashion-mnist (60000 training and 10000 test images; `make
fashion-mnist` installs it). Epochs are few because the machine is shared: the JSON says
how many and how long each run took, with the load average.

    python benchmarks/train_fashion_mnist.py [--epochs-mlp 10] [--epochs-cnn 2] [--train-rows N]

``python benchmarks/train_fashion_mnist.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_smoke, results_path, write_json  # noqa: E402

from anekit.train import Adam, Trainer  # noqa: E402
from anekit.train.data import fashion_mnist  # noqa: E402
from anekit.train.models import cnn, cnn_weights, mlp, mlp_weights  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "train_fashion_mnist.json"
BATCH, LR, SEED = 128, 1e-3, 0


def torch_model(kind: str, w: dict):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict(
                {k: torch.nn.Parameter(torch.tensor(v)) for k, v in w.items()}
            )

        def forward(self, x):
            F = torch.nn.functional
            if kind == "mlp":
                h = x.reshape(len(x), -1)
                h = torch.relu(h @ self.p["w0"] + self.p["b0"])
                return h @ self.p["w1"] + self.p["b1"]
            h = x
            for i in range(2):
                h = F.max_pool2d(
                    torch.relu(F.conv2d(h, self.p[f"c{i}"], self.p[f"cb{i}"], padding=1)), 2
                )
            return h.reshape(len(x), -1) @ self.p["fc"] + self.p["fcb"]

    return Net()


def train_torch(kind: str, w: dict, train: dict, test: dict, epochs: int) -> dict:
    import torch

    torch.set_num_threads(1)
    net = torch_model(kind, w)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    rng = np.random.Generator(np.random.PCG64(SEED))  # the trainer's generator, replayed
    n = len(train["target"])
    start = time.perf_counter()
    steps = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for i in range(n // BATCH):
            idx = order[i * BATCH : (i + 1) * BATCH]
            loss = torch.nn.functional.cross_entropy(
                net(torch.tensor(train["x"][idx])), torch.tensor(train["target"][idx])
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    seconds = time.perf_counter() - start
    with torch.no_grad():
        logits = torch.cat(
            [net(torch.tensor(test["x"][i : i + 1000])) for i in range(0, len(test["x"]), 1000)]
        )
    acc = float((logits.argmax(-1).numpy() == test["target"]).mean())
    return {
        "accuracy": acc,
        "steps": steps,
        "seconds": round(seconds, 1),
        "ms_per_step": round(1000 * seconds / steps, 2),
    }


def train_sim(kind: str, w: dict, train: dict, test: dict, epochs: int) -> dict:
    model = mlp(BATCH, w, (1, 28, 28)) if kind == "mlp" else cnn(BATCH, w)
    trainer = Trainer(model, "cross_entropy", Adam(lr=LR), backend="sim", seed=SEED)
    start = time.perf_counter()
    losses = trainer.fit(train, epochs=epochs, batch_size=BATCH, progress=False)
    seconds = time.perf_counter() - start
    result = trainer.evaluate(test)
    return {"accuracy": result["accuracy"], "test_loss": round(result["loss"], 4),
            "steps": len(losses), "skipped_steps": trainer.skipped,
            "nonfinite_free": trainer.skipped == 0 and bool(np.isfinite(losses).all()),
            "loss_first": round(losses[0], 4), "loss_last_100_mean": round(float(np.mean(losses[-100:])), 4),
            "final_loss_scale": trainer.loss_scale, "seconds": round(seconds, 1),
            "ms_per_step": round(1000 * seconds / len(losses), 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs-mlp", type=int, default=10)
    ap.add_argument("--epochs-cnn", type=int, default=2)
    ap.add_argument("--train-rows", type=int, default=60000)
    ap.add_argument("--only", choices=["mlp", "cnn"])
    ap.add_argument("--cnn-channels", default="1,32,64",
                    help="channels of the CNN's two 3x3 convolutions (input first)")  # fmt: skip
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:  # a few hundred rows, one epoch each, a narrow CNN
        args.epochs_mlp, args.epochs_cnn, args.train_rows, args.cnn_channels = 1, 1, 256, "1,4,8"
    out = results_path(RESULTS, args.smoke)
    data = fashion_mnist()
    mean, std = 0.2860, 0.3530  # of the 60000 training images
    train = {
        "x": (data["train"]["x"][: args.train_rows] - mean) / std,
        "target": data["train"]["target"][: args.train_rows],
    }
    rows = 256 if args.smoke else None
    test = {"x": (data["test"]["x"][:rows] - mean) / std, "target": data["test"]["target"][:rows]}
    doc = {"benchmark": "Fashion-MNIST: anekit sim (fp16) vs torch CPU fp32, same init, order, hyperparameters",
           "data": "Debian dataset-fashion-mnist",
           "test_rows": len(test["target"]), "batch": BATCH, "optimizer": f"Adam lr={LR}",
           "load_average_start": os.getloadavg(), "models": {}}  # fmt: skip
    if out.exists():
        import json

        doc["models"] = json.loads(out.read_text()).get("models", {})
    kinds = [args.only] if args.only else ["mlp", "cnn"]
    for kind in kinds:
        epochs = args.epochs_mlp if kind == "mlp" else args.epochs_cnn
        channels = tuple(int(c) for c in args.cnn_channels.split(","))
        w = mlp_weights((784, 256, 10), SEED) if kind == "mlp" else cnn_weights(channels, seed=SEED)
        entry = {"epochs": epochs, "train_rows": len(train["target"]),
                 **({} if kind == "mlp" else {"channels": list(channels)}),
                 "load_average_start": os.getloadavg(), "torch_fp32": train_torch(kind, w, train, test, epochs),
                 "anekit_sim_fp16": train_sim(kind, w, train, test, epochs)}  # fmt: skip
        entry["accuracy_gap_points"] = round(
            100 * (entry["torch_fp32"]["accuracy"] - entry["anekit_sim_fp16"]["accuracy"]), 2
        )
        entry["target"] = ">= 88%" if kind == "mlp" else ">= 90%"
        key = kind if kind == "mlp" else f"cnn_{'_'.join(map(str, channels[1:]))}_{epochs}_epochs"
        doc["models"][key] = entry
        print(kind, entry)
    doc["load_average_end"] = os.getloadavg()
    write_json(out, doc)


if __name__ == "__main__":
    main()
