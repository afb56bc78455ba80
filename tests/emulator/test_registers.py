"""The emulator refuses any register bit it does not understand, naming the register."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.cli import main
from anekit.emulator import EngineProgram
from anekit.errors import FormatError

from .helpers import HWX, with_register


def _relu_feed() -> dict[str, np.ndarray]:
    return {"image": np.linspace(-2, 2, 77, dtype=np.float32).reshape(1, 1, 1, 77)}


def test_unnamed_bit_is_an_error_naming_the_register():
    data = with_register("relu", 0x4820, lambda w: w | 1 << 31)  # a word no field covers
    with pytest.raises(FormatError, match=r"register 0x04820 sets bits 0x80000000"):
        EngineProgram(data)


def test_named_field_it_does_not_act_on_must_be_zero():
    data = with_register("conv", 0xC804, lambda w: w | 1 << 6)  # NE.MACCfg.MatrixBiasEn
    with pytest.raises(FormatError, match=r"NE\.MACCfg\.MatrixBiasEn = 0x1 is not understood"):
        EngineProgram(data)


def test_field_with_known_values_refuses_others():
    data = with_register("relu", 0x17818, lambda w: (w & ~(3 << 12)) | 1 << 12)  # MemFmt 2 -> 1
    with pytest.raises(FormatError, match=r"TileDMADst\.Fmt\.MemFmt = 0x1 .*known values: 0x2"):
        EngineProgram(data)


def test_unknown_nonlinear_mode_is_refused():
    data = with_register("relu", 0xC804, lambda w: w | 3 << 16)
    with pytest.raises(FormatError, match="NonlinearMode=3"):
        EngineProgram(data)


def test_cache_hints_do_not_change_values():
    plain = EngineProgram.load(HWX / "h13_relu.hwx").run(_relu_feed())["probs"]
    data = with_register("relu", 0x17800, lambda w: (w & ~(0xF << 6)) | 5 << 6)  # CacheHint
    hinted = EngineProgram(data).run(_relu_feed())["probs"]
    np.testing.assert_array_equal(plain, hinted)
    assert plain.min() == 0 and plain.max() == 2


def test_dma_outside_the_program_is_a_format_error():
    data = with_register("relu", 0x17804, lambda w: 0xFFFF << 6)  # destination offset
    with pytest.raises(FormatError, match="lies inside no section"):
        EngineProgram(data).run(_relu_feed())


def test_cli_runs_an_hwx(tmp_path, capsys):
    feed = tmp_path / "x.npy"
    np.save(feed, _relu_feed()["image"])
    out = tmp_path / "out.npz"
    assert main(["run", str(HWX / "h13_relu.hwx"), "--input", f"image={feed}", "-o", str(out)]) == 0
    assert "probs  float32[1x1x1x77]" in capsys.readouterr().out
    stored = _relu_feed()["image"].astype(np.float16).astype(np.float32)  # fp16 on the engine
    np.testing.assert_array_equal(np.load(out)["probs"], np.maximum(stored, 0))


def test_cli_refuses_a_graph_backend_for_an_hwx(tmp_path, capsys):
    feed = tmp_path / "x.npy"
    np.save(feed, _relu_feed()["image"])
    args = ["run", str(HWX / "h13_relu.hwx"), "--input", f"image={feed}", "--backend", "sim"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "does not run .hwx programs" in err and "engine" in err


def test_the_reader_shows_unknown_bits_raw_and_inferred_fields_by_name():
    from anekit.formats import hwx

    td = hwx.parse(with_register("relu", 0x4820, lambda w: w | 1 << 31)).task_descriptors[0]
    assert dict(td.unknown) == {0x4820: 0x80000000}
    doc = hwx.parse(with_register("relu", 0x4820, lambda w: w | 1 << 31)).as_dict()
    assert doc["task_descriptors"][0]["unknown_bits"] == {"0x04820": 0x80000000}
    plain = hwx.read(HWX / "h13_sum.hwx").task_descriptors[0]
    assert not plain.unknown  # every bit Apple's programs set is named (mapped or inferred)
    assert plain.inferred["Planar.Cfg.SecSrc"] == 2 and plain.inferred["Common.ChCfg.Src2En"] == 1


def test_l2_buffers_that_overlap_or_cannot_hold_the_tensor_are_refused():
    # relu: source at L2 0 with 10 units per row; a result base of 5 units overlaps it
    data = with_register("relu", 0x4834, lambda w: 5 << 4)
    with pytest.raises(FormatError, match="L2 result and source buffers overlap"):
        EngineProgram(data)
    # a channel stride of 9 units cannot hold 77 fp16 (10 units)
    data = with_register("relu", 0x480C, lambda w: 9 << 4)
    with pytest.raises(FormatError, match="cannot hold 1 channels of 77 fp16"):
        EngineProgram(data)


def test_a_result_moved_elsewhere_in_l2_gives_the_same_values():
    plain = EngineProgram.load(HWX / "h13_relu.hwx").run(_relu_feed())["probs"]
    moved = EngineProgram(with_register("relu", 0x4834, lambda w: 0x400 << 4)).run(_relu_feed())
    np.testing.assert_array_equal(moved["probs"], plain)
