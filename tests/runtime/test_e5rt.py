"""The ``ane`` backend's e5rt call sequence (e5rt-reference section 2), checked against a stand-in
C library built here with gcc that implements the e5rt symbols with the documented calling
conventions and records every call (tests/runtime/data/e5rt_standin.c)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.cli import main
from anekit.errors import AnekitError
from anekit.runtime import backends, e5rt

SOURCE = Path(__file__).parent / "data" / "e5rt_standin.c"


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:  # noqa: ANN001
    if shutil.which("gcc") is None:
        pytest.skip("the e5rt stand-in is built with gcc")
    out = tmp_path_factory.mktemp("e5rt") / "libe5rt_standin.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)], check=True)
    return out


@pytest.fixture
def log(standin: Path, tmp_path: Path, monkeypatch) -> Path:  # noqa: ANN001
    monkeypatch.setenv("ANEKIT_E5RT_LIBRARY", str(standin))
    path = tmp_path / "calls.log"
    monkeypatch.setenv("E5RT_STANDIN_LOG", str(path))
    return path


def _calls(log: Path) -> list[str]:
    lines = log.read_text().splitlines()
    assert not [line for line in lines if line.startswith("ERROR")], lines
    return lines


def _counter() -> anekit.Graph:
    c = anekit.input("c", (1, 1))
    return anekit.graph([anekit.ops.add(c, np.float32(1.0), name="c_next")])


def _symbols(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


COMPILE = [
    "e5rt_e5_compiler_config_options_create",
    "e5rt_e5_compiler_config_options_set_cache_bundle_location",
    "e5rt_e5_compiler_create_with_config",
    "e5rt_e5_compiler_options_create",
    "e5rt_e5_compiler_options_set_compute_device_types_mask",
    "e5rt_e5_compiler_options_set_force_recompilation",
    "e5rt_e5_compiler_options_set_segmenter",
    "e5rt_e5_compiler_compile",
    "e5rt_program_library_retain_program_function",
    "e5rt_precompiled_compute_op_create_options_create_with_program_function",
    "e5rt_precompiled_compute_op_create_options_set_operation_name",
    "e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers",
    "e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options",
    "e5rt_e5_compiler_options_release",
    "e5rt_e5_compiler_release",
    "e5rt_e5_compiler_config_options_release",
]
BIND = ["retain_{}_port", "e5rt_buffer_object_alloc", "e5rt_buffer_object_get_data_ptr",
        "e5rt_io_port_bind_buffer_object"]  # fmt: skip
RELEASE = [
    "e5rt_execution_stream_operation_release",
    "e5rt_precompiled_compute_op_create_options_release",
    "e5rt_program_function_release",
    "e5rt_program_library_release",
    "e5rt_buffer_object_release",
    "e5rt_buffer_object_release",
    "e5rt_io_port_release",
    "e5rt_io_port_release",
    "e5rt_execution_stream_release",
]


@pytest.mark.parametrize("k", [1, 100])
def test_counter_with_resident_state_follows_the_documented_sequence(log: Path, k: int) -> None:
    program = anekit.compile(_counter(), "m4").program
    sess = program.session("ane", state={"c": "c_next"})
    assert sess.resident == ("c",)
    sess.run_steps(k)
    assert sess.read("c").tolist() == [[float(k)]]  # the stand-in's +1 per step, resident
    program.release("ane")
    lines = _calls(log)
    symbols = _symbols(lines)
    assert symbols[: len(COMPILE)] == COMPILE
    assert "e5rt_e5_compiler_options_set_compute_device_types_mask 0x4" in lines
    assert "e5rt_e5_compiler_options_set_force_recompilation 1" in lines
    assert "e5rt_e5_compiler_options_set_segmenter graph" in lines
    assert lines[7].split()[1].endswith("/model.mil")
    assert "e5rt_precompiled_compute_op_create_options_set_operation_name main" in lines
    assert "e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers 1" in lines
    bind = lines[len(COMPILE) : len(COMPILE) + 8]
    expected = [s.format("input") for s in BIND] + [s.format("output") for s in BIND]
    assert [b.split()[0].replace("e5rt_execution_stream_operation_", "") for b in bind] == expected
    assert bind[0].split()[1] == "c" and bind[4].split()[1] == "c_next"  # alphabetical
    assert bind[1].startswith(
        "e5rt_buffer_object_alloc 49152 type 0 -> "
    )  # uniform surface, CPU type
    assert bind[5].startswith("e5rt_buffer_object_alloc 49152 type 0 -> ")
    out_buffer = bind[5].split()[-1]
    rest = lines[len(COMPILE) + 8 :]
    assert _symbols(rest[:2]) == [
        "e5rt_execution_stream_create",
        "e5rt_execution_stream_encode_operation",
    ]
    # resident state: the input port bound to the output port's buffer, once
    assert rest[2] == f"e5rt_io_port_bind_buffer_object c {out_buffer}"
    assert _symbols(rest[3 : 3 + k]) == ["e5rt_execution_stream_execute_sync"] * k
    assert _symbols(rest[3 + k :]) == RELEASE  # reverse order of creation


def test_program_run_and_cpu_segments(log: Path) -> None:
    """Program.run on ane: inputs written, one execute, outputs read; a graph input of
    another size is padded into the same surface."""
    program = anekit.compile(_counter(), "m4").program
    assert program.run({"c": np.float32([[41.0]])}, "ane")["c_next"].tolist() == [[42.0]]
    assert e5rt.loaded() == 1
    program.release("ane")
    assert e5rt.loaded() == 0
    assert _symbols(_calls(log)).count("e5rt_execution_stream_execute_sync") == 1


def test_at_most_128_programs_per_process(log: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(e5rt, "MAX_LOADED", 2)
    programs = [anekit.compile(_counter(), "m4").program for _ in range(3)]
    programs[0].runners("ane")
    programs[1].runners("ane")
    with pytest.raises(AnekitError, match="(?s)2 programs loaded on the engine.*release"):
        programs[2].runners("ane")
    programs[0].release("ane")  # frees a slot
    programs[2].runners("ane")
    for p in programs:
        p.release("ane")
    assert e5rt.loaded() == 0


def test_a_program_is_used_only_in_the_process_that_compiled_it(log: Path, monkeypatch) -> None:  # noqa: ANN001
    program = anekit.compile(_counter(), "m4").program
    program.runners("ane")
    monkeypatch.setattr(e5rt.os, "getpid", lambda: -1)  # as in a forked child
    with pytest.raises(AnekitError, match="compiled in another process"):
        program.run({"c": np.zeros((1, 1))}, "ane")
    monkeypatch.undo()
    program.release("ane")


def test_a_weight_update_the_engine_ignores_is_reported(log: Path) -> None:
    """The stand-in ignores weights: the probe after an update catches it."""
    from anekit.runtime.weight_update import WeightUpdateError

    x = anekit.input("x", (1, 32))
    w = anekit.constant(np.eye(32, dtype=np.float32), name="w")
    program = anekit.compile(anekit.graph([anekit.ops.matmul(x, w, name="y")]), "m4").program
    program.runners("ane")
    with pytest.raises(WeightUpdateError, match=r"loaded on \['ane'\] still computes with the old"):
        program.update_weights({"w": 2 * np.eye(32, dtype=np.float32)})
    program.release("ane")


def test_elsewhere_a_clear_error(monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.delenv("ANEKIT_E5RT_LIBRARY", raising=False)
    monkeypatch.setattr(e5rt.sys, "platform", "linux")
    reason = backends.get("ane").unavailable()
    assert reason is not None and "macOS" in reason and "Espresso" in reason
    program = anekit.compile(_counter(), "m4").program
    with pytest.raises(AnekitError, match="backend 'ane' cannot run here: it needs macOS"):
        program.session("ane")
    assert main(["doctor"]) == 2
    assert "ane: unavailable: it needs macOS" in capsys.readouterr().out


def test_doctor_reports_against_the_standin(log: Path, capsys) -> None:  # noqa: ANN001
    assert main(["doctor", "--json"]) == 2  # the stand-in's +1 is not the model
    out = capsys.readouterr().out
    assert '"available": true' in out and '"agree": false' in out
    assert '"update_took_effect": false' in out


def test_guarded_state_is_double_buffered_on_the_engine(log: Path) -> None:
    """A guarded state stays resident on the engine as two buffers: after a kept step the
    input port is bound to the buffer the output wrote and the output to the other; a
    discarded step binds nothing, so the state keeps its value. (The stand-in writes its
    first input, ``a``, plus one to every output.)"""
    a, c = anekit.input("a", (1, 1)), anekit.input("c", (1, 1))
    g = anekit.graph([anekit.ops.add(c, a, name="c_next"), anekit.ops.mul(a, np.float32(1.0), name="g")])
    program = anekit.compile(g, "m4").program
    sess = program.session("ane", state={"c": "c_next"}, guard="g")
    assert sess.resident == ("c",)
    kept = []
    for value in (1.0, np.nan, 4.0, np.inf):
        sess.run({"a": np.float32([[value]])})
        kept.append(sess.kept)
    assert kept == [True, False, True, False]
    assert sess.read("c").tolist() == [[5.0]]
    program.release("ane")
    lines = _calls(log)
    binds = [line.split() for line in lines if line.startswith("e5rt_io_port_bind_buffer_object")]
    ports = {"a", "c", "c_next", "g"}
    assert [b[1] for b in binds[:4]] == sorted(ports)  # each port bound once at load
    first = {b[1]: b[2] for b in binds[:4]}
    swaps = binds[4:]  # two kept steps, two rebinds each
    assert [(b[1], b[2]) for b in swaps] == [
        ("c", first["c_next"]), ("c_next", first["c"]), ("c", first["c"]), ("c_next", first["c_next"])
    ]
