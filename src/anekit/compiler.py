"""`anekit.compile`: run the middle-end on a model for one target and hold the result."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit import targets
from anekit.errors import AnekitError, ModelError
from anekit.ir.graph import Graph
from anekit.passes.context import PassContext, PassOptions
from anekit.passes.explain import OpReport, explain, summarize, summary_line
from anekit.passes.pipeline import DEFAULT_PIPELINE, run_pipeline, stamp_origins
from anekit.passes.results import Diagnostic, PassRecord, PipelineResult, Placement, Segment
from anekit.targets import DEFAULT_TARGET, Target

# Allocations between two young-generation collections while compiling (Python's default: 700).
COMPILE_GC_THRESHOLD = 50_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Compiling allocates many small objects that live until their pass ends; at Python's
    default threshold the cyclic collector rescans them over and over (a fifth of the time
    of a 20,000-node compile). Collect less often while compiling; restore the setting after."""
    saved = gc.get_threshold()
    gc.set_threshold(max(saved[0], COMPILE_GC_THRESHOLD), *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)


OPTION_NAMES = tuple(f.name for f in dataclasses.fields(PassOptions))


class CompiledModel:
    """A model compiled for one target: the placed engine graph, its segments and report.

    ``source`` is the imported graph; ``graph`` the engine graph after every pass, its nodes
    in execution order; ``placement`` says where each node of ``graph`` runs; ``segments``
    are the ANE and CPU programs in execution order (one dispatch per ANE segment).
    """

    def __init__(
        self, source: Graph, result: PipelineResult, target: Target, ctx: PassContext,
        compress: str | None = None,
    ):  # fmt: skip
        graph = result.graph
        self.source = source
        self.graph = result.graph
        self.target = target
        self.options = ctx.options
        self.placement: Mapping[str, Placement] = MappingProxyType(dict(result.placement))
        self.segments: tuple[Segment, ...] = tuple(result.segments)
        self.diagnostics: tuple[Diagnostic, ...] = tuple(ctx.diagnostics)
        self.pass_log: tuple[PassRecord, ...] = tuple(ctx.records)
        # weight compression (`anekit.codegen.compress`): each compressed convolution weight
        # and the bytes it streams, which the cost model counts instead of fp16
        from anekit.codegen.compress import compress_graph

        self.compress = compress
        self.compressed: Mapping[str, Any] = MappingProxyType(
            compress_graph(graph, self.segments, compress, target.mil.opset) if compress else {}
        )
        self.weight_bytes: Mapping[str, int] = MappingProxyType(
            {name: c.nbytes for name, c in self.compressed.items()}
        )
        self._ops = tuple(explain(source, result, ctx))
        self._summary = MappingProxyType(summarize(source, result))
        # (model, compile keywords) when `compile` made it: enumerated Core ML shapes recompile
        self.recipe: tuple[Any, dict[str, Any]] | None = None

    @property
    def ops(self) -> tuple[OpReport, ...]:
        """One row per original node: where it went and why."""
        return self._ops

    @property
    def summary(self) -> Mapping[str, int]:
        return self._summary

    def summary_line(self) -> str:
        """'N nodes -> M engine layers in K ANE segments, C ops on the CPU, D dispatches'."""
        return summary_line(dict(self._summary))

    @cached_property
    def report(self) -> dict[str, Any]:
        """The check report (the shape of `anekit check --json`), with the estimate if any."""
        with fewer_collections():
            estimate = _estimate(self)
        return {
            "target": self.target.name,
            "summary": dict(self._summary),
            "ops": [r.as_dict() for r in self._ops],
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "passes": [
                {
                    "name": r.name,
                    "changes": r.changes,
                    "seconds": round(r.seconds, 6),
                    "notes": list(r.notes),
                }
                for r in self.pass_log
            ],
            "estimate": estimate,
            # the LoRA alpha compiled in: a loaded bundle scales an adapter of another alpha
            **({"lora_alpha": alpha} if (alpha := self.source.metadata.get("lora_alpha")) else {}),
        }

    @cached_property
    def compression_report(self) -> dict[str, Any] | None:
        """With ``compress``: each compressed weight's relative error against the original
        and the bytes saved (`anekit.codegen.compress.accuracy_report`); else None."""
        if not self.compress:
            return None
        from anekit.codegen.compress import accuracy_report

        return {"scheme": self.compress, **accuracy_report(self.graph, self.compressed)}

    @cached_property
    def bundle(self) -> Any:
        """The emitted MIL programs, weights, manifest and report (`anekit.codegen.bundle`)."""
        from anekit.codegen.model_bundle import bundle_contents

        with fewer_collections():
            return bundle_contents(self)

    @cached_property
    def program(self) -> Any:
        """The bundle as a runnable `anekit.runtime.Program` (what `load` gives back)."""
        from anekit.runtime.program import from_contents

        program = from_contents(self.bundle, where=f"compiled model '{self.graph.name}'")
        program.lora_alpha = self.source.metadata.get("lora_alpha")
        return program

    def save(self, path: str | os.PathLike[str], **options: Any) -> Any:
        """Write the bundle directory ``path`` (e.g. ``model.anekit``); returns its Path."""
        from anekit.codegen.model_bundle import save

        return save(self, path, **options)

    def save_mlpackage(self, path: str | os.PathLike[str], options: Any = None, **fields: Any) -> Any:
        """Export the whole model as one Core ML ``.mlpackage`` (needs the `coreml` extra);
        options as `anekit.runtime.Program.save_mlpackage` takes them, and
        ``enumerated_shapes``: the model is compiled again at each shape and written as one
        program valid at all of them (`anekit.codegen.coreml_shapes`)."""
        from anekit.codegen.coreml_options import given_options
        from anekit.errors import os_error, path_argument

        path = path_argument(path, "the .mlpackage path")
        options = given_options(options, fields)
        try:
            if options.enumerated_shapes:
                return _save_enumerated(self, path, options)
            return self.program.save_mlpackage(path, options)
        except OSError as exc:
            raise os_error(exc, f"write the .mlpackage '{path}'") from None

    def run(self, feeds: Mapping[str, Any], backend: str = "reference") -> dict[str, np.ndarray]:
        """Run on any backend of `anekit.runtime.backends`: a graph backend (``reference``)
        runs the engine graph; a program backend (``sim``, ...) the emitted programs."""
        from anekit.runtime import backends

        chosen = backends.get(backend)
        if chosen.runs_graphs:
            chosen.check_available()
            return chosen.run_graph(self.graph, feeds)
        return self.program.run(feeds, backend)

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def session(
        self, backend: str = "sim", state: Mapping[str, str] | None = None, guard: str | None = None
    ) -> Any:
        """The bundle in memory run step after step with resident ``state`` (input ->
        output fed back), kept only while ``guard`` is finite; see
        `anekit.runtime.Program.session`."""
        return self.program.session(backend, state, guard)

    def __repr__(self) -> str:
        return f"CompiledModel({self.graph.name!r}, target={self.target.name!r}: {self.summary_line()})"


