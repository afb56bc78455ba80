"""`anekit train MODEL.onnx --data TRAIN.npz`: train an ONNX model on the simulator (the
whole step, optimizer included, compiled for the target), evaluate it, keep a checkpoint,
export the trained ONNX model; `--resume` continues from a checkpoint; `--check` says which
parts of the step run off the engine and why."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from anekit.cli.common import (
    add_command,
    add_format_option,
    add_shape_option,
    existing_model_file,
    output_format,
    parse_shapes,
    print_json,
    print_table,
)
from anekit.errors import AnekitError, InputError, PathError
from anekit.files import regular_file
from anekit.targets import DEFAULT_TARGET

OPTIMIZERS = ("adam", "adamw", "sgd")
DEFAULT_BATCH = 32  # when neither --batch-size nor the model fixes one


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "train",
        help="train an ONNX model on the simulator (forward, backward and optimizer in one program)",
        description="Train an ONNX model on batches from an .npz file (one array per model "
        "input, plus 'target': class labels or values), with the forward pass, the backward "
        "pass and the optimizer compiled into one step program for the target and run on "
        "the simulator in fp16. Writes a checkpoint after every epoch with --checkpoint and "
        "the trained ONNX model with --output.",
        examples=[
            "anekit train examples/digits_cnn.onnx --data train.npz --eval test.npz --epochs 3 "
            "--batch-size 1 -o trained.onnx --checkpoint run.ckpt",
            "anekit train --resume run.ckpt --data train.npz --eval test.npz --epochs 6 -o trained6.onnx",
            "anekit train model.onnx --shape input=32x784 --data train.npz --batch-size 32",
        ],
        json_help="print one JSON summary",
    )
    p.add_argument("model", nargs="?", help="the ONNX model (omit with --resume)")
    p.add_argument("--data", required=True, metavar="TRAIN.npz",
                   help="training rows: one array per model input and 'target'")  # fmt: skip
    p.add_argument("--eval", metavar="TEST.npz", help="rows to evaluate on after every epoch")
    p.add_argument("--loss", choices=("cross_entropy", "mse"), default="cross_entropy")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="weight decay (default 0, 0.01 for adamw)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=None, metavar="STEPS",
                   help="linear warm-up, then cosine decay to 0 over the run")  # fmt: skip
    p.add_argument("--epochs", type=int, default=1, help="epochs in all (a resumed run counts "
                   "the ones already done)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None,
                   help="rows per step (default: the model's batch when its input fixes one, "
                   "else 32; a resumed run keeps its own)")  # fmt: skip
    p.add_argument("--max-grad-norm", type=float, default=None, help="clip by global norm")
    p.add_argument("--freeze", action="append", default=[], metavar="PATTERN",
                   help="keep the initializers matching this glob fixed (repeatable)")  # fmt: skip
    p.add_argument(
        "--target",
        "-t",
        default=DEFAULT_TARGET,
        help=f"the chip to compile for (default {DEFAULT_TARGET})",
    )
    p.add_argument("--backend", default="sim", choices=("sim", "sim-fp32", "reference"),
                   help="sim: fp16 engine segments (default); sim-fp32 or reference: fp32")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the data order")
    p.add_argument("--checkpoint", metavar="CKPT", help="write a checkpoint here after every "
                   "epoch (with --resume, the default is the resumed checkpoint)")  # fmt: skip
    p.add_argument("--resume", metavar="CKPT", help="continue from this checkpoint (its --eval "
                   "data and batch size are kept unless given again)")  # fmt: skip
    p.add_argument("--output", "-o", metavar="TRAINED.onnx", help="write the trained model")
    p.add_argument("--plot", metavar="LOSS.png", help="plot the loss curve (needs matplotlib)")
    p.add_argument("--check", action="store_true",
                   help="compile the step for the first batch and list what runs on the CPU")  # fmt: skip
    add_shape_option(p)
    add_format_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from anekit.formats.npy import read_arrays

    if args.epochs < 1 or (args.batch_size is not None and args.batch_size < 1):
        raise InputError("--epochs and --batch-size must be at least 1")
    if args.plot:
        from anekit.train.trainer import check_plotting

        check_plotting()  # before training, not after it
    output = _new_output(args.output) if args.output else None
    if args.checkpoint:
        _checkpoint_target(Path(args.checkpoint))
    data = read_arrays(args.data, "training data")
    trainer = _trainer(args, data)
    if args.resume and not args.checkpoint:
        args.checkpoint = args.resume  # read as a checkpoint: a resumed run keeps it up to date
    batch = _batch_size(args, trainer)
    eval_path = args.eval or trainer.meta.get("eval")
    trainer.meta.update(eval=eval_path, batch_size=batch)
    test = read_arrays(eval_path, "evaluation data") if eval_path else None
    data = _checked_rows(trainer, data, "--data", batch)
    if test is not None:
        test = _checked_rows(trainer, test, "--eval", 1)
    first = {k: v[:batch] for k, v in data.items()}
    if args.check:
        return _report_check(trainer.check(first), args)
    if not (output or args.checkpoint) and trainer.epoch < args.epochs:
        print("anekit train: warning: nothing will be written: the trained model is lost "
              "when the run ends; add -o TRAINED.onnx or --checkpoint CKPT", file=sys.stderr)  # fmt: skip
    elif trainer.epoch >= args.epochs:
        print(f"anekit train: warning: the checkpoint has done {trainer.epoch} epoch(s), "
              f"--epochs {args.epochs} asks for no more; nothing is trained (--epochs counts "
              "the epochs already done)", file=sys.stderr)  # fmt: skip
    quiet = args.json or not sys.stderr.isatty()
    epochs = []
    while trainer.epoch < args.epochs:
        losses = trainer.fit(data, trainer.epoch + 1, batch, progress=not quiet)
        row: dict[str, Any] = {"epoch": trainer.epoch, "steps": len(losses),
                               "mean_loss": float(np.mean(losses)) if losses else None}  # fmt: skip
        if test is not None:
            row["eval"] = trainer.evaluate(test)
        epochs.append(row)
        if args.checkpoint:
            trainer.save(args.checkpoint)
        if not args.json:
            print(_epoch_line(row), flush=True)
    summary = {
        "steps": trainer.step_count,
        "skipped_steps": trainer.skipped,
        "loss_scale": trainer.loss_scale,
        "epochs": epochs,
        "cpu_parts": len(trainer.check(first)),
        "checkpoint": args.checkpoint,
        "output": str(trainer.export_onnx(output)) if output else None,
    }
    if args.plot:
        from anekit.train.trainer import plot_losses

        summary["plot"] = str(plot_losses(trainer.history, args.plot))
    if args.json:
        print_json(summary)
    else:
        done = f"{trainer.step_count} steps, {trainer.skipped} skipped (fp16 overflow)"
        print(done + (f"; trained model: {summary['output']}" if output else ""))
    return 0


def _trainer(args: argparse.Namespace, data: dict[str, np.ndarray]) -> Any:
    from anekit.train import Trainer

    if args.resume:
        if args.model:
            raise InputError(
                "give the model or --resume, not both: a checkpoint holds its model",
                hint=f"anekit train --resume {args.resume} --data {args.data}",
            )
        if args.shape:
            raise InputError("--shape goes with a model; a checkpoint's shapes are fixed",
                             hint="drop --shape")  # fmt: skip
        return Trainer.load(regular_file(args.resume, "checkpoint"), backend=args.backend)
    if not args.model:
        raise InputError("no model to train", hint="anekit train MODEL.onnx --data TRAIN.npz")
    model = existing_model_file(args.model)
    shapes = parse_shapes(args.shape)
    batch = args.batch_size or _declared_batch(model, shapes) or DEFAULT_BATCH
    steps = args.epochs * (_rows(data) // batch)
    return Trainer(
        str(model),
        args.loss,
        _optimizer(args, steps),
        input_shapes=shapes or None,
        target=args.target,
        backend=args.backend,
        freeze=args.freeze,
        max_grad_norm=args.max_grad_norm,
        seed=args.seed,
    )


def _declared_batch(path: Path, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """The batch an ONNX model's first input fixes (its first axis), without loading weights."""
    from anekit.frontend.onnx.loader import load_model

    proto, _ = load_model(path)  # sniffed and size-checked: a file that is not ONNX is refused
    weights = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in weights:
            continue
        if vi.name in shapes:
            return shapes[vi.name][0] if shapes[vi.name] else None
        dims = vi.type.tensor_type.shape.dim
        return int(dims[0].dim_value) if dims and dims[0].dim_value > 0 else None
    return None


