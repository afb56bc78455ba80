"""`Trainer`: compile the training step once per batch shape, keep parameters and optimizer
state resident in a session, and checkpoint so that a resumed run is bit-identical."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import FormatError, InputError, ModelError, path_argument
from anekit.ir.graph import Graph, Value
from anekit.ir.ops.scatter import one_hot
from anekit.targets import DEFAULT_TARGET
from anekit.train import checkpoint, graphio
from anekit.train.losses import LOSSES, resolve
from anekit.train.modes import dropout_mask, dropout_rate
from anekit.train.optim import Adam, Optimizer, from_config
from anekit.train.runner import BACKENDS, open_session
from anekit.train.step import (
    LOSS,
    NONFINITE_PREFIX,
    OVERFLOW,
    TARGET,
    StepGraph,
    build_step,
    next_name,
)

GROWTH_INTERVAL = 200  # steps without overflow before the loss scale doubles (as torch's)
MAX_LOSS_SCALE = 2.0**15
_ONE_HOT = np.array([0.0, 1.0], np.float32)  # (off, on) values of a label's one-hot row


def select_parameters(graph: Graph, freeze: Sequence[str] = ()) -> list[str]:
    """Trainable values: declared parameters, else float constants of rank >= 1 (ONNX
    initializers), minus those matching a ``freeze`` name pattern (fnmatch)."""
    declared = graph.metadata.get("parameters")
    names = list(declared) if declared else [
        n for n, a in graph.constants.items() if a.dtype.kind == "f" and a.ndim >= 1
    ]  # fmt: skip
    return [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in freeze)]


def _as_graph(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Graph, Any]:
    """(graph, ONNX ModelProto if the model came as ONNX); ``input_shapes`` fixes an ONNX
    model's dynamic dimensions (its batch, as a training export leaves it)."""
    if isinstance(model, Graph):
        if input_shapes:
            raise ModelError("input_shapes fixes an ONNX model's dynamic dimensions; a Graph's "
                             "shapes are fixed when it is built")  # fmt: skip
        return model, None
    import onnx

    from anekit.frontend.onnx import from_onnx
    from anekit.frontend.onnx.loader import load_model

    if isinstance(model, onnx.ModelProto):
        proto = model
    else:
        path = path_argument(model, "the model to train")
        load_model(path)  # sniffed and size-checked first: a file that is not ONNX is refused
        proto = onnx.load(os.fspath(path))
    return from_onnx(proto, input_shapes), proto


