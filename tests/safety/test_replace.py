"""anekit replaces a folder only when it can prove it wrote it, and atomically.

Through the CLI (`compile -o`, `run -o`) and the API (`CompiledModel.save`, `write_bundle`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from anekit import atomic
from anekit.codegen.mlpackage import not_an_mlpackage
from anekit.errors import AnekitError
from anekit.formats.bundle import read_bundle

from .conftest import tree, user_error


def _precious(folder: Path, files: dict[str, str]) -> dict[str, bytes]:
    folder.mkdir()
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return tree(folder)


@pytest.mark.parametrize(
    "files",
    [
        {"index.html": "<html>", "manifest.json": "{}"},  # a web project
        {"notes.txt": "keep me"},
        {"manifest.json": '{"format": "anekit-bundle"}', "a.txt": "x"},  # claims, cannot prove
    ],
    ids=["webapp", "notes", "false-manifest"],
)
def test_save_refuses_a_folder_it_did_not_write(compiled, tmp_path: Path, files) -> None:
    target = tmp_path / "webapp.anekit"
    before = _precious(target, files)
    with pytest.raises(AnekitError, match="refusing to replace") as info:
        compiled["m4"].save(target)
    assert str(target) in str(info.value)
    assert tree(target) == before
    assert sorted(os.listdir(tmp_path)) == ["webapp.anekit"]  # no temporary folder left


def test_compile_refuses_a_folder_it_did_not_write(cli, model_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "notes.anekit"
    before = _precious(target, {"notes.txt": "keep me", "manifest.json": "{}"})
    user_error(cli("compile", model_file, "-t", "m4", "-o", target), str(target),
               "refusing to replace")  # fmt: skip
    assert tree(target) == before


def test_a_bundle_with_one_unlisted_file_is_not_replaced(compiled, tmp_path: Path) -> None:
    target = compiled["m4"].save(tmp_path / "m.anekit")
    (target / "segments" / "my_notes.txt").write_text("mine")
    before = tree(target)
    with pytest.raises(AnekitError, match="does not list 'segments/my_notes.txt'"):
        compiled["m1"].save(target)
    assert tree(target) == before


def test_a_bundle_is_replaced_whole(cli, compiled, model_file: Path, tmp_path: Path) -> None:
    target = compiled["m1"].save(tmp_path / "m.anekit")
    assert read_bundle(target).manifest.target.name == "m1"
    code, _, err = cli("compile", model_file, "-t", "m4", "-o", target)
    assert code == 0, err
    assert read_bundle(target).manifest.target.name == "m4"
    assert sorted(os.listdir(tmp_path)) == ["m.anekit"]
    compiled["m1"].save(target)  # and through the API
    assert read_bundle(target).manifest.target.name == "m1"


def test_an_empty_folder_may_be_written_into(compiled, tmp_path: Path) -> None:
    (tmp_path / "m.anekit").mkdir()
    compiled["m4"].save(tmp_path / "m.anekit")
    assert read_bundle(tmp_path / "m.anekit").manifest.target.name == "m4"


@pytest.mark.parametrize("where", [".", "..", "/"])
def test_save_refuses_a_path_that_names_no_new_folder(compiled, where: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (tmp_path / "keep.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AnekitError):
        compiled["m4"].save(where)
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_save_refuses_a_file_and_a_symlink(compiled, tmp_path: Path) -> None:
    (tmp_path / "file.anekit").write_text("data")
    with pytest.raises(AnekitError, match="is a file"):
        compiled["m4"].save(tmp_path / "file.anekit")
    real = compiled["m4"].save(tmp_path / "real.anekit")
    (tmp_path / "link.anekit").symlink_to(real)
    with pytest.raises(AnekitError, match="symbolic link"):
        compiled["m1"].save(tmp_path / "link.anekit")
    assert (tmp_path / "file.anekit").read_text() == "data"
    assert read_bundle(real).manifest.target.name == "m4"


def test_an_output_folder_that_does_not_exist(cli, compiled, model_file: Path, tmp_path: Path) -> None:
    with pytest.raises(AnekitError, match="does not exist"):
        compiled["m4"].save(tmp_path / "no" / "such" / "m.anekit")
    user_error(cli("compile", model_file, "-o", tmp_path / "nowhere" / "m.anekit"),
               "does not exist", "mkdir")  # fmt: skip


def test_the_fallback_replaces_too(compiled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where renameat2 is missing: two renames, and the same refusals."""
    monkeypatch.setattr(atomic, "_renameat2", lambda *a: False)
    target = compiled["m1"].save(tmp_path / "m.anekit")
    compiled["m4"].save(target)
    assert read_bundle(target).manifest.target.name == "m4"
    assert sorted(os.listdir(tmp_path)) == ["m.anekit"]
    (target / "extra").write_text("x")
    with pytest.raises(AnekitError, match="refusing"):
        compiled["m1"].save(target)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_stale_temporary_folders_of_dead_writers_are_removed(compiled, tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getppid()
    stale = tmp_path / f".m.anekit.anekit-{dead}-0123abcd.tmp"
    running = tmp_path / f".m.anekit.anekit-{alive}-0123abcd.tmp"
    lookalike_file = tmp_path / f".m.anekit.anekit-{dead}-89abcdef.tmp"
    other = tmp_path / f".other.anekit.anekit-{dead}-0123abcd.tmp"  # another target's
    for folder in (stale, running, other):
        folder.mkdir()
        (folder / "weight.bin").write_bytes(b"half")
    lookalike_file.write_text("a file, not anekit's folder")
    compiled["m4"].save(tmp_path / "m.anekit")
    assert not stale.exists()
    assert running.exists() and other.exists() and lookalike_file.exists()


def test_an_old_bundle_moved_aside_by_a_dead_writer_is_put_back(compiled, tmp_path: Path) -> None:
    """The fallback's window: killed between its renames, the old bundle is under a temporary
    name; the next write restores it before going on, so nothing is lost."""
    old = compiled["m1"].save(tmp_path / f".m.anekit.anekit-{_dead_pid()}-0123abcd.old")
    atomic.recover_stale(tmp_path, "m.anekit")
    assert read_bundle(tmp_path / "m.anekit").manifest.target.name == "m1"
    assert not old.exists()


def test_run_output_replaces_only_an_npz(cli, compiled, tmp_path: Path) -> None:
    bundle = compiled["m4"].save(tmp_path / "m.anekit")
    np.save(tmp_path / "x.npy", np.ones((1, 8), np.float32))
    notes = tmp_path / "notes.npz"
    notes.write_text("not an archive")
    user_error(cli("run", bundle, "--input", f"x={tmp_path / 'x.npy'}", "-o", notes),
               "not an .npz archive")  # fmt: skip
    assert notes.read_text() == "not an archive"
    user_error(cli("run", bundle, "--input", f"x={tmp_path / 'x.npy'}", "-o",
                   tmp_path / "no" / "out.npz"), "does not exist")  # fmt: skip
    out = tmp_path / "out.npz"
    for _ in range(2):  # writes, then replaces its own .npz
        code, _, err = cli("run", bundle, "--input", f"x={tmp_path / 'x.npy'}", "-o", out)
        assert code == 0, err
    assert list(np.load(out)) == ["y"]


def test_mlpackage_proof(tmp_path: Path) -> None:
    """What an .mlpackage must look like to be replaced: the items its manifest lists."""
    pkg = tmp_path / "m.mlpackage"
    (pkg / "Data" / "com.apple.CoreML" / "weights").mkdir(parents=True)
    (pkg / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"x")
    (pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin").write_bytes(b"x")
    (pkg / "Manifest.json").write_text(
        '{"itemInfoEntries": {"a": {"path": "com.apple.CoreML/model.mlmodel"},'
        ' "b": {"path": "com.apple.CoreML/weights"}}, "rootModelIdentifier": "a"}'
    )
    assert not_an_mlpackage(pkg) is None
    (pkg / "Data" / "readme.txt").write_text("mine")
    assert "does not list 'Data/readme.txt'" in not_an_mlpackage(pkg)
    (pkg / "Data" / "readme.txt").unlink()
    (pkg / "Manifest.json").write_text("{}")
    assert "no readable Manifest.json" in not_an_mlpackage(pkg)


def test_compile_checks_both_outputs_before_the_work(cli, model_file: Path, tmp_path: Path) -> None:
    """A refused --mlpackage path: nothing is written, not even the bundle."""
    notes = tmp_path / "notes.mlpackage"
    before = _precious(notes, {"todo.txt": "keep me"})
    user_error(cli("compile", model_file, "-o", tmp_path / "m.anekit", "--mlpackage", notes),
               str(notes), "refusing to replace")  # fmt: skip
    assert tree(notes) == before
    assert sorted(os.listdir(tmp_path)) == ["notes.mlpackage"]


def test_a_replaced_file_gets_the_mode_of_a_new_file(tmp_path: Path) -> None:
    """Checkpoints, exported models and weight files are created 0o666 less the umask, like
    any file a program writes (a temporary file's private 0o600 must not leak through)."""
    saved = os.umask(0o027)
    try:
        out = atomic.replace_file(tmp_path / "f.bin", lambda handle: handle.write(b"x"))
    finally:
        os.umask(saved)
    assert out.read_bytes() == b"x" and (out.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temporary file left
