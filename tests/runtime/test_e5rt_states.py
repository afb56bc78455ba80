"""The ``ane`` backend runs an export's packages through e5rt with the KV states resident,
checked against the e5rt stand-in library (tests/runtime/data/e5rt_standin.c, which writes
its first input plus one to every output: the values are not the model's, the call
sequence is what is checked). Not yet run on Apple hardware."""

from __future__ import annotations

from pathlib import Path

import pytest

import anekit.llm
from tests.llm.conftest import TINY_LLAMA
from tests.runtime.test_e5rt import _calls, log, standin  # noqa: F401 - fixtures

pytest.importorskip("coremltools")


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "tiny"
    anekit.llm.load(TINY_LLAMA, target="m4", max_context=32).export(out, buckets=(16,))
    return out


def test_exported_chunks_run_through_e5rt_with_resident_states(export: Path, log: Path) -> None:  # noqa: F811
    model = anekit.llm.load(export)
    steps = 4
    result = model.generate([5, 17, 99], max_new_tokens=steps, stop_at_eos=False, backend="ane")
    assert len(result.token_ids) == steps
    lines = _calls(log)
    compiled = [line for line in lines if line.startswith("e5rt_e5_compiler_compile")]
    assert len(compiled) == 2  # prefill_16 and decode, each its own program "main"
    assert all(line.split()[1].endswith("/model.mil") for line in compiled)
    functions = [
        line for line in lines if line.startswith("e5rt_program_library_retain_program_function")
    ]
    assert [f.split()[1] for f in functions] == ["main", "main"]
    # one prefill, then steps - 1 decode calls
    assert [line.split()[0] for line in lines].count("e5rt_execution_stream_execute_sync") == steps
    # every state's input port is bound to its update's output buffer once per program,
    # so decode steps read what the previous step wrote without the host
    states = [f"{k}_cache_{i}" for i in range(2) for k in "kv"]
    for state in states:
        binds = [
            line.split()
            for line in lines
            if line.startswith(f"e5rt_io_port_bind_buffer_object {state} ")
        ]
        assert len(binds) == 4  # per program: its own buffer at load, then the alias
        outputs = {line.split()[1]: line.split()[-1] for line in lines
                   if line.startswith("e5rt_buffer_object_alloc")}  # fmt: skip
        assert outputs  # buffers were allocated
    ports = [
        line.split()[1]
        for line in lines
        if line.startswith("e5rt_execution_stream_operation_retain_input_port")
    ]
    assert set(states) <= set(ports) and "ids" in ports and "write" in ports


def test_the_ane_backend_elsewhere_is_a_clear_error(
    export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anekit.errors import AnekitError
    from anekit.runtime import e5rt

    monkeypatch.delenv("ANEKIT_E5RT_LIBRARY", raising=False)
    monkeypatch.setattr(e5rt.sys, "platform", "linux")
    with pytest.raises(AnekitError, match="macOS"):
        anekit.llm.load(export).generate([5, 17], max_new_tokens=2, backend="ane")
