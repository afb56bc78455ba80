"""The packaged chip database against the issue's chip list, the seeds, ANEForge's gates and real files."""

from __future__ import annotations

import json
import math
import re

import pytest

from anekit import targets
from anekit.errors import TargetError
from anekit.targets import FEATURE_NAMES, Target, figure_paths
from anekit.targets.model import KINDS
from tests.fixtures import FIXTURES as ALL_FIXTURES

# Every chip of the M1 to M5 families, plus the Ultra variants, in generation order.
LISTED = ["m1", "m1-pro", "m1-max", "m2", "m2-pro", "m2-max", "m3", "m3-pro", "m3-max"]
LISTED += ["m4", "m4-pro", "m4-max", "m5", "m5-pro"]
ULTRAS = ["m1-ultra", "m2-ultra", "m3-ultra"]
# Engine per chip family: FACTS section 7 (M1 H13 ... M5 H17).
ENGINES = {"m1": "H13", "m2": "H14", "m3": "H15", "m4": "H16", "m5": "H17"}
# Engine codes: generation codes go to the base chip; h13g is "the M1 engine" (ane-container);
# h17s is the M5 Pro (e5rt-reference).
ALIASES = {
    "h13": "m1",
    "h13g": "m1",
    "h14": "m2",
    "h15": "m3",
    "h16": "m4",
    "h17": "m5",
    "h17s": "m5-pro",
}
FIXTURES = ALL_FIXTURES / "hwx"


def family_base(name: str) -> str:
    return name.split("-")[0]


@pytest.mark.parametrize("name", LISTED + ULTRAS)
def test_every_listed_chip_resolves(name: str) -> None:
    t = targets.get(name)
    assert t.name == name
    assert t.engine == ENGINES[family_base(name)]
    assert t.family == family_base(name)


def test_names_are_every_chip_in_generation_order() -> None:
    assert sorted(targets.names()) == sorted(LISTED + ULTRAS)
    gens = [t.generation for t in targets.all_targets()]
    assert gens == sorted(gens)
    assert [targets.get(n).generation for n in ENGINES] == [13, 14, 15, 16, 17]


@pytest.mark.parametrize(("alias", "chip"), sorted(ALIASES.items()))
def test_engine_code_aliases(alias: str, chip: str) -> None:
    assert targets.get(alias).name == chip
    assert targets.get(alias.upper()).name == chip
    assert alias in targets.get(chip).aliases


def test_alias_set_is_exactly_the_sourced_codes() -> None:
    assert {a: t.name for a, t in targets.aliases().items()} == ALIASES


@pytest.mark.parametrize("spelling", ["M1 Pro", "m1_pro", "m1pro", " M1-PRO "])
def test_names_are_case_and_spelling_insensitive(spelling: str) -> None:
    assert targets.get(spelling).name == "m1-pro"


def test_get_passes_a_target_through() -> None:
    t = targets.get("m4")
    assert targets.get(t) is t


def test_unknown_name_lists_valid_names_and_suggests_the_closest() -> None:
    with pytest.raises(TargetError) as info:
        targets.get("m4-prox")
    message = str(info.value)
    for name in LISTED + ULTRAS + list(ALIASES):
        assert name in message
    assert info.value.hint == "did you mean 'm4-pro'?"
    with pytest.raises(TargetError, match="valid names: m1, m1-pro"):
        targets.get("nosuchchip")


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_every_figure_has_a_source_and_a_kind(t: Target) -> None:
    assert set(t.provenance) == set(figure_paths())
    for path in figure_paths():
        prov = t.provenance_of(path)
        assert prov.source.strip(), path
        assert t.source(path) == prov.source
        assert prov.kind in KINDS
        if prov.kind == "assumption":
            assert "assum" in prov.source.lower(), path
        assert (t.figure(path) is None) == (prov.kind == "unknown"), path
        for alt in prov.alternatives:
            assert alt.source.strip(), path


def test_unknown_feature_and_figure_are_programming_errors() -> None:
    t = targets.get("m4")
    with pytest.raises(KeyError):
        t.supports("softmaxx")
    with pytest.raises(KeyError):
        t.source("perf.nosuch")
    for name in FEATURE_NAMES:
        assert t.supports(name) is getattr(t.features, name)


def test_targets_are_hashable_values() -> None:
    by_target = {t: t.name for t in targets.all_targets()}
    assert len(by_target) == len(LISTED + ULTRAS)
    assert targets.get("m4") == targets.get("h16")


