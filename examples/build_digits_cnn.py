"""Build examples/digits_cnn.onnx: a small CNN trained on scikit-learn's 8x8 handwritten digits.

Run once by a developer (needs torch and scikit-learn); the result is committed, so
`make demo` needs neither. Deterministic: fixed seeds, fixed split.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import torch
from sklearn.datasets import load_digits
from torch import nn

HERE = Path(__file__).resolve().parent


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )  # fmt: skip
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.GELU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(self.features(x)), dim=-1)


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits (N x 1 x 8 x 8 in [0, 1]), their labels, and the fixed split:
    the indices of 1,500 training digits and of the held-out rest."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    return x, y, order[:1500], order[1500:]


def main() -> None:
    torch.manual_seed(0)
    x, y, train, test = digits_split()
    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
    for _epoch in range(30):
        model.train()
        for i in range(0, len(train), 64):
            opt.zero_grad()
            logits = model.head(model.features(xt[i : i + 64]))
            nn.functional.cross_entropy(logits, yt[i : i + 64]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x[test])).argmax(-1).numpy()
    accuracy = float((pred == y[test]).mean())
    print(f"held-out accuracy: {accuracy:.4f} on {len(test)} digits")

    buf = io.BytesIO()
    torch.onnx.export(
        model, (torch.from_numpy(x[test[:1]]),), buf, input_names=["image"], output_names=["probs"],
        opset_version=17, dynamo=False,
    )  # fmt: skip
    proto = onnx.load_from_string(buf.getvalue())
    proto.doc_string = (
        f"8x8 digit classifier trained on scikit-learn digits; held-out accuracy {accuracy:.4f}"
    )
    onnx.save(proto, HERE / "digits_cnn.onnx")
    np.save(HERE / "digit.npy", x[test[:1]])
    np.savez(HERE / "digits_heldout.npz", images=x[test], labels=y[test])
    print("label of digit.npy:", int(y[test[0]]))


if __name__ == "__main__":
    main()
