"""Every ```sh and ```python block of README.md runs as written.

Each block runs in a fresh temporary folder holding a copy of what the repository ships
that the README uses (`examples/`, `tests/data/`), so a block may use only those files and
the files its own earlier lines create. A sh block runs line by line (a failing line fails
the test, naming it); `anekit` and `python` are this interpreter with this checkout's
anekit. Lines that are not commands here are skipped, by rule:

- `make demo` / `make test`: the set-up the README's lines run after (this suite is part
  of `make test`);
- a line marked `# macOS only`, except on macOS.

A line whose comment says `exits N` must exit with status N; every other line exits 0.

A block with a line marked `# slow` is a slow test (`-m slow`), still run by `make test`.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONTEXT = ("examples", "tests/data")
FENCE = re.compile(r"^```(sh|python)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
SETUP = re.compile(r"^make (demo|test)\b")
MACOS_ONLY = "# macOS only"


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, code, line number of the fence) for each sh/python block."""
    return [(m[1], m[2], text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def sh_lines(code: str) -> list[str]:
    """The command lines of a sh block: continuations joined, comments and blanks dropped."""
    lines = code.replace("\\\n", " ").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def runnable(line: str) -> bool:
    if SETUP.match(line.strip()):
        return False
    return MACOS_ONLY not in line or platform.system() == "Darwin"


def _params() -> list:
    out = []
    for lang, code, lineno in blocks(README.read_text(encoding="utf-8")):
        marks = [pytest.mark.slow] if "# slow" in code else []
        out.append(pytest.param(lang, code, id=f"{lang}-line{lineno}", marks=marks))
    return out


@pytest.fixture
def workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the shipped files the README uses, and an environment whose `anekit` and
    `python` are this checkout's."""
    work = tmp_path / "clone"
    for rel in CONTEXT:
        shutil.copytree(ROOT / rel, work / rel, ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, cmd in (("anekit", f'"{sys.executable}" -m anekit'), ("python", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["ANEKIT_CACHE_DIR"] = str(tmp_path / "cache")
    env["MPLBACKEND"] = "Agg"
    return work, env


def test_readme_has_blocks():
    langs = [lang for lang, _, _ in blocks(README.read_text(encoding="utf-8"))]
    assert langs.count("sh") >= 2 and langs.count("python") >= 4


def test_readme_has_no_bracketed_options():
    """Optional parts are written as full lines or in prose, never `[--x]` to paste."""
    for lang, code, lineno in blocks(README.read_text(encoding="utf-8")):
        if lang == "sh":
            for line in sh_lines(code):
                command = line.split("  #")[0]
                assert not re.search(r"\[[-a-z]|\w\|\w", command), f"README line {lineno}: {line}"


@pytest.mark.parametrize("lang,code", _params())
def test_readme_block_runs(lang: str, code: str, workdir) -> None:
    work, env = workdir
    if lang == "python":
        proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"block failed:\n{code}\n--- stderr:\n{proc.stderr[-3000:]}"
        return
    for line in sh_lines(code):
        if not runnable(line):
            continue
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        expected = [int(n) for n in re.findall(r"\bexits (\d+)", line.partition("#")[2])]
        assert proc.returncode == (expected[0] if expected else 0), (
            f"README line failed (exit {proc.returncode}): {line}\n--- stdout:\n"
            f"{proc.stdout[-2000:]}\n--- stderr:\n{proc.stderr[-3000:]}"
        )
