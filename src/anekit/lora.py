"""LoRA adapters as program inputs (Orion section 6): ``y = x W + s (x A) B``.

``anekit.compile(model, target, lora=anekit.LoRA(rank=8, alpha=16, targets=["*q_proj*"]))``
rewrites every linear layer (a ``matmul`` by a constant weight, or by its transpose, as
ONNX MatMul and Gemm import) whose node or weight name matches a target pattern: the base
weight stays baked in the program, and ``A`` (``[d_in, rank]``) and ``B`` (``[rank,
d_out]``) become program inputs named ``<layer>.lora_A`` and ``<layer>.lora_B``. The scale
``s`` is ``alpha / rank``, PEFT's, so an adapter trained with PEFT computes here what its
merged weights ``W + s A B`` compute. A session binds an adapter once
(:meth:`anekit.runtime.session.Session.set_adapter`) and swaps it without recompiling.

``<layer>`` is the PEFT module name: the weight's name without ``.weight`` (``model.layers.0
.self_attn.q_proj``), or, for an exporter's anonymous weight, the node's path
(``/model/layers.0/self_attn/q_proj/MatMul`` -> ``model.layers.0.self_attn.q_proj``).
:func:`load` reads PEFT's safetensors (``base_model.model.<layer>.lora_A.weight``, shape
``[rank, d_in]``; ``lora_B.weight``, ``[d_out, rank]``) into that orientation.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError, FormatError, InputError, ModelError

SUFFIX_A, SUFFIX_B = ".lora_A", ".lora_B"
_PEFT_PREFIX = "base_model.model."
_MAX_ADAPTER_BYTES = 1 << 34
_MAX_CONFIG_BYTES = 1 << 20  # PEFT's adapter_config.json is a page of settings


@dataclass(frozen=True)
class LoRA:
    """Which linear layers take adapters, and their rank and ``alpha`` (PEFT's lora_alpha)."""

    rank: int = 8
    alpha: float = 16.0
    targets: Sequence[str] = ("*q_proj*", "*v_proj*")

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise AnekitError(f"LoRA rank must be a positive integer, not {self.rank!r}")
        check_alpha(self.alpha, "LoRA alpha")
        if (
            isinstance(self.targets, str | bytes)
            or not isinstance(self.targets, Sequence)
            or not self.targets
            or not all(isinstance(t, str) and t for t in self.targets)
        ):
            raise AnekitError(
                f"LoRA targets are a list of name patterns (strings), not {self.targets!r}",
                hint="e.g. anekit.LoRA(targets=['*q_proj*', '*v_proj*'])",
            )

    @property
    def scale(self) -> float:
        return float(self.alpha) / self.rank


def check_alpha(alpha: Any, what: str) -> float:
    """``alpha`` as a float: a finite number above 0 (PEFT's lora_alpha)."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.integer | np.floating):
        raise AnekitError(f"{what} must be a number, not {alpha!r}", hint="e.g. alpha=16")
    if not math.isfinite(alpha) or alpha <= 0:
        raise AnekitError(f"{what} must be a finite number above 0, not {alpha!r}")
    return float(alpha)


@dataclass(frozen=True)
class Adapter:
    """Adapter matrices by layer: ``layers[name] = (A [d_in, rank], B [rank, d_out])``."""

    layers: Mapping[str, tuple[np.ndarray, np.ndarray]]
    alpha: float | None = None  # from adapter_config.json when there is one
    source: str = field(default="adapter")

    @property
    def rank(self) -> int | None:
        ranks = {a.shape[-1] for a, _ in self.layers.values()}
        return ranks.pop() if len(ranks) == 1 else None


def apply(graph: Any, lora: LoRA) -> Any:
    """``graph`` with every matching linear layer given adapter inputs."""
    from anekit.ir.dtypes import DType

    ed = graph.edit()
    found = []
    for node in list(graph.nodes):
        weight = _linear_weight(graph, node)
        if weight is None:
            continue
        names = (node.name, weight, *node.origin)
        if not any(fnmatch.fnmatchcase(n, p) for n in names for p in lora.targets):
            continue
        # the editor's node: an adapted layer before it may have rewired its input
        x, w = ed.node(node.name).inputs
        d_in, d_out = ed.value(w).shape
        key = layer_name(weight, node.name)
        a_name, b_name = key + SUFFIX_A, key + SUFFIX_B
        dtype = ed.value(x).dtype
        for name, shape in ((a_name, (d_in, lora.rank)), (b_name, (lora.rank, d_out))):
            ed.declare_value(name, shape, DType.FP32 if dtype.is_float else dtype)
            ed.inputs.append(ed.value(name))
        (y,) = node.outputs
        (xa,) = ed.add("matmul", [x, a_name], name=f"{node.name}/lora_xa", origin=node.origin)
        (xab,) = ed.add("matmul", [xa, b_name], name=f"{node.name}/lora_xab", origin=node.origin)
        scale = ed.add_constant(np.asarray(lora.scale, np.float32), f"{key}.lora_scale")
        (scaled,) = ed.add("mul", [xab, scale], name=f"{node.name}/lora_scaled", origin=node.origin)
        (base,) = ed.add("matmul", [x, w], name=f"{node.name}/base", origin=node.origin)
        (out,) = ed.add("add", [base, scaled], name=f"{node.name}/lora", origin=node.origin)
        ed.remove(node.name)
        ed.replace_uses(y, out)
        found.append(key)
    if not found:
        raise ModelError(
            f"no linear layer matches the LoRA targets {list(lora.targets)}",
            hint="targets are glob patterns matched against node and weight names, "
            "e.g. '*q_proj*'; `anekit check` lists the nodes",
        )
    ed.metadata["lora_alpha"] = float(lora.alpha)  # what set_adapter compares an adapter's with
    return ed.build()


def _linear_weight(graph: Any, node: Any) -> str | None:
    """The constant weight of a linear layer: a 2-d constant, or the transpose of one."""
    if node.op != "matmul" or len(node.inputs) != 2:
        return None
    x, w = node.inputs
    if graph.is_constant(x) or len(graph.value(w).shape) != 2:
        return None
    if graph.is_constant(w):
        return w
    producer = next((n for n in graph.nodes if w in n.outputs), None)
    if (
        producer is not None
        and producer.op == "transpose"
        and graph.is_constant(producer.inputs[0])
    ):
        return producer.inputs[0]
    return None


def layer_name(weight: str, node: str) -> str:
    """The PEFT module name of a linear layer (see the module docstring)."""
    if weight.endswith(".weight"):
        return weight[: -len(".weight")]
    path = node.strip("/").split("/")
    if (
        len(path) > 1
        and path[-1] in ("MatMul", "Gemm")
        or path[-1].startswith(("MatMul_", "Gemm_"))
    ):
        path = path[:-1]
    return ".".join(path)


def adapter_inputs(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """layer -> (A input, B input) among a program's input names."""
    layers = {}
    for name in names:
        if name.endswith(SUFFIX_A) and name[: -len(SUFFIX_A)] + SUFFIX_B in names:
            layer = name[: -len(SUFFIX_A)]
            layers[layer] = (name, layer + SUFFIX_B)
    return layers


def as_adapter(value: Any) -> Adapter:
    """An `Adapter`, or a mapping of layer -> (A, B) made into one (each matrix a numeric
    array; InputError otherwise)."""
    if isinstance(value, Adapter):
        return value
    if not isinstance(value, Mapping):
        raise InputError(
            f"an adapter is anekit.lora.load(...)'s Adapter or a mapping of layer name to "
            f"(A, B), not {type(value).__name__}"
        )
    layers = {}
    for key, pair in value.items():
        if not isinstance(key, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InputError(f"adapter layer {key!r} must map a name to a pair (A, B)")
        mats = []
        for part, m in zip("AB", pair, strict=True):
            try:
                array = np.asarray(m)
            except ValueError as exc:  # a ragged nesting of lists
                raise InputError(f"adapter layer '{key}': {part} is not an array ({exc})") from None
            if array.dtype.kind not in "fiu":
                raise InputError(f"adapter layer '{key}': {part} holds {array.dtype}, not numbers")
            mats.append(array)
        layers[key] = (mats[0], mats[1])
    return Adapter(layers, None, "the adapter")


def bind(adapter: Adapter, ports: Mapping[str, Any],
         program_alpha: float | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """The program inputs an adapter sets (``ports``: input name -> Port), every layer's
    shape checked; an adapter that misses a layer or names an unknown one is refused. An
    adapter whose ``lora_alpha`` differs from the one the program was compiled for
    (``program_alpha``) has its B matrices scaled by their ratio, so the program computes
    the adapter's own ``alpha / rank``."""
    adapter = as_adapter(adapter)
    layers = adapter_inputs(list(ports))
    if not layers:
        raise InputError(
            "this program takes no adapter", hint="compile it with lora=anekit.LoRA(...)"
        )
    matched: dict[str, str] = {}
    for key in adapter.layers:
        hit = key if key in layers else _by_suffix(key, layers)
        if hit is None:
            raise InputError(
                f"{adapter.source}: the layer '{key}' is not one the program adapts",
                hint="adapted layers: " + ", ".join(sorted(layers)),
            )
        matched[hit] = key
    missing = sorted(set(layers) - set(matched))
    if missing:
        raise InputError(
            f"{adapter.source} has no matrices for {len(missing)} adapted layer(s): "
            + ", ".join(missing[:4])
            + (", ..." if len(missing) > 4 else ""),
            hint="an adapter sets every layer the program adapts",
        )
    feeds = {}
    for layer, key in matched.items():
        a, b = (np.asarray(m) for m in adapter.layers[key])
        a_name, b_name = layers[layer]
        want_a, want_b = ports[a_name].shape, ports[b_name].shape
        rank = want_a[1]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise InputError(f"{adapter.source}: layer '{key}' has A {list(a.shape)} and B "
                             f"{list(b.shape)}, not [d_in, r] and [r, d_out]")  # fmt: skip
        if a.shape[1] != rank:
            raise InputError(
                f"{adapter.source}: layer '{key}' has rank {a.shape[1]}; the program was "
                f"compiled for rank {rank}",
                hint=f"recompile with anekit.LoRA(rank={a.shape[1]}, ...) or use a rank-{rank} adapter",
            )
        if a.shape != want_a or b.shape != want_b:
            raise InputError(
                f"{adapter.source}: layer '{key}' has A {list(a.shape)} and B {list(b.shape)}; "
                f"the layer takes A {list(want_a)} and B {list(want_b)}"
            )
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise InputError(f"{adapter.source}: layer '{key}' holds NaN or infinite values")
        if adapter.alpha is not None and program_alpha is None:
            raise InputError(
                f"{adapter.source} was trained with lora_alpha {adapter.alpha:g}, and the "
                "program does not record the alpha it was compiled with, so its scale "
                "alpha / rank cannot be matched",
                hint="recompile the model with anekit (bundles record their LoRA alpha), or "
                "give the adapter as anekit.lora.Adapter(layers) without an alpha",
            )
        if adapter.alpha is not None and program_alpha is not None and adapter.alpha != program_alpha:
            with np.errstate(over="ignore"):
                b = b * np.float32(adapter.alpha / program_alpha)
            if not np.isfinite(b).all():
                raise InputError(f"{adapter.source}: lora_alpha {adapter.alpha:g} scales layer "
                                 f"'{key}' past float32 (the program was compiled for alpha "
                                 f"{program_alpha:g})")  # fmt: skip
        feeds[a_name], feeds[b_name] = a, b
    return feeds


def _by_suffix(key: str, layers: Mapping[str, Any]) -> str | None:
    """The one adapted layer whose name ends with ``key`` (or that ``key`` ends with) at a
    '.' boundary: PEFT and ONNX names of one module can differ by a prefix."""
    hits = [name for name in layers if name.endswith("." + key) or key.endswith("." + name)]
    return hits[0] if len(hits) == 1 else None


def load(path: str | os.PathLike[str]) -> Adapter:
    """A PEFT adapter: ``adapter_model.safetensors`` (a file, or a directory holding it and
    ``adapter_config.json``) with keys ``base_model.model.<layer>.lora_{A,B}.weight``.
    Every read is within the memory budget; ``lora_alpha`` comes from the config."""
    from safetensors.numpy import load as load_bytes

    from anekit import budget
    from anekit.errors import path_argument
    from anekit.files import read_file

    p = path_argument(path, "the adapter to load")
    config = None
    if p.is_dir():
        config_path = p / "adapter_config.json"
        if os.path.lexists(config_path):
            config = config_path
        p = p / "adapter_model.safetensors"
    if not os.path.lexists(p):
        raise AnekitError(f"no adapter file at '{p}'", hint="pass a PEFT adapter_model.safetensors")
    raw = read_file(p, "the adapter file", max_bytes=_MAX_ADAPTER_BYTES, error=FormatError)
    # safetensors copies every tensor out of the bytes: the file twice, at the peak
    budget.check(2 * len(raw), "decoding the adapter's tensors", where=str(p))
    try:
        tensors = load_bytes(raw)
    except Exception as exc:  # safetensors raises its own error types
        raise FormatError(f"not a readable safetensors file: {exc}", where=str(p)) from None
    del raw
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key, array in tensors.items():
        body = key[len(_PEFT_PREFIX) :] if key.startswith(_PEFT_PREFIX) else key
        for part in ("A", "B"):
            tail = f".lora_{part}.weight"
            if body.endswith(tail):
                pairs.setdefault(body[: -len(tail)], {})[part] = array
                break
        else:
            raise FormatError(
                f"the tensor '{key}' is not a LoRA matrix (expected '*.lora_A.weight' or "
                "'*.lora_B.weight', PEFT's names)",
                where=str(p),
            )
    layers = {}
    for layer, mats in sorted(pairs.items()):
        if set(mats) != {"A", "B"}:
            raise FormatError(f"layer '{layer}' has lora_{''.join(mats)} only", where=str(p))
        a, b = mats["A"], mats["B"]
        if a.ndim != 2 or b.ndim != 2 or a.dtype.kind != "f" or b.dtype.kind != "f":
            raise FormatError(f"layer '{layer}' has lora_A {a.dtype}{list(a.shape)} and lora_B "
                              f"{b.dtype}{list(b.shape)}; PEFT stores two float matrices",
                              where=str(p))  # fmt: skip
        # PEFT stores torch Linear weights: A [r, d_in], B [d_out, r]
        layers[layer] = (np.ascontiguousarray(a.T, np.float32), np.ascontiguousarray(b.T, np.float32))
    alpha = None
    if config is not None:
        text = read_file(config, "adapter_config.json", max_bytes=_MAX_CONFIG_BYTES,
                         error=FormatError)  # fmt: skip
        try:
            data = json.loads(text.decode("utf-8"))
            alpha = check_alpha(data["lora_alpha"], "lora_alpha")
        except (ValueError, KeyError, TypeError, RecursionError, AnekitError) as exc:
            reason = exc.message if isinstance(exc, AnekitError) else exc
            raise FormatError(f"adapter_config.json has no usable lora_alpha: {reason}",
                              where=str(config)) from None  # fmt: skip
    return Adapter(layers, alpha, str(p))


def save(adapter: Adapter, path: str | os.PathLike[str]) -> Path:
    """Write an adapter as PEFT's safetensors (the inverse of :func:`load`)."""
    from safetensors.numpy import save_file

    tensors = {}
    for layer, (a, b) in adapter.layers.items():
        tensors[f"{_PEFT_PREFIX}{layer}.lora_A.weight"] = np.ascontiguousarray(np.asarray(a).T)
        tensors[f"{_PEFT_PREFIX}{layer}.lora_B.weight"] = np.ascontiguousarray(np.asarray(b).T)
    save_file(tensors, str(path))
    return Path(path)