def _save_enumerated(compiled: CompiledModel, path: Any, options: Any) -> Any:
    """The model compiled at every configuration of its enumerated shapes, exported as one
    Core ML program with symbolic input dimensions (see `anekit.codegen.coreml_shapes`)."""
    from anekit.codegen.coreml_shapes import (
        Variant,
        configurations,
        flexible_shapes,
        shape_text,
    )
    from anekit.codegen.mlpackage import export_mlpackage
    from anekit.formats.blob import BlobReader

    if compiled.recipe is None:
        raise AnekitError("enumerated shapes compile the model again at each shape, and this "
                          "compiled model does not come from anekit.compile",
                          hint="anekit.compile(MODEL, ...).save_mlpackage(..., enumerated_shapes=...)")  # fmt: skip
    model, keywords = compiled.recipe
    enumerated = options.enumerated_shapes
    check_enumerated_shapes(model, enumerated, keywords.get("constants"))
    fixed = {p.name: tuple(p.shape) for p in compiled.program.manifest.inputs}
    variants, readers = [], []
    try:
        for config in configurations(enumerated):
            shapes = {**fixed, **config}
            try:
                cm = compiled if shapes == fixed else compile(model, compiled.target, **{
                    **keywords, "input_shapes": shapes})  # fmt: skip
            except AnekitError as exc:
                where = ", ".join(f"{n}={shape_text(s)}" for n, s in config.items())
                raise type(exc)(f"at the enumerated shape {where}: {exc.message}",
                                hint=exc.hint, where=exc.where) from None  # fmt: skip
            program = cm.program
            weights = [None if w is None else BlobReader(w) for w in program.weights]
            readers += weights
            variants.append(Variant(config, program.manifest, program.programs, weights))
        first = variants[0]
        return export_mlpackage(first.manifest, first.programs, first.weights, path, options,
                                flexible_shapes(variants, enumerated))  # fmt: skip
    finally:
        for reader in readers:
            if reader is not None:
                reader.close()


