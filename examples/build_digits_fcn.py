"""Build examples/digits_fcn.onnx: a fully convolutional digit classifier (convolutions, a
max pool, a global average pool, a linear head) trained on scikit-learn's 8x8 digits and
exported with dynamic batch, height and width, so one model takes 8x8 digits and digits
scaled up to 16x16 (what `anekit compile --enumerated-shape` exports as one Core ML model).

Run once by a developer (needs torch and scikit-learn); the result is committed, so
`make demo` needs neither. Deterministic: fixed seeds, fixed split (the one
build_digits_cnn.py uses). Half the training digits are scaled up to 16x16, so the model
learns both sizes.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import torch
from build_digits_cnn import digits_split  # this folder: the script's own directory
from torch import nn

HERE = Path(__file__).resolve().parent


class DigitsFCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )  # fmt: skip
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(self.features(x)), dim=-1)


def upscale(images: np.ndarray) -> np.ndarray:
    """8x8 digits as 16x16 (each pixel repeated 2x2)."""
    return images.repeat(2, axis=-2).repeat(2, axis=-1)


def main() -> None:
    torch.manual_seed(0)
    x, y, train, test = digits_split()
    model = DigitsFCN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    small, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
    large = torch.from_numpy(upscale(x[train]))
    for _epoch in range(40):
        model.train()
        for i in range(0, len(train), 64):
            for batch in (small[i : i + 64], large[i : i + 64]):
                opt.zero_grad()
                logits = model.head(model.features(batch))
                nn.functional.cross_entropy(logits, yt[i : i + 64]).backward()
                opt.step()
    model.eval()
    accuracy = {}
    with torch.no_grad():
        for size, images in (("8x8", x[test]), ("16x16", upscale(x[test]))):
            pred = model(torch.from_numpy(images)).argmax(-1).numpy()
            accuracy[size] = float((pred == y[test]).mean())
    print("held-out accuracy:", accuracy)

    buf = io.BytesIO()
    torch.onnx.export(
        model, (torch.from_numpy(x[test[:1]]),), buf, input_names=["image"], output_names=["probs"],
        dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}, "probs": {0: "batch"}},
        opset_version=17, dynamo=False,
    )  # fmt: skip
    proto = onnx.load_from_string(buf.getvalue())
    proto.doc_string = (
        "fully convolutional digit classifier trained on scikit-learn digits at 8x8 and 16x16; "
        f"held-out accuracy {accuracy['8x8']:.4f} (8x8), {accuracy['16x16']:.4f} (16x16)"
    )
    onnx.save(proto, HERE / "digits_fcn.onnx")


if __name__ == "__main__":
    main()
