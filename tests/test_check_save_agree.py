"""`check` and `save` agree: a node `check` places anywhere is one `save` can emit; a node it
cannot emit is an error of `check` (severity "error", code no-mil-lowering), never a silent
CPU placement. Checked over every op of the coverage table, compiled for m1 and m4: the cases
of every MIL lowering (tests/codegen/cases.py) and a graph of each op without one. The zoo
models are checked by tests/test_end_to_end.py (no error on any model it saves)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import anekit
from anekit.codegen.lower import supported_ops
from anekit.errors import AnekitError
from anekit.frontend.builder.tensor import record
from anekit.ir.graph import Graph
from anekit.ir.registry import get_op, op_names
from tests.codegen.cases import ALL_CASES

CHIPS = ("m1", "m4")
RNG = np.random.default_rng(0)


def _f(name: str, shape: tuple[int, ...]) -> anekit.Tensor:
    return anekit.input(name, shape)


def _i(name: str, shape: tuple[int, ...], dtype: str = "int32") -> anekit.Tensor:
    return anekit.input(name, shape, dtype)


def _c(shape: tuple[int, ...], dtype: type = np.float32) -> anekit.Tensor:
    return anekit.constant(RNG.standard_normal(shape).astype(dtype))


def _one(op: str, inputs: list, **attrs: object) -> Callable[[], Graph]:
    def build() -> Graph:
        outs = record(op, inputs, attrs, name="y")
        return anekit.graph(list(outs) if isinstance(outs, tuple) else [outs])

    return build


# a graph of each op without a MIL lowering (inputs as its tests in tests/ir use them)
UNLOWERED: dict[str, Callable[[], Graph]] = {
    "bitwise_and": _one("bitwise_and", [_i("a", (2, 3)), _i("b", (2, 3))]),
    "bitwise_or": _one("bitwise_or", [_i("a", (2, 3)), _i("b", (2, 3))]),
    "bitwise_xor": _one("bitwise_xor", [_i("a", (2, 3)), _i("b", (2, 3))]),
    "bitwise_not": _one("bitwise_not", [_i("x", (2, 3))]),
    "bit_shift": _one("bit_shift", [_i("x", (2, 3)), _i("s", (2, 3))], direction="left"),
    "bitcast": _one("bitcast", [_f("x", (2, 3))], to="int32"),
    "col2im": _one("col2im", [_f("x", (1, 4, 9))], image_shape=(4, 4), block_shape=(2, 2)),
    "cumprod": _one("cumprod", [_f("x", (2, 5))], axis=1),
    "deform_conv": _one(
        "deform_conv", [_f("x", (1, 2, 5, 5)), _c((3, 2, 3, 3)), _f("offset", (1, 18, 3, 3))]
    ),
    "det": _one("det", [_f("x", (2, 4, 4))]),
    "dft": _one("dft", [_f("x", (2, 8, 2))], axis=1, length=8),
    "linear_attention": _one(
        "linear_attention",
        [_f("q", (1, 2, 6, 4)), _f("k", (1, 2, 6, 4)), _f("v", (1, 2, 6, 4))],
        update_rule="linear",
    ),  # fmt: skip
    "max_unpool": _one(
        "max_unpool",
        [_f("x", (1, 2, 2, 3)), _i("idx", (1, 2, 2, 3), "int64")],
        output_shape=(1, 2, 4, 6),
    ),  # fmt: skip
    "roi_align": _one(
        "roi_align", [_f("x", (1, 2, 6, 6)), _f("rois", (3, 4)), _i("b", (3,), "int64")]
    ),
}


def test_the_op_records_say_which_ops_have_no_lowering() -> None:
    """The op record's no_lowering is the codegen table's complement, and each op without a
    lowering has a graph here."""
    declared = {op for op in op_names() if get_op(op).no_lowering}
    assert declared == set(op_names()) - supported_ops()
    assert declared == set(UNLOWERED)


def _agree(graph: Graph, chip: str) -> None:
    compiled = anekit.compile(graph, chip)
    errors = [d for d in compiled.diagnostics if d.severity == "error"]
    if not errors:
        assert compiled.bundle.segments  # save emits every placed node
        return
    assert all(d.code == "no-mil-lowering" for d in errors), errors
    with pytest.raises(AnekitError, match="no MIL lowering"):
        compiled.bundle  # noqa: B018 - building the bundle is what `save` does


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("op", sorted(UNLOWERED))
def test_check_reports_an_error_for_each_op_save_cannot_emit(op: str, chip: str) -> None:
    graph = UNLOWERED[op]()
    compiled = anekit.compile(graph, chip)
    errors = [d for d in compiled.diagnostics if d.severity == "error"]
    assert [d.code for d in errors] == ["no-mil-lowering"], compiled.diagnostics
    assert op in errors[0].message and get_op(op).no_lowering in errors[0].message
    _agree(graph, chip)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_check_and_save_agree_on_every_lowered_op(case, chip: str) -> None:  # noqa: ANN001
    graph, _ = case.build(np.random.default_rng(0))
    _agree(graph, chip)
