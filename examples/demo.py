"""The main job on the bundled example, from Python: compile a trained digits CNN for two
chips, explain placement, estimate latency, and check the fp16 simulation against fp32.

Run by `make demo` (after the CLI steps in demo.sh). Needs only anekit's core install.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import anekit

HERE = Path(__file__).resolve().parent


def main() -> int:
    data = np.load(HERE / "digits_heldout.npz")
    images, labels = data["images"], data["labels"]
    source = anekit.from_onnx(HERE / "digits_cnn.onnx")
    print(f"model: {len(source.nodes)} ONNX-level ops, {source.parameter_count():,} parameters")

    with tempfile.TemporaryDirectory() as tmp:
        for target in ("m1", "m4"):
            cm = anekit.compile(HERE / "digits_cnn.onnx", target=target)
            summary = cm.report["summary"]
            estimate = cm.report.get("estimate") or {}
            print(
                f"\n[{target}] {summary['nodes']} nodes -> {summary['engine_layers']} engine layers, "
                f"{summary['ane_segments']} ANE segment(s), {summary['cpu_ops']} CPU op(s); "
                f"estimated {estimate.get('total_ms', float('nan')):.3f} ms ({estimate.get('bottleneck', '?')}-bound)"
            )
            bundle = Path(tmp) / f"digits_{target}.anekit"
            cm.save(bundle)
            program = anekit.load(bundle)
            ref_correct = sim_correct = agree = 0
            worst = 0.0
            for image, label in zip(images, labels, strict=True):
                feeds = {"image": image[None]}
                ref = source.run(feeds)["probs"]
                sim = program.run(feeds, backend="sim")["probs"]
                worst = max(worst, float(np.abs(ref - sim).max()))
                ref_correct += int(ref.argmax() == label)
                sim_correct += int(sim.argmax() == label)
                agree += int(ref.argmax() == sim.argmax())
            n = len(labels)
            print(
                f"[{target}] {n} held-out digits: fp32 reference accuracy {ref_correct / n:.2%}, "
                f"fp16 simulation accuracy {sim_correct / n:.2%}, top-1 agreement {agree / n:.2%}, "
                f"max probability difference {worst:.2e}"
            )
            if agree != n:
                print("fp16 simulation disagrees with fp32 on some digits", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