# --- feature gates, from the evidence (ane-compiler table 22.5, ANEForge's gate table) -----------


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_texture_engine_is_absent_only_on_m1(t: Target) -> None:
    texture = (t.features.resize, t.features.affine, t.features.resample, t.features.padding_modes)
    assert texture == ((t.generation >= 14),) * 4


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_dropout_random_sin_cos_from_h15(t: Target) -> None:
    # ANEForge's "A15 class" is H15 (M3): its table says "unsupported on M1 AND A14" (= M2).
    expected = t.generation >= 15
    assert (t.features.dropout, t.features.random, t.features.sin_cos) == (expected,) * 3


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_topk_sort_dynamic_slice_fail_only_on_m1(t: Target) -> None:
    # ane-compiler: the validators accept on M1 and code generation rejects.
    expected = t.generation >= 14
    assert (t.features.topk, t.features.sort, t.features.dynamic_slice) == (expected,) * 3


def test_softmax_decision_records_the_disagreement() -> None:
    for t in targets.all_targets():
        assert t.features.softmax is True
    alternatives = targets.get("m1").provenance_of("features.softmax").alternatives
    assert [a.value for a in alternatives] == [False]


def test_conservative_gates_hold_everywhere() -> None:
    for t in targets.all_targets():
        assert not t.features.sdpa_mask  # Orion #6: fused SDPA ignores causal masks
        assert not t.features.gelu  # Orion: gelu rejected; the tanh form is used
        assert not t.features.conv3d  # ane-compiler: fails backend lowering everywhere
        assert t.features.concat and t.features.dynamic_goc and t.features.instance_norm


def test_a_gated_op_differs_between_chips() -> None:
    m1, m2 = targets.get("m1"), targets.get("m2")
    differing = [f for f in FEATURE_NAMES if m1.supports(f) != m2.supports(f)]
    assert "affine" in differing and "resize" in differing


def test_a_class_follows_aneforge_and_records_the_lineage_sibling() -> None:
    assert {n: targets.get(n).a_class for n in ENGINES} == {
        "m1": "A13",
        "m2": "A14",
        "m3": "A15",
        "m4": "A16",
        "m5": "A16",
    }
    lineage = targets.get("m1").provenance_of("a_class").alternatives
    assert [a.value for a in lineage] == ["A14"]


# --- MIL dialect ----------------------------------------------------------------------------


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_mil_dialect(t: Target) -> None:
    assert t.mil.io_dtype == "fp16"
    if t.generation <= 14:  # maderix PR #6
        assert (t.mil.program_version, t.mil.opset, t.mil.io_dtypes) == ("1.0", "ios16", ("fp16",))
    else:
        assert (t.mil.program_version, t.mil.opset) == ("1.3", "ios18")
        assert "fp32" in t.mil.io_dtypes


def test_sdpa_gate_matches_the_opsets_coremltools_defines_it_in() -> None:
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

    first = min(SSAOpRegistry.core_ops["scaled_dot_product_attention"])
    opsets = {"ios16": ct.target.iOS16, "ios17": ct.target.iOS17, "ios18": ct.target.iOS18}
    for t in targets.all_targets():
        assert t.features.sdpa == (opsets[t.mil.opset] >= first), t.name


# --- limits ---------------------------------------------------------------------------------


def test_register_limits_are_the_h13_field_widths() -> None:
    limits = targets.get("m1").limits  # ane-container listing 23.3
    assert limits.max_spatial_register == (1 << 15) - 1
    assert limits.max_channels_register == (1 << 17) - 1
    assert limits.max_groups == (1 << 13) - 1
    assert limits.max_dma_stride == (1 << 25) - 1  # 26-bit signed


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_limits(t: Target) -> None:
    assert t.limits.max_rank == 5
    # ANEForge _LIMITS: 16384 / kW 13 up to A15 (M3), 65536 / kW 15 from A16 (M4).
    assert t.limits.max_dim == (65536 if t.generation >= 16 else 16384)
    assert t.limits.max_kernel == (15 if t.generation >= 16 else 13)
    assert t.limits.min_kernel == 1
    # Orion #16: a 32,000-channel convolution is rejected, so the cap sits below it.
    assert t.limits.max_channels < 32000 <= t.limits.max_channel_extent
    assert t.limits.max_channels <= t.limits.max_channels_register
    assert math.ceil(50257 / t.limits.max_channels) >= 2  # a GPT-2 vocabulary head splits


# --- on-chip budget and performance ------------------------------------------------------------