def check_enumerated_shapes(model: Any, enumerated: Mapping[str, Sequence[Sequence[int]]],
                            constants: Mapping[str, Any] | None = None) -> None:  # fmt: skip
    """Enumerated shapes that name the model's inputs and keep its fixed dimensions (checked
    before any compile, so the message speaks of the shapes, not of a compile at one)."""
    from anekit.codegen.coreml_shapes import check_against_model

    if isinstance(model, Graph):
        declared = {v.name: list(v.shape) for v in model.inputs}
    else:
        from anekit.frontend.onnx.loader import load_model

        proto, _ = load_model(model)
        fixed = {t.name for t in proto.graph.initializer} | set(constants or ())
        declared = {
            vi.name: [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                      for d in vi.type.tensor_type.shape.dim]  # fmt: skip
            for vi in proto.graph.input
            if vi.name not in fixed
        }
    check_against_model(enumerated, declared)


def _estimate(cm: CompiledModel) -> Any:
    """The cost model's estimate for the report (imported here: most compiles never ask)."""
    from anekit.cost import report_estimate

    return report_estimate(cm)


def load_graph(
    model: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
) -> Graph:
    """A Graph as is; an ONNX file path, bytes or ModelProto through the ONNX importer."""
    if isinstance(model, Graph):
        for option, given in (("input_shapes", input_shapes), ("constants", constants)):
            if given:
                raise AnekitError(f"{option} applies to ONNX models; a Graph has static shapes")
        return model
    if isinstance(model, str | os.PathLike | bytes) or type(model).__name__ == "ModelProto":
        from anekit.frontend.onnx import from_onnx

        return from_onnx(model, input_shapes, constants=constants)
    raise AnekitError(
        f"cannot compile a {type(model).__name__}",
        hint="pass an anekit Graph, an ONNX file path or an onnx.ModelProto "
        "(for a torch module use anekit.from_torch first)",
    )


def compile(  # noqa: A001 - the public name the API promises
    model: Any,
    target: str | Target = DEFAULT_TARGET,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    passes: Sequence[str] = DEFAULT_PIPELINE,
    lora: Any = None,
    compress: str | None = None,
    **options: Any,
) -> CompiledModel:
    """Compile ``model`` for ``target`` (a chip name such as "m4" or an engine code).

    ``constants`` fixes ONNX inputs to values (``{"sr": 16000}``): they stop being inputs,
    and the shape logic and ``If`` branches that depend on them fold away.

    ``lora`` (an `anekit.LoRA`) gives the matching linear layers adapter inputs
    (`anekit.lora`). ``compress`` stores the engine segments' convolution weights compressed:
    ``int8``, ``int4``, ``palettize4``, ``palettize6`` or ``sparse`` (see
    `anekit.codegen.compress` for the MIL ops each dialect gets). ``options`` set
    `PassOptions` fields (``onchip_margin``, ``fold_limit``, ``mask_value``,
    ``approximate_gelu``, ``max_sweeps``, ``cpu_nodes``: original node names kept in fp32
    on the CPU, the remedy `anekit check --numerics` prints for a node fp16 cannot hold;
    ``input_scales``: {input: factor}, the input multiplied by the factor and the factor
    absorbed exactly by the graph, `anekit.passes.scaling`).
    """
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise AnekitError(
            f"unknown compile option(s) {unknown}", hint=f"valid options: {', '.join(OPTION_NAMES)}"
        )
    chip = targets.get(target)
    if compress is not None:
        from anekit.codegen.compress import check_scheme

        check_scheme(compress, chip.mil.opset)
    with fewer_collections():
        source = load_graph(model, input_shapes, constants)
        if lora is not None:
            from anekit import lora as adapters

            source = adapters.apply(source, lora)
        if options.get("input_scales"):
            options["input_scales"] = tuple(sorted(dict(options["input_scales"]).items()))
        if options.get("cpu_nodes"):
            options["cpu_nodes"] = known_nodes(source, options["cpu_nodes"], "cpu_nodes")
        ctx = PassContext(chip, PassOptions(**options))
        for code, node, message, hint in source.metadata.get("import_notes", ()):
            ctx.diagnostics.append(Diagnostic("warning", code, node, message, hint))
        if "segment" not in passes:
            raise AnekitError(
                "a compile pipeline must place the nodes: it ends with the segment pass",
                hint=f"the default pipeline: {', '.join(DEFAULT_PIPELINE)}",
            )
        check_tensor_sizes(source)  # before any pass builds on an impossible size
        result = run_pipeline(stamp_origins(source), ctx, passes)
        check_tensor_sizes(result.graph)
        compiled = CompiledModel(source, result, chip, ctx, compress)
        _check_lowering(compiled)
        compiled.recipe = (model, {"constants": constants, "passes": passes, "lora": lora,
                                   "compress": compress, **options})  # fmt: skip
        return compiled


