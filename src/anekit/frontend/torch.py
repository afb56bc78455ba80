"""The PyTorch entry: export a torch.nn.Module to ONNX in memory, then import it."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from anekit.errors import MissingDependencyError, ModelError
from anekit.frontend.onnx import from_onnx
from anekit.ir.graph import Graph

EXPORTERS = ("dynamo", "torchscript")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def from_torch(
    module: Any,
    example_inputs: Any,
    input_names: Sequence[str] | None = None,
    *,
    exporter: str = "dynamo",
    opset: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    output_names: Sequence[str] | None = None,
) -> Graph:
    """Export ``module`` to ONNX in memory with torch's ``exporter`` and import the result.

    ``example_inputs`` is a tensor (or numpy array) or a tuple of them; the graph takes
    inputs of exactly their shapes and dtypes. ``input_names`` names the graph inputs in
    order, ``output_names`` its outputs. ``opset`` picks the ONNX opset (torch's default
    otherwise). The module is exported in eval mode; its training flags are restored after.
    """
    proto = export_onnx(
        module, example_inputs, input_names, exporter=exporter, opset=opset,
        output_names=output_names,
    )  # fmt: skip
    graph = from_onnx(proto, input_shapes)
    metadata = {**graph.metadata, "source": "torch", "exporter": exporter}
    return graph.replace(metadata=metadata)


def export_onnx(
    module: Any,
    example_inputs: Any,
    input_names: Sequence[str] | None = None,
    *,
    exporter: str = "dynamo",
    opset: int | None = None,
    output_names: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """The ONNX ModelProto torch's ``exporter`` makes of ``module`` (nothing written to disk)."""
    torch = _import_torch()
    if exporter not in EXPORTERS:
        raise ModelError(f"unknown exporter '{exporter}'; choose one of {list(EXPORTERS)}")
    if not isinstance(module, torch.nn.Module):
        raise ModelError(
            f"from_torch needs a torch.nn.Module, got {type(module).__name__}",
            hint="for an ONNX file use anekit.from_onnx",
        )
    args = _as_tensors(torch, example_inputs)
    names = list(input_names) if input_names is not None else None
    outs = list(output_names) if output_names is not None else None
    if names is not None and len(names) != len(args):
        raise ModelError(
            f"input_names has {len(names)} name(s) for {len(args)} example input(s)",
            hint="give one name per example input, in order",
        )
    with _eval_mode(module), _quiet(), torch.no_grad():
        try:
            if exporter == "dynamo":
                program = torch.onnx.export(
                    module, args, dynamo=True, input_names=names, output_names=outs,
                    opset_version=opset, verbose=False,
                )  # fmt: skip
                proto = program.model_proto
            else:
                buffer = io.BytesIO()
                with _native_output_discarded():  # its C++ side prints the graph on failure
                    torch.onnx.export(
                        module, args, buffer, dynamo=False, input_names=names,
                        output_names=outs, opset_version=opset, verbose=False,
                    )  # fmt: skip
                proto = onnx.load_model_from_string(buffer.getvalue())
        except Exception as exc:  # noqa: BLE001 - any exporter failure is the model's problem
            missing = _missing_module(exc)
            if missing is not None:
                raise MissingDependencyError(
                    missing, "torch", f"from_torch with the {exporter} exporter"
                ) from exc
            raise ModelError(
                f"torch's {exporter} exporter failed on {type(module).__name__}: {_summary(exc)}",
                hint=_hint(exporter),
            ) from exc
    return proto


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "torch", "from_torch") from None
    return torch


def _as_tensors(torch: Any, example_inputs: Any) -> tuple[Any, ...]:
    items = example_inputs if isinstance(example_inputs, tuple | list) else (example_inputs,)
    out = []
    for k, x in enumerate(items):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(np.ascontiguousarray(x))
        if not isinstance(x, torch.Tensor):
            raise ModelError(
                f"example input {k} is a {type(x).__name__}; give tensors or numpy arrays"
            )
        out.append(x)
    return tuple(out)


@contextlib.contextmanager
def _eval_mode(module: Any) -> Iterator[None]:
    """Export in eval mode, then put back each submodule's own training flag."""
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress prints and deprecation/tracer warnings."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _native_output_discarded() -> Iterator[None]:
    """Discard what native code writes to the process's stdout and stderr (file descriptors
    1 and 2): the TorchScript exporter's C++ logging dumps the whole Torch IR graph there
    when an export fails, before the exception anekit turns into one message."""
    import os
    import sys
    import tempfile

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved: list[int] = []
    try:
        for fd in (1, 2):
            saved.append(os.dup(fd))
    except OSError:  # no such descriptors (an embedded interpreter): nothing to redirect
        for fd in saved:
            os.close(fd)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _missing_module(exc: BaseException) -> str | None:
    """The top-level package an exporter failed to import (onnxscript for dynamo), if any."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name.split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


def _first_line(text: str) -> str:
    for line in _ANSI.sub("", text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _summary(exc: BaseException) -> str:
    """The first line of torch's message, plus the first line of its root cause.

    When there is a root cause, only the first sentence of the outer message is kept
    (the dynamo exporter follows it with generic advice).
    """
    text = _first_line(str(exc)) or type(exc).__name__
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if root is not exc:
        text = text.split(". ")[0].rstrip(".")
        cause = _first_line(str(root))
        text += f" ({type(root).__name__}" + (f": {cause})" if cause else ")")
    return text


def _hint(exporter: str) -> str:
    other = EXPORTERS[1 - EXPORTERS.index(exporter)]
    return (
        f"make the module traceable (no data-dependent Python control flow), "
        f"or try exporter='{other}'"
    )