def test_m1_on_chip_budget_records_both_sources() -> None:
    m1 = targets.get("m1")
    assert m1.onchip_budget_bytes == 2 * 2**20  # ane-compiler
    alternatives = m1.provenance_of("onchip_budget_bytes").alternatives
    assert {a.value for a in alternatives} == {4 * 2**20}  # tinygrad L2, --memcache-size
    assert targets.get("m4").onchip_budget_bytes == 32 * 2**20  # maderix


def test_m4_throughput_records_conv_stack_and_gemm() -> None:
    m4 = targets.get("m4")
    assert m4.perf.peak_fp16_tflops == 19.0  # maderix deep conv stack
    assert m4.perf.gemm_fp16_tflops == 5.4  # ANEForge GEMM
    assert 5.4 in [a.value for a in m4.provenance_of("perf.peak_fp16_tflops").alternatives]
    assert m4.perf.marketing_fp16_tflops == m4.perf.marketing_tops / 2  # int8 TOPS


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_cost_model_figures(t: Target) -> None:
    p = t.perf
    assert p.peak_fp16_tflops >= p.gemm_fp16_tflops  # 1x1 conv ~3x faster than matmul
    assert p.ane_bandwidth_gbps <= p.bandwidth_gbps
    assert 0 < p.spill_throughput_factor < 1
    assert 0 < p.util_single_op < p.util_deep_graph <= 1
    assert p.dispatch_overhead_us > 0 and p.compile_ms > 0 and p.cpu_gflops > 0
    assert t.process.max_inflight < t.process.max_loaded_programs


def test_measured_figures_from_facts_section_7() -> None:
    """FACTS 7's GEMM peaks are end-to-end rates. The M4 and M5 Pro use them as the peak;
    on the 2 MB-budget chips the GEMMs behind them stream, so the model's peak must be higher
    for its streaming rate (x util x spill) to reach them, and they stay as alternatives."""
    direct = {"m4": 5.4, "m5-pro": 10.0}
    assert {n: targets.get(n).perf.gemm_fp16_tflops for n in direct} == direct
    for name, end_to_end in {"m1": 2.7, "m1-max": 4.6, "m2-pro": 3.4}.items():
        t = targets.get(name)
        assert end_to_end in [
            a.value for a in t.provenance_of("perf.gemm_fp16_tflops").alternatives
        ]
        streamed = t.perf.gemm_fp16_tflops * t.perf.util_deep_graph * t.perf.spill_throughput_factor
        assert streamed >= end_to_end
    assert targets.get("m4").perf.dispatch_overhead_us == 95.0
    assert 63 <= targets.get("m5-pro").perf.dispatch_overhead_us <= 70


def test_ultras_run_one_program_on_one_die() -> None:
    for ultra in ULTRAS:
        t, single = targets.get(ultra), targets.get(ultra.replace("ultra", "max"))
        assert t.ane_cores == 2 * single.ane_cores
        assert t.perf.peak_fp16_tflops == single.perf.peak_fp16_tflops
        assert t.perf.bandwidth_gbps > single.perf.bandwidth_gbps


@pytest.mark.parametrize("t", targets.all_targets(), ids=lambda t: t.name)
def test_variants_share_their_base_chips_engine_facts(t: Target) -> None:
    base = targets.get(t.family)
    assert (t.engine, t.a_class, t.limits, t.features, t.mil) == (
        base.engine,
        base.a_class,
        base.limits,
        base.features,
        base.mil,
    )


def test_to_dict_is_json_with_every_source() -> None:
    for t in targets.all_targets():
        data = json.loads(json.dumps(t.to_dict()))
        assert data["name"] == t.name and data["generation"] == t.generation
        assert set(data["sources"]) == set(figure_paths())
        assert data["perf"]["bandwidth_gbps"] == t.perf.bandwidth_gbps


# --- the real H13 programs: their build banners name the target and the cache size ----------


def test_hwx_fixture_banners_agree_with_the_database() -> None:
    files = sorted(FIXTURES.glob("*.hwx"))
    assert files, f"no .hwx fixtures under {FIXTURES}"
    m1_alternatives = {
        a.value for a in targets.get("m1").provenance_of("onchip_budget_bytes").alternatives
    }
    for path in files:
        banner = path.read_bytes()
        code = re.search(rb"-t (h\d+\w*)", banner)
        memcache = re.search(rb"--memcache-size=(\d+)", banner)
        assert code and memcache, path.name
        assert targets.get(code.group(1).decode()).engine == "H13", path.name
        assert int(memcache.group(1)) in m1_alternatives, path.name
