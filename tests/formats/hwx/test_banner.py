"""The identification banner: compiler, version, target, flags, build modules."""

from __future__ import annotations

import pytest

from anekit.formats.hwx.banner import parse_banner

from .helpers import HWX_FILES, HWX_IDS


def test_zin7_banner_reports_compiler_7_6_4(decoded):
    build = decoded["h13_mul_zin7"].banner
    assert (build.compiler, build.version, build.target) == ("zin_ane_compiler", "7.6.4", "h13")
    # The ANEC module block of the same banner records the version independently.
    anec = next(m for m in build.modules if m.name == "ANEC")
    assert anec.get("ModuleVersion") == "7.6.4"
    assert anec.get("ModuleBundleName") == "com.apple.ANECompilerFramework"
    espresso = next(m for m in build.modules if m.name == "0")
    assert espresso.get("ModuleBundleName") == "com.apple.EspressoFramework"


def test_zin5_banner_reports_compiler_5_4_1(decoded):
    build = decoded["h13_mul_zin5"].banner
    assert (build.compiler, build.version, build.target) == ("zin_ane_compiler", "5.4.1", "h13")
    assert [m.get("ModuleVersion") for m in build.modules] == ["5.4.1"]


@pytest.mark.parametrize(
    "name",
    [
        "h13_relu",
        "h13_sigmoid",
        "h13_conv",
        "h13_gemm",
        "h13_sum",
        "h13_concat",
        "h13_model_golden",
    ],
)
def test_tinygrad_fixtures_were_built_by_4_2_1(decoded, name):
    # fixtures/README.md: these were compiled by zin_ane_compiler v4.2.1.
    build = decoded[name].banner
    assert (build.compiler, build.version, build.target) == ("zin_ane_compiler", "4.2.1", "h13")
    assert build.format == "ANEC v1"
    assert build.output == "./model.hwx"
    assert build.input.endswith(".plist")


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_flags_are_the_option_lines_of_the_banner_but_target_input_output(decoded, path):
    build = decoded[path.stem].banner
    options = [line.strip() for line in build.text.split("\n") if line.strip().startswith("-")]
    expected = [o for o in options if o.split(" ")[0] not in ("-t", "-i", "-o")]
    assert list(build.flags) == expected
    assert "--fl2-cache-mode=resident" in build.flags


def test_relu_was_compiled_from_the_neuron_netplist(decoded):
    assert decoded["h13_relu"].banner.input == "./simple/neuron.plist"
    assert decoded["h13_sum"].banner.input == "./plists/sum.plist"


def test_seed_003_banner_form_with_h13g_target():
    text = (
        "ANEC v1\nzin_ane_compiler v9.509.0\n\t-t h13g\n\t--fl2-cache-mode=resident\n"
        "\t--max-kernel-section-size=134217728\n\t-i /x/model.mil\n\t-o /x/model.hwx.tmp\n"
    )
    build = parse_banner(text)
    assert (build.compiler, build.version, build.target) == ("zin_ane_compiler", "9.509.0", "h13g")
    assert build.flags == ("--fl2-cache-mode=resident", "--max-kernel-section-size=134217728")
    assert (build.input, build.output) == ("/x/model.mil", "/x/model.hwx.tmp")


def test_banner_without_a_compiler_line_still_parses():
    build = parse_banner("something else\n\tnot a flag")
    assert build.compiler is None and build.version is None and build.target is None
    assert build.flags == () and build.modules == ()
