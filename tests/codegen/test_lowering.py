"""Every lowering, checked three ways: the text round-trips through our parser, coremltools'
builder type-checks every op (and infers the types our MIL declares), and the program run on
the simulator agrees with the IR's fp32 reference kernels."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import targets
from anekit.codegen.bundle import BundleContents, build_bundle
from anekit.codegen.lower import supported_ops
from anekit.codegen.mil import whole_graph_segment
from anekit.errors import ModelError
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.runtime.program import from_contents
from tests.codegen.cases import ALL_CASES, CPU_ONLY, Case
from tests.numerics import agreement

# (target, device, CPU weight storage): the engine dialects of both generations, and the CPU
CONFIGS = (("m1", "ane", "fp16"), ("m4", "ane", "fp16"), ("m4", "cpu", "fp32"))
# fp32 paths with fp32 weights: only summation order differs from numpy's kernels
FP32_TOLERANCE = 1e-5
# fp32 activations with fp16 weights (the sim-fp32 backend of an engine program)
FP16_WEIGHTS_TOLERANCE = 3e-3


def _bundle(case: Case, config: tuple[str, str, str]) -> tuple[BundleContents, dict, dict]:
    graph, feeds = case.build(np.random.default_rng(0))
    target, device, weights = config
    contents = build_bundle(
        graph, targets.get(target), [whole_graph_segment(graph, device)], weights=weights
    )  # type: ignore[arg-type]
    return contents, feeds, graph.run(feeds)


def _ids(config: tuple[str, str, str]) -> str:
    return "-".join(config[:2])


PAIRS = [
    pytest.param(case, config, id=f"{case.name}-{_ids(config)}")
    for case in ALL_CASES
    for config in CONFIGS
    if (case.name, config[1]) not in CPU_ONLY
]


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[1] == "ane"], ids=_ids)
def test_exact_gelu_is_refused_in_engine_programs(config: tuple[str, str, str]) -> None:
    (case,) = [c for c in ALL_CASES if c.name == "gelu_approximatenone"]
    with pytest.raises(ModelError, match="exact GELU"):
        _bundle(case, config)


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[1] == "ane"], ids=_ids)
def test_integer_conv_is_refused_in_engine_programs(config: tuple[str, str, str]) -> None:
    (case,) = [c for c in ALL_CASES if c.name == "conv_integer"]
    with pytest.raises(ModelError, match="exact only in an fp32"):
        _bundle(case, config)


@pytest.fixture(scope="module")
def coremltools():  # noqa: ANN201
    import coremltools

    return coremltools


def test_every_ir_op_the_cases_use_has_a_lowering() -> None:
    used: set[str] = set()
    for case in ALL_CASES:
        for n in case.build(np.random.default_rng(0))[0].nodes:
            used.add(n.op)
            if n.op == "ane_layer":  # the main op and the epilogue steps are lowered too
                used |= {n.attrs["main"], *(s.op for s in n.attrs["epilogue"])}
    assert used <= supported_ops()
    # and the cases cover every lowering (Q/DQ, reverse_sequence and grid_sample have their own
    # tests: test_lower_quant.py, test_lower_reverse_sequence.py and test_lower_grid_sample.py)
    own_tests = {"quantize_linear", "dequantize_linear", "reverse_sequence", "grid_sample"}
    assert supported_ops() - used - {"ane_layer"} == own_tests


@pytest.mark.parametrize(("case", "config"), PAIRS)
def test_text_round_trips(case: Case, config: tuple[str, str, str]) -> None:
    contents, _, _ = _bundle(case, config)
    (segment,) = contents.segments
    text = segment.text
    parsed = mil.parse(text)
    assert mil.print_program(parsed, legacy_scalars=segment.legacy_scalars) == text
    if not segment.legacy_scalars:
        assert parsed == segment.program


@pytest.mark.parametrize(("case", "config"), PAIRS)
def test_coremltools_type_checks_every_op(
    case: Case, config: tuple[str, str, str], coremltools
) -> None:  # noqa: ANN001
    from anekit.codegen.mlpackage import _build

    contents, _, _ = _bundle(case, config)
    readers = [
        None if s.weights is None else BlobReader(contents.files[s.weights])
        for s in contents.manifest.segments
    ]
    program = _build(coremltools, contents.manifest, contents.programs, readers)
    function = program.functions["main"]
    assert len(function.outputs) == len(contents.manifest.outputs)


@pytest.mark.parametrize(("case", "config"), PAIRS)
def test_simulated_programs_match_the_reference_kernels(
    case: Case, config: tuple[str, str, str]
) -> None:
    contents, feeds, expected = _bundle(case, config)
    program = from_contents(contents)
    engine = config[1] == "ane"
    for backend, tolerance in (
        ("sim", case.fp16_tolerance if engine else FP32_TOLERANCE),
        ("sim-fp32", FP16_WEIGHTS_TOLERANCE if engine else FP32_TOLERANCE),
    ):
        got = program.run(feeds, backend)
        assert list(got) == list(expected)
        for name, want in expected.items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape
            if want.dtype.kind in "biu":
                if engine and backend == "sim" and want.dtype.kind == "b":
                    # comparisons of fp16-rounded values may flip right at the threshold
                    assert np.mean(got[name] != want) <= 0.02, (backend, name)
                else:
                    np.testing.assert_array_equal(got[name], want, err_msg=f"{backend} {name}")
                continue
            result = agreement(got[name], want)
            assert result.max_relative_error <= tolerance, f"{backend} {name}: {result}"
