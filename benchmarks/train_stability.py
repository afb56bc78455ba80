"""Orion's stability stress test (Table 7), reproduced on the simulator.

A small character-level transformer is first trained for a few steps on the Python
standard library's sources (the shared "pretrained" start). Then each of CHAINS
independent resume chains runs STEPS steps, every step in a fresh process that loads the
chain's checkpoint, compiles the step program (after loading: Orion's bug 1), trains
one step on the chain's own batch and saves. Reported: NaN/Inf occurrences, whether the
loss fell at every step of every chain, the mean and spread of the loss at the first and
last step across chains, and the time per process and per step.

    python benchmarks/train_stability.py [--chains 5] [--steps 5]

``python benchmarks/train_stability.py --smoke`` runs the same code paths in seconds (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import add_smoke, results_path, write_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "train_stability.json"
BATCH, SEQ, D, LAYERS = 8, 32, 32, 1


def chain_batch(chain: int) -> dict[str, np.ndarray]:
    from anekit.train.data import CharVocab, char_windows, python_source_text

    ids = CharVocab().encode(python_source_text(100_000))
    return char_windows(ids, SEQ, BATCH, np.random.default_rng(1000 + chain))


def pretrain(path: Path, steps: int) -> None:
    from anekit.train import AdamW, Trainer
    from anekit.train.data import CharVocab, char_windows, python_source_text
    from anekit.train.models import char_transformer, char_transformer_weights

    vocab = CharVocab()
    ids = vocab.encode(python_source_text(100_000))
    model = char_transformer(BATCH, SEQ, char_transformer_weights(len(vocab), D, LAYERS, SEQ))
    trainer = Trainer(model, "cross_entropy", AdamW(lr=1e-3), backend="sim", max_grad_norm=1.0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        trainer.step(char_windows(ids, SEQ, BATCH, rng))
    trainer.save(path)


def worker(path: Path, chain: int, record: Path) -> None:
    """One step of one chain, in this (fresh) process."""
    from anekit.train import Trainer

    start = time.perf_counter()
    trainer = Trainer.load(path)
    batch = chain_batch(chain)
    trainer.prepare(batch)  # compiled after the checkpoint is loaded (Orion, bug 1)
    step_start = time.perf_counter()
    loss = trainer.step(batch)
    step_seconds = time.perf_counter() - step_start
    state = trainer.state_values()
    finite = bool(np.isfinite(loss)) and all(bool(np.isfinite(v).all()) for v in state.values())
    trainer.save(path)
    record.write_text(json.dumps({"loss": loss, "finite": finite, "skipped": trainer.skipped,
                                  "step_seconds": step_seconds,
                                  "process_seconds": time.perf_counter() - start}))  # fmt: skip


def run(chains: int, steps: int, pretrain_steps: int, workdir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    base = workdir / "base.ckpt"
    subprocess.run([sys.executable, __file__, "--pretrain", str(base), str(pretrain_steps)],
                   check=True, env=env)  # fmt: skip
    losses, records, skipped = [], [], []
    for c in range(chains):
        ckpt = workdir / f"chain{c}.ckpt"
        ckpt.write_bytes(base.read_bytes())
        chain = []
        for _ in range(steps):
            rec = workdir / "record.json"
            subprocess.run([sys.executable, __file__, "--worker", str(ckpt), str(c), str(rec)],
                           check=True, env=env)  # fmt: skip
            r = json.loads(rec.read_text())
            records.append(r)
            chain.append(r["loss"])
        losses.append(chain)
        skipped.append(records[-1]["skipped"])  # the checkpoint counts skipped steps
    arr = np.array(losses)
    return {
        "chains": chains,
        "steps_per_chain": steps,
        "each_step_in_a_fresh_process": True,
        "nan_inf_occurrences": int(sum(1 for r in records if not r["finite"])),
        "skipped_steps_per_chain": skipped,
        "loss_falling_every_step": int(sum(bool(np.all(np.diff(c) < 0)) for c in arr)),
        "step1_loss_mean": float(arr[:, 0].mean()),
        "step1_loss_std": float(arr[:, 0].std()),
        "last_step_loss_mean": float(arr[:, -1].mean()),
        "last_step_loss_std": float(arr[:, -1].std()),
        "losses": arr.round(5).tolist(),
        "step_ms_mean": float(1000 * np.mean([r["step_seconds"] for r in records])),
        "step_ms_std": float(1000 * np.std([r["step_seconds"] for r in records])),
        "process_seconds_mean": float(np.mean([r["process_seconds"] for r in records])),
    }


def main() -> None:
    if sys.argv[1:2] == ["--pretrain"]:
        return pretrain(Path(sys.argv[2]), int(sys.argv[3]))
    if sys.argv[1:2] == ["--worker"]:
        return worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--pretrain-steps", type=int, default=20)
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:  # one chain of two steps after two pretraining steps
        args.chains, args.steps, args.pretrain_steps = 1, 2, 2
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.chains, args.steps, args.pretrain_steps, Path(tmp))
    doc = {"benchmark": "Orion Table 7 stability test on sim (fp16)",
           "model": f"char transformer d={D} layers={LAYERS} seq={SEQ} batch={BATCH}, AdamW lr 1e-3",
           "data": "Python standard library sources", "orion_table7": {
               "chains": 5, "steps": 5, "nan_inf": "0 / 25", "monotonic": "5 / 5",
               "step1_loss": "13.975 +- 0.003", "step5_loss": "13.913 +- 0.007",
               "step_ms": "913 +- 30 (M4 Max, Stories110M)"},
           "load_average_start": load, "load_average_end": os.getloadavg(), **result}  # fmt: skip
    write_json(results_path(RESULTS, args.smoke), doc)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
