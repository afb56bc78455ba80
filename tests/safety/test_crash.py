"""A writer killed (SIGKILL) at every write and rename step: the target path holds the
complete old bundle or the complete new one, and the next write cleans up after it.

The writer is a forked child (cheap: everything is imported already) whose
`anekit.atomic.checkpoint` hook kills it at step N; one test kills a real `anekit compile`
process the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anekit import atomic
from anekit.codegen.bundle import write_bundle
from anekit.errors import FormatError
from anekit.formats.bundle import read_bundle


def _steps(old, new, target: Path, fallback: bool) -> list[str]:
    """The steps of writing ``new`` over ``old``."""
    write_bundle(old, target)
    seen: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(atomic, "checkpoint", seen.append)
        if fallback:
            patch.setattr(atomic, "_renameat2", lambda *a: False)
        write_bundle(new, target)
    return seen


def _killed_at(contents, target: Path, step: int, fallback: bool) -> None:
    pid = os.fork()
    if pid == 0:  # the writer
        try:
            count = [0]

            def checkpoint(_: str) -> None:
                count[0] += 1
                if count[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            atomic.checkpoint = checkpoint
            if fallback:
                atomic._renameat2 = lambda *a: False
            write_bundle(contents, target)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _target_of(path: Path) -> str:
    return read_bundle(path).manifest.target.name  # schema, sizes and every sha256


@pytest.mark.parametrize("fallback", [False, True], ids=["renameat2", "two-renames"])
def test_killed_at_every_step(compiled, tmp_path: Path, fallback: bool,
                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    old, new = compiled["m1"].bundle, compiled["m4"].bundle
    steps = _steps(old, new, tmp_path / "probe.anekit", fallback)
    if fallback:
        monkeypatch.setattr(atomic, "_renameat2", lambda *a: False)
    assert len(steps) >= 6, steps  # temp folder, each file, manifest, swap, removal
    target = tmp_path / "m.anekit"
    write_bundle(old, target)
    seen = []
    for step in range(1, len(steps) + 1):
        _killed_at(new, target, step, fallback)
        if os.path.lexists(target):
            found = _target_of(target)
        else:  # only the fallback, killed between its two renames
            assert fallback and steps[step - 1] == "moved the old folder aside", steps[step - 1]
            atomic.recover_stale(tmp_path, "m.anekit")  # what the next write does first
            found = _target_of(target)
            assert found == "m1"
        seen.append(found)
        write_bundle(old, target)  # the next write: cleans up, and resets for the next step
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.anekit", "probe.anekit"]
        assert _target_of(target) == "m1"
    # killed before the swap: the old bundle; after it: the new one
    assert seen[0] == "m1" and seen[-1] == "m4", list(zip(steps, seen, strict=True))


def test_a_killed_compile_process(model_file: Path, tmp_path: Path, compiled) -> None:
    """A real `anekit compile` killed right after swapping the folders, before removing
    the old one: the new bundle is in place; the old one's folder is left, named as
    anekit's, and the next write removes it."""
    target = compiled["m1"].save(tmp_path / "m.anekit")
    script = textwrap.dedent(f"""
        import os, signal, sys
        from anekit import atomic
        from anekit.cli import main
        def checkpoint(step):
            if step in ("exchanged the folders", "moved the new folder into place"):
                os.kill(os.getpid(), signal.SIGKILL)
        atomic.checkpoint = checkpoint
        sys.exit(main(["compile", {str(model_file)!r}, "-t", "m4", "-o", {str(target)!r}]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert _target_of(target) == "m4"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "m.anekit"]
    assert len(leftovers) == 1 and ".anekit-" in leftovers[0]
    compiled["m1"].save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["m.anekit"]


def test_a_damaged_bundle_is_never_taken_for_a_whole_one(compiled, tmp_path: Path) -> None:
    """The control for the checks above: reading a bundle whose file was cut short fails."""
    target = compiled["m4"].save(tmp_path / "m.anekit")
    weights = next(target.rglob("weight.bin"))
    weights.write_bytes(weights.read_bytes()[:-2])
    with pytest.raises(FormatError, match="bytes, the manifest says"):
        _target_of(target)