def _batch_size(args: argparse.Namespace, trainer: Any) -> int:
    """--batch-size, checked against the batch the model's inputs fix (its first axis)."""
    fixed = {v.shape[0] for v in trainer.model.inputs if len(v.shape)}
    model_batch = fixed.pop() if len(fixed) == 1 else None
    batch = args.batch_size or trainer.meta.get("batch_size") or model_batch or DEFAULT_BATCH
    if model_batch is not None and batch != model_batch:
        first = trainer.model.inputs[0]
        dims = "x".join(["N", *map(str, first.shape[1:])])
        raise InputError(
            f"--batch-size {batch}, but the model's batch is fixed at {model_batch} (input "
            f"'{first.name}' has shape {list(first.shape)})",
            hint=f"use --batch-size {model_batch}, or export the model with a dynamic batch "
            f"axis and fix it with --shape {first.name}={dims.replace('N', str(batch))}"
            if not args.resume else f"use --batch-size {model_batch}",
        )
    return int(batch)


def _optimizer(args: argparse.Namespace, steps: int) -> Any:
    from anekit.train import SGD, Adam, AdamW, warmup_cosine

    lr: Any = args.lr
    if args.warmup is not None:
        if not 0 <= args.warmup < steps:
            raise InputError(f"--warmup {args.warmup} must be below the run's {steps} steps")
        lr = warmup_cosine(args.lr, steps, args.warmup)
    if args.optimizer == "sgd":
        return SGD(lr=lr, momentum=args.momentum, weight_decay=args.weight_decay or 0.0)
    if args.momentum:
        raise InputError("--momentum is an SGD setting", hint="add --optimizer sgd")
    if args.optimizer == "adamw":
        decay = 1e-2 if args.weight_decay is None else args.weight_decay
        return AdamW(lr=lr, weight_decay=decay)
    return Adam(lr=lr, weight_decay=args.weight_decay or 0.0)