def known_nodes(graph: Graph, names: str | Sequence[str], option: str) -> tuple[str, ...]:
    """``names`` (a comma-separated string or a sequence) as a tuple, each the name of a node
    of ``graph`` (the imported model's node names, as `anekit check` lists them)."""
    import difflib

    wanted = tuple(n.strip() for n in (names.split(",") if isinstance(names, str) else names))
    have = {n.name for n in graph.nodes}
    for name in wanted:
        if name not in have:
            close = difflib.get_close_matches(name, sorted(have), n=3)
            raise AnekitError(
                f"{option}: the model has no node named '{name}'",
                hint=f"did you mean {', '.join(repr(c) for c in close)}?"
                if close
                else "`anekit check MODEL` lists the node names",
            )
    return wanted


def _check_lowering(compiled: CompiledModel) -> None:
    """Every node's MIL lowering, tried now (no weight converted): a node whose attributes
    have no MIL form (a ``wrap`` pad, a dilated pooling) is an error diagnostic, so `check`
    says at once what a later `save` would fail on. Skipped when the validate pass already
    found a node with no lowering at all (emission would stop at that node first)."""
    from anekit.codegen.bundle import check_lowering

    if any(d.severity == "error" for d in compiled.diagnostics):
        return
    found = check_lowering(
        compiled.graph, compiled.target, compiled.segments, compressed=compiled.compressed
    )
    compiled.diagnostics += tuple(
        Diagnostic(
            "error",
            "no-mil-lowering",
            None,
            f"{e.where}: {e.message}" if e.where else e.message,
            e.hint or "the model cannot be saved as a bundle until the node is changed",
        )
        for e in found
    )


def check_tensor_sizes(graph: Graph) -> None:
    """Refuse a graph with a tensor the bundle's runtime would refuse to create, by the very
    limit it applies, so that compile never writes a bundle its own loader rejects."""
    from anekit.formats.mil.types import MAX_TENSOR_ELEMENTS as MAX_ELEMENTS

    for node in graph.nodes:
        for out in node.outputs:
            value = graph.values[out]
            if value.numel > MAX_ELEMENTS:
                names = ", ".join(f"'{o}'" for o in node.origin) or f"'{node.name}'"
                raise ModelError(
                    f"value '{out}' would have {value.numel:,} elements {list(value.shape)}, "
                    f"more than the {MAX_ELEMENTS:,} a compiled program may hold in one tensor",
                    where=f"node {names}",
                    hint="check the sizes this node computes (a Tile, Expand or Resize "
                    "factor, or an input shape)",
                )


def estimate_model(model: Any, chosen: Sequence[Target], shapes: dict | None = None) -> list[Any]:
    """One estimate per target; the model is imported once and compiled once per compile key."""
    from anekit.cost import estimate_compiled

    graph = load_graph(model, shapes or None)
    compiled: dict[tuple, Any] = {}
    estimates = []
    for t in chosen:
        if t.compile_key not in compiled:
            compiled[t.compile_key] = compile(graph, t)
        estimates.append(estimate_compiled(compiled[t.compile_key], t))
    return estimates


def load_or_compile(
    model: Any,
    target: str = DEFAULT_TARGET,
    *,
    cache: Any = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """``compile(model, target, **options).program``, from the program cache when the same
    graph was compiled before with the same target and options (`anekit.runtime.cache`)."""
    from anekit.runtime.cache import ProgramCache, cached

    chosen = cache if cache is not None else ProgramCache()
    graph = load_graph(model, input_shapes, constants)
    # keyed on what the compiler reads of the target, so an edited target gets its own entry
    key = targets.get(target).compile_id
    return cached(chosen, graph, key, options, lambda g: compile(g, target, **options))