class Trainer:
    """Train ``model`` (a Graph, an ONNX path or ModelProto) on batches of named arrays.

    A batch maps each model input (and ``"target"``) to an array whose first axis is the
    batch. ``backend`` is ``"sim"`` (fp16 engine segments), ``"sim-fp32"`` or
    ``"reference"`` (the IR graph in fp32, matching torch operation for operation).
    """

    def __init__(
        self,
        model: Any,
        loss: str | Callable = "cross_entropy",
        optimizer: Optimizer | None = None,
        *,
        target: str = DEFAULT_TARGET,
        backend: str = "sim",
        resident_state: bool = True,
        freeze: Sequence[str] = (),
        max_grad_norm: float | None = None,
        loss_scale: float | None = None,
        seed: int = 0,
        flat_update: bool = True,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
    ):
        if not isinstance(target, str):
            raise InputError(f"target must be a chip name such as 'm4', not {target!r}")
        if backend not in BACKENDS:
            raise InputError(f"unknown training backend {backend!r}",
                             hint=f"choose one of {', '.join(BACKENDS)}")  # fmt: skip
        self.model, self._onnx = _as_graph(model, input_shapes)
        if not self.model.output_names:
            raise ModelError("the model has no outputs to train", hint="its first output is the loss's input")
        # the caller's own settings, kept in checkpoints (the CLI keeps its --eval there)
        self.meta: dict[str, Any] = {}
        self.loss = loss
        self._loss_fn = resolve(loss)
        self.optimizer = optimizer or Adam()
        self.chip = target
        self.backend = backend
        self.resident_state = resident_state
        self.freeze = tuple(freeze)
        self._sources = {}
        if self._onnx is not None:
            from anekit.train.export import onnx_sources

            self._sources = onnx_sources(self._onnx, self.model)
        self.params = [p for p in select_parameters(self.model) if not self._frozen(p)]
        if not self.params:
            raise ModelError("the model has no trainable parameters",
                             hint="check the freeze= patterns")  # fmt: skip
        self.max_grad_norm = _positive(max_grad_norm, "max_grad_norm")
        self.flat_update = flat_update  # one update chain per parameter group (train/flat.py)
        # sim-fp32 runs the sim program widened: its constants were stored as fp16 (Adam's
        # eps of 1e-8 is 0 there), so it takes the fp16-safe update; only sim, whose
        # arithmetic is fp16, needs the loss scaled
        self.fp16 = backend in ("sim", "sim-fp32")
        scaled = backend == "sim"
        _positive(loss_scale, "loss_scale")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise InputError(f"seed must be an integer of at least 0, not {seed!r}")
        self.dynamic_scale = loss_scale is None and scaled
        self.loss_scale = float(
            loss_scale if loss_scale is not None else 2.0**10 if scaled else 1.0
        )
        self.good_steps = 0
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.step_count = 0
        self.skipped = 0
        self.epoch = 0
        self.order: np.ndarray | None = None
        self.position = 0
        self.history: list[float] = []
        self._state: dict[str, np.ndarray] | None = None
        self._programs: dict[tuple, tuple[StepGraph, Any, Any]] = {}
        self._counters: dict[tuple, tuple[StepGraph, Any]] = {}  # see _nonfinite
        # the steps the overflow guard discarded: step number, loss scale, and per parameter
        # how many gradient elements were NaN or infinite
        self.overflows: list[dict[str, Any]] = []
        self._active: tuple | None = None

    def _frozen(self, name: str) -> bool:
        """A freeze pattern matches the value's name or its ONNX initializer's name."""
        names = [name] + ([self._sources[name][0]] if name in self._sources else [])
        return any(fnmatch.fnmatchcase(n, p) for n in names for p in self.freeze)

    # --- the step ------------------------------------------------------------------------

    def _signature(self, batch: Mapping[str, np.ndarray]) -> tuple:
        return tuple(
            (k, tuple(np.shape(v)), str(np.asarray(v).dtype)) for k, v in sorted(batch.items())
        )

    def _program(self, batch: Mapping[str, np.ndarray]) -> tuple[StepGraph, Any]:
        sig = self._signature(batch)
        if sig not in self._programs:
            sg = build_step(self.model, self._loss_fn, self.optimizer, self.params,
                            self._target_value(np.asarray(batch[TARGET])),
                            max_grad_norm=self.max_grad_norm, fp16=self.fp16,
                            flat_update=self.flat_update)  # fmt: skip
            session, compiled = open_session(sg.graph, sg.state, self.backend, self.chip,
                                             self.resident_state, guard=OVERFLOW)  # fmt: skip
            self._programs[sig] = (sg, session, compiled)
        sg, session, _ = self._programs[sig]
        if self._active != sig:
            # the state moves to this program's session (deferred: seeded from the current
            # values, never from the model the program was compiled with; Orion 7.1)
            self._state = self.state_values()
            session.seed(self._state)
            self._active = sig
        return sg, session

    def _check_batch(self, batch: Any) -> None:
        """A batch maps every model input and 'target' to an array; class labels lie in
        [0, classes) (a label outside would train on an all-zero or wrapped target)."""
        if not isinstance(batch, Mapping):
            raise InputError(f"a batch is a mapping of input name to array, not {type(batch).__name__}")
        wanted = [v.name for v in self.model.inputs if dropout_rate(v.name) is None] + [TARGET]
        missing = [n for n in wanted if n not in batch]
        if missing:
            raise InputError(f"the batch has no {missing}",
                             hint=f"a batch maps {', '.join(wanted)} to arrays")  # fmt: skip
        self._check_labels(np.asarray(batch[TARGET]), "the batch's target")

    def _check_labels(self, labels: np.ndarray, what: str) -> None:
        if labels.dtype.kind not in "iub":
            if labels.dtype.kind != "f":
                raise InputError(f"{what} holds {labels.dtype}, not numbers")
            return
        if labels.size and (int(labels.min()) < -(2**31) or int(labels.max()) >= 2**31):
            raise InputError(f"{what} holds labels beyond int32 (from {labels.min()} to "
                             f"{labels.max()}); they would wrap")  # fmt: skip
        logits = self.model.values[self.model.output_names[0]].shape
        rows = labels.shape[1:] == tuple(logits[1:-1]) and labels.ndim == len(logits) - 1
        if self.loss != "cross_entropy" or not rows or labels.size == 0:
            return
        classes = logits[-1]
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= classes:
            bad = low if low < 0 else high
            raise InputError(f"{what} holds the class label {bad}; the model has {classes} "
                             f"classes (labels 0 to {classes - 1})",
                             hint="check the labels, or the model's output size")  # fmt: skip

    def _target_value(self, t: np.ndarray) -> Value:
        """The step's target input. Class labels for the built-in cross entropy are fed as
        their one-hot rows, made on the host by the IR's own one_hot (`_feeds`): the same
        0/1 values the graph's one_hot op would make, without an integer op that is a CPU
        segment of its own in every step."""
        if t.dtype.kind == "f":
            return Value(TARGET, t.shape, "fp32")
        logits = self.model.values[self.model.output_names[0]].shape
        if self.loss == "cross_entropy" and t.shape == logits[:-1]:
            return Value(TARGET, logits, "fp32")
        return Value(TARGET, t.shape, "int32")  # a callable loss takes the labels as they are

    def state_values(self) -> dict[str, np.ndarray]:
        """Every state value now (parameters, optimizer slots, running statistics)."""
        if self._active is not None:
            sg, session, _ = self._programs[self._active]
            return {s: np.array(session.read(s), np.float32) for s in sg.state}
        if self._state is None:
            return self._initial_state()
        return dict(self._state)

    def _initial_state(self) -> dict[str, np.ndarray]:
        out = {p: np.array(self.model.constants[p], np.float32) for p in self.params}
        for n, a in self.model.constants.items():  # running statistics of batch_norm
            if any(node.op == "batch_norm" and n in node.inputs[3:] for node in self.model.nodes):
                out[n] = np.array(a, np.float32)
        for p in self.params:
            for s in self.optimizer.slots_for(self.fp16):
                out[f"{p}.{s}"] = np.zeros(self.model.constants[p].shape, np.float32)
        return out

    def _feeds(self, sg: StepGraph, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
        feeds: dict[str, Any] = {}
        for name in sg.data_inputs:
            rate = dropout_rate(name)
            if rate is not None:
                feeds[name] = dropout_mask(self.rng, sg.graph.values[name].shape, rate)
            elif name not in batch:
                raise InputError(f"the batch has no '{name}'",
                                 hint=f"a batch maps {', '.join(sg.data_inputs)} to arrays")  # fmt: skip
            elif name == TARGET and np.asarray(batch[name]).dtype.kind in "iu":
                labels = np.asarray(batch[name], np.int32)  # class labels
                target = sg.graph.values[TARGET]
                feeds[name] = (
                    one_hot(labels, _ONE_HOT, depth=target.shape[-1], axis=-1)
                    if target.dtype.is_float else labels
                )  # fmt: skip
            else:
                feeds[name] = batch[name]
        scalars = self.optimizer.scalars(self.step_count + 1)
        scalars.update(loss_scale=self.loss_scale, inv_loss_scale=1.0 / self.loss_scale)
        feeds.update({k: np.array([v], np.float32) for k, v in scalars.items()})
        return feeds

    def prepare(self, batch: Mapping[str, np.ndarray]) -> None:
        """Compile (or pick) the step program for this batch's shapes now, not in step()."""
        self._program(batch)

    def compiled(self, batch: Mapping[str, np.ndarray]) -> Any:
        """The compiled step program for this batch's shapes (None on ``reference``)."""
        self._program(batch)
        return self._programs[self._active][2]

    def check(self, batch: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
        """Where the step program for this batch's shapes runs off the engine, and why (the
        compiler's placement reasons: an embedding gather and its gradient, a matmul wider
        than the engine's 65536 limit)."""
        compiled = self.compiled(batch)
        if compiled is None:
            return []
        return [r.as_dict() for r in compiled.ops if r.as_dict()["placement"] == "cpu"]

    def step(self, batch: Mapping[str, np.ndarray]) -> float:
        """One training step on ``batch``; returns its loss (before the update)."""
        self._check_batch(batch)
        sg, session = self._program(batch)
        feeds = self._feeds(sg, batch)
        out = session.run(feeds)
        loss = float(np.asarray(out[LOSS]).reshape(-1)[0])
        if not np.isfinite(out[OVERFLOW]).all():
            # the session kept every state value: say where, then retry at half the scale
            self.overflows.append({"step": self.step_count, "loss_scale": self.loss_scale,
                                   "nonfinite": self._nonfinite(batch, feeds)})  # fmt: skip
            self.skipped += 1
            self.good_steps = 0
            if self.dynamic_scale:
                self.loss_scale = max(1.0, self.loss_scale / 2)
        else:
            self.step_count += 1
            self.good_steps += 1
            if self.dynamic_scale and self.good_steps % GROWTH_INTERVAL == 0:
                self.loss_scale = min(MAX_LOSS_SCALE, self.loss_scale * 2)
        self.history.append(loss)
        return loss

    def _nonfinite(self, batch: Mapping[str, np.ndarray], feeds: Mapping[str, Any]) -> dict:
        """Per parameter, how many gradient elements of the discarded step were NaN or
        infinite: the step's forward and backward again (`build_step(counts_only=True)`,
        compiled once per batch shape) on the same feeds, dropout masks included, and the
        state the step started from, which the session kept."""
        sig = self._signature(batch)
        if sig not in self._counters:
            from anekit.compiler import compile as compile_model

            sg = build_step(self.model, self._loss_fn, self.optimizer, self.params,
                            self._target_value(np.asarray(batch[TARGET])), fp16=self.fp16,
                            counts_only=True)  # fmt: skip
            compiled = None if self.backend == "reference" else compile_model(sg.graph, self.chip)
            self._counters[sig] = (sg, compiled)
        sg, compiled = self._counters[sig]
        values = {**feeds, **self.state_values()}
        names = {v.name for v in sg.graph.inputs}
        args = {k: v for k, v in values.items() if k in names}
        out = sg.graph.run(args) if compiled is None else compiled.program.run(args, self.backend)
        return {p: int(np.asarray(out[NONFINITE_PREFIX + p]).reshape(-1)[0]) for p in self.params}

    # --- epochs --------------------------------------------------------------------------

    def fit(self, data: Mapping[str, np.ndarray], epochs: int = 1, batch_size: int = 32, *,
            steps: int | None = None, shuffle: bool = True, progress: bool = True,
            plot: str | os.PathLike[str] | None = None) -> list[float]:  # fmt: skip
        """Train until ``epochs`` epochs are complete (counting epochs already done, so a
        resumed trainer continues where it stopped), or for at most ``steps`` steps.
        Each epoch visits the rows in an order drawn from the trainer's generator; a last
        partial batch is dropped (one program per batch shape). Returns the step losses."""
        for name, value, low in (("epochs", epochs, 1), ("batch_size", batch_size, 1),
                                 ("steps", steps, 1)):  # fmt: skip
            if value is None and name == "steps":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise InputError(f"fit's {name} must be an integer of at least {low}, not {value!r}")
        if plot is not None:
            check_plotting()  # before training, not after it
        if not isinstance(data, Mapping):
            raise InputError(f"fit's data is a mapping of input name to array, not {type(data).__name__}")
        n = _rows(data)
        self._check_labels(np.asarray(data[TARGET]), "the data's target")
        per_epoch = n // batch_size
        if per_epoch == 0:
            raise InputError(f"{n} rows make no batch of {batch_size}")
        losses: list[float] = []
        bar = _progress(
            progress, total=(epochs - self.epoch) * per_epoch if steps is None else steps
        )
        try:
            while self.epoch < epochs and (steps is None or len(losses) < steps):
                if self.order is None:
                    self.order = self.rng.permutation(n) if shuffle else np.arange(n)
                    self.position = 0
                idx = self.order[self.position : self.position + batch_size]
                losses.append(self.step({k: np.asarray(v)[idx] for k, v in data.items()}))
                self.position += batch_size
                if self.position + batch_size > n:
                    self.epoch += 1
                    self.order = None
                bar(losses[-1])
        finally:
            bar(None)
        if plot is not None:
            plot_losses(self.history, plot)
        return losses

    def evaluate(self, data: Mapping[str, np.ndarray], batch_size: int = 256) -> dict[str, float]:
        """Mean loss (and accuracy for class labels) of the current model, in eval mode."""
        from anekit.train.evaluate import evaluate

        return evaluate(self, data, batch_size)

    # --- export and checkpoints ----------------------------------------------------------

    def export(self) -> Graph:
        """The trained model as a Graph: parameters and running statistics as constants,
        dropout masks gone (evaluation mode)."""
        from anekit.train.export import export_graph

        return export_graph(self.model, self.state_values())

    def export_onnx(self, path: str | os.PathLike[str]) -> Path:
        """The original ONNX model with its initializers replaced by the trained values."""
        from anekit.train.export import export_onnx

        if self._onnx is None:
            raise ModelError("export_onnx needs a model that came as ONNX (or from torch)",
                             hint="use export() for a Graph")  # fmt: skip
        trained = {k: v for k, v in self.state_values().items() if k in self.model.constants}
        return export_onnx(self._onnx, self._sources, trained, path)

    def save(self, path: str | os.PathLike[str]) -> Path:
        state = self.state_values()
        doc, arrays = graphio.to_json(self.model)
        arrays.update({f"state/{k}": v for k, v in state.items()})
        if self.order is not None:
            arrays["data/order"] = np.asarray(self.order, np.int64)
        manifest = {
            "step": self.step_count, "skipped": self.skipped, "epoch": self.epoch,
            "position": self.position, "loss_scale": self.loss_scale,
            "dynamic_scale": self.dynamic_scale, "good_steps": self.good_steps,
            "rng": self.rng.bit_generator.state, "optimizer": self.optimizer.config(),
            "loss": self.loss if isinstance(self.loss, str) else None,
            "target": self.chip, "backend": self.backend, "resident_state": self.resident_state,
            "freeze": list(self.freeze), "params": self.params,
            "max_grad_norm": self.max_grad_norm, "history": self.history,
            "overflows": self.overflows, "meta": self.meta,
            "onnx": self._onnx.SerializeToString().hex() if self._onnx is not None else None,
        }  # fmt: skip
        return checkpoint.write(path, manifest, doc, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, loss: str | Callable | None = None,
             optimizer: Optimizer | None = None, backend: str | None = None) -> Trainer:  # fmt: skip
        """A trainer exactly where ``save`` left it (model, state, optimizer, step, generator,
        data order). A callable loss or schedule is not stored: pass it again."""
        from google.protobuf.message import DecodeError

        manifest, doc, arrays = checkpoint.read(path_argument(path, "the checkpoint to load"))
        where = str(path)
        try:
            return cls._restore(manifest, doc, arrays, loss, optimizer, backend)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError, RecursionError,
                OverflowError, DecodeError) as exc:  # fmt: skip
            raise FormatError(f"the checkpoint's contents do not fit together ({type(exc).__name__}: "
                              f"{exc})", where=where,
                              hint="it was edited or damaged; use another checkpoint") from None

    @classmethod
    def _restore(cls, manifest: dict, doc: dict, arrays: dict, loss: Any, optimizer: Any,
                 backend: str | None) -> Trainer:  # fmt: skip
        model = graphio.from_json(doc, arrays)
        if manifest["loss"] is None and loss is None:
            raise ModelError("the checkpoint was trained with a callable loss; pass loss=")
        t = cls(model, loss or manifest["loss"], optimizer or from_config(manifest["optimizer"]),
                target=manifest["target"], backend=backend or manifest["backend"],
                resident_state=manifest["resident_state"], freeze=manifest["freeze"],
                max_grad_norm=manifest["max_grad_norm"])  # fmt: skip
        if manifest["onnx"]:
            import onnx

            from anekit.train.export import onnx_sources

            t._onnx = onnx.load_from_string(bytes.fromhex(manifest["onnx"]))
            t._sources = onnx_sources(t._onnx, model)
        params = manifest["params"]
        if not isinstance(params, list) or not params or not all(
            isinstance(p, str) and p in model.constants for p in params
        ):
            raise FormatError("the checkpoint's params do not name constants of its model")
        t.params = list(params)
        t._state = {k[len("state/") :]: v for k, v in arrays.items() if k.startswith("state/")}
        want = {k: v.shape for k, v in t._initial_state().items()}
        have = {k: v.shape for k, v in t._state.items()}
        if want != have or any(v.dtype != np.float32 for v in t._state.values()):
            raise FormatError("the checkpoint's state does not match its parameters and "
                              "optimizer (a value missing, extra, or of another shape)")  # fmt: skip
        t.step_count, t.skipped, t.epoch = manifest["step"], manifest["skipped"], manifest["epoch"]
        t.position, t.loss_scale = manifest["position"], manifest["loss_scale"]
        t.dynamic_scale, t.good_steps = manifest["dynamic_scale"], manifest["good_steps"]
        t.rng.bit_generator.state = manifest["rng"]
        t.order = arrays.get("data/order")
        t.history = list(manifest["history"])
        t.overflows = list(manifest.get("overflows", []))  # absent from older checkpoints
        checkpoint.check_position(t, len(t.order) if t.order is not None else None)
        t.meta = dict(manifest.get("meta") or {})
        return t


def _rows(data: Mapping[str, np.ndarray]) -> int:
    sizes = {k: len(v) for k, v in data.items()}
    if len(set(sizes.values())) != 1:
        raise InputError(f"the data's arrays have different lengths: {sizes}")
    if TARGET not in data:
        raise InputError("the data has no 'target' array")
    return next(iter(sizes.values()))


def _progress(enabled: bool, total: int) -> Callable[[float | None], None]:
    """A rich progress bar if rich is installed and enabled; else nothing."""
    if not enabled:
        return lambda loss: None
    try:
        from rich.progress import Progress
    except ImportError:
        return lambda loss: None
    prog = Progress(transient=True)
    task = prog.add_task("training", total=total)
    prog.start()

    def advance(loss: float | None) -> None:
        if loss is None:
            prog.stop()
        else:
            prog.update(task, advance=1, description=f"loss {loss:.4f}")

    return advance


def check_plotting() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from anekit.errors import MissingDependencyError

        raise MissingDependencyError("matplotlib", "plot", "plotting the loss curve") from None


def _positive(value: Any, what: str) -> float | None:
    """None, or ``value`` as a finite float above 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"{what} must be a number, not {value!r}")
    if not np.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be a finite number above 0, not {value!r}")
    return float(value)


def plot_losses(losses: Iterable[float], path: str | os.PathLike[str]) -> Path:
    """The loss curve as an image (needs matplotlib: the plot extra)."""
    check_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(list(losses), lw=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


__all__ = ["LOSSES", "Trainer", "next_name", "select_parameters"]