def _rows(data: dict[str, np.ndarray]) -> int:
    return min((len(v) for v in data.values() if np.ndim(v)), default=0)


def _checked_rows(
    trainer: Any, data: dict[str, np.ndarray], flag: str, batch: int
) -> dict[str, np.ndarray]:
    """The arrays the step reads: one per model input and 'target', each with the same
    number of rows, the model's row shape (its batch axis is the batch size)."""
    from anekit.train.step import TARGET

    model = trainer.model
    wanted = [v.name for v in model.inputs] + [TARGET]
    missing = [n for n in wanted if n not in data]
    if missing:
        raise InputError(
            f"{flag} has no array for {missing}; it has {sorted(data)}",
            hint="save one array per model input and the labels as 'target': "
            "numpy.savez(path, " + ", ".join(f"{n}=..." for n in wanted) + ")",
        )
    lengths = {n: len(data[n]) if np.ndim(data[n]) else 0 for n in wanted}
    if len(set(lengths.values())) != 1 or min(lengths.values()) < batch:
        raise InputError(
            f"{flag}: the arrays need the same number of rows, at least {batch}: {lengths}"
        )
    for v in model.inputs:
        if tuple(data[v.name].shape[1:]) != tuple(v.shape[1:]):
            raise InputError(
                f"{flag}: '{v.name}' has rows of shape {list(data[v.name].shape[1:])}, the "
                f"model takes {list(v.shape[1:])}"
            )
    return {n: data[n] for n in wanted}


def _new_output(path: str) -> Path:
    """The trained model's path: a new file in an existing folder (an existing file, the
    source model above all, is never replaced)."""
    out = Path(path)
    if os.path.lexists(out):
        raise PathError(f"'{out}' exists; anekit train does not replace files",
                        hint="choose a new --output path")  # fmt: skip
    if not out.parent.is_dir():
        raise PathError(f"output directory '{out.parent}' does not exist",
                        hint=f"create it first (mkdir -p '{out.parent}')")  # fmt: skip
    if out.suffix != ".onnx":
        raise AnekitError(f"--output '{out}' must end in .onnx")
    return out


def _checkpoint_target(path: Path) -> None:
    """Refused before any training: a path holding something other than a checkpoint."""
    from anekit.train.checkpoint import is_checkpoint

    if os.path.lexists(path) and not (path.is_file() and is_checkpoint(path)):
        raise PathError(f"'{path}' exists and is not an anekit checkpoint; refusing to replace it",
                        hint="choose a new --checkpoint path")  # fmt: skip
    if not path.parent.is_dir():
        raise PathError(f"checkpoint directory '{path.parent}' does not exist",
                        hint=f"create it first (mkdir -p '{path.parent}')")  # fmt: skip


def _report_check(rows: list[dict[str, Any]], args: argparse.Namespace) -> int:
    fmt = output_format(args)
    if fmt == "json":
        print_json({"cpu_parts": rows})
        return 0
    if not rows:
        print("the whole step (forward, backward, optimizer) runs on the engine")
        return 0
    table = [[r["node"], r["op"], r.get("reason") or ""] for r in rows]
    print_table(f"{len(rows)} ops of the step run on the CPU", ("node", "op", "why"), table,
                sys.stdout, fmt=fmt)  # fmt: skip
    return 0


def _epoch_line(row: dict[str, Any]) -> str:
    text = f"epoch {row['epoch']}: {row['steps']} steps, mean loss {row['mean_loss']:.4f}"
    ev = row.get("eval")
    if ev:
        text += f"; eval loss {ev['loss']:.4f}"
        if "accuracy" in ev:
            text += f", accuracy {100 * ev['accuracy']:.2f}%"
    return text
